//! Reference material rendered from the command-line definitions: the man page
//! (`tfmount manpage`, clap_mangen), shell completions (`tfmount completions SHELL`,
//! clap_complete) and the generated part of `docs/cli.md` ([`markdown`]), so that none of them
//! can drift from what the command line accepts; and [`check`], which holds a command line of the
//! documentation's examples to the same definitions (`tests/cli/docs.rs`).

use std::io::Write;

use crate::options::{usage, OPTIONS};

/// One command for documentation: the mount form with every subcommand beside it (the parser
/// keeps them apart, see [`super::is_subcommand`]).
pub(crate) fn full_command() -> clap::Command {
    let subs: Vec<clap::Command> = crate::cli::cli_command()
        .get_subcommands()
        .cloned()
        .collect();
    crate::cli::mount_command()
        .subcommands(subs)
        .args_conflicts_with_subcommands(true)
        .subcommand_negates_reqs(true)
}

/// Writes the man page (roff) to `out`: one page, `tfmount(1)`, whose subcommands are
/// sections of it (no `tfmount-ls(1)` pages exist to refer to). Title, name, description and
/// the option lists are clap_mangen's; the synopsis (with each option's value name), the
/// mount options (one tagged paragraph each) and the examples and exit codes (laid out as
/// `--help` lays them out, not reflowed) are written here.
pub(crate) fn manpage(out: &mut dyn Write) -> std::io::Result<()> {
    let cmd = full_command();
    // `-o`'s list of options is the MOUNT OPTIONS section here.
    let top = cmd.clone().mut_arg("options", |a| {
        a.long_help(
            "Comma-separated mount options (the same option may be given several times; later \
             ones win): see MOUNT OPTIONS. Example: -o allow_other,nocrc,cache_size=128M",
        )
    });
    let man = clap_mangen::Man::new(top.clone());
    man.render_title(out)?;
    man.render_name_section(out)?;
    let mut syn = String::from(".SH SYNOPSIS\n");
    syn.push_str(&synopsis("tfmount", &top));
    syn.push_str(".br\n\\fBtfmount\\fR \\fISUBCOMMAND\\fR [\\fIARGS\\fR]   (");
    let names: Vec<String> = cmd
        .get_subcommands()
        .map(|s| s.get_name())
        .filter(|n| *n != "help")
        .map(|n| format!("\\fB{n}\\fR"))
        .collect();
    syn.push_str(&names.join(", "));
    syn.push_str(": see SUBCOMMANDS)\n");
    out.write_all(syn.as_bytes())?;
    man.render_description_section(out)?;
    man.render_options_section(out)?;
    out.write_all(mount_options().as_bytes())?;
    if let Some(extra) = top.get_after_long_help().or(top.get_after_help()) {
        out.write_all(laid_out(&extra.to_string(), ".SH").as_bytes())?;
    }
    out.write_all(
        b".SH SUBCOMMANDS\nAll but mount and mount-helper need no FUSE; `tfmount SUBCOMMAND --help` prints its section.\n",
    )?;
    // Nested subcommands (`cache ls`) get their own subsection, after their parent's.
    let mut subs: Vec<(String, clap::Command)> = Vec::new();
    for sub in cmd.get_subcommands().filter(|s| s.get_name() != "help") {
        subs.push((format!("tfmount {}", sub.get_name()), sub.clone()));
        for n in sub.get_subcommands().filter(|s| s.get_name() != "help") {
            subs.push((
                format!("tfmount {} {}", sub.get_name(), n.get_name()),
                n.clone(),
            ));
        }
    }
    for (full, sub) in &subs {
        let full = full.clone();
        let sub = sub
            .clone()
            .display_name(full.clone())
            .bin_name(full.clone());
        let about = sub.get_about().map(|a| a.to_string()).unwrap_or_default();
        let mut text = format!(".SS \"{}\"\n{}\n.PP\n", esc(&full), esc(&about));
        text.push_str(&synopsis(&full, &sub));
        text.push_str(".PP\n");
        out.write_all(text.as_bytes())?;
        let m = clap_mangen::Man::new(sub.clone());
        let mut b = Vec::new();
        m.render_description_section(&mut b)?;
        m.render_options_section(&mut b)?;
        // Subsections of this section rather than sections of the page.
        let body = String::from_utf8_lossy(&b)
            .replace(".SH DESCRIPTION\n", "")
            .replace(".SH OPTIONS\n", ".PP\nOptions:\n");
        out.write_all(body.as_bytes())?;
        if let Some(extra) = sub.get_after_long_help().or(sub.get_after_help()) {
            out.write_all(laid_out(&extra.to_string(), ".PP\n").as_bytes())?;
        }
    }
    let v = format!(".SH VERSION\n{}\n", esc(cmd.get_version().unwrap_or("")));
    out.write_all(v.as_bytes())
}

/// `text` escaped for roff: backslashes, hyphens (as minus signs, so that options can be
/// searched and pasted), and a leading `.` or `'` that would be read as a request.
fn esc(text: &str) -> String {
    let t = text.replace('\\', "\\e").replace('-', "\\-");
    match t.chars().next() {
        Some('.') | Some('\'') => format!("\\&{t}"),
        _ => t,
    }
}

/// The synopsis line of `cmd` named `name`: every option with its value's name, then the
/// operands (optional ones in brackets, repeatable ones with `...`).
fn synopsis(name: &str, cmd: &clap::Command) -> String {
    let mut line = format!("\\fB{}\\fR", esc(name));
    let args = || cmd.get_arguments().filter(|a| !a.is_hide_set());
    for a in args().filter(|a| !a.is_positional()) {
        let flag = match (a.get_short(), a.get_long()) {
            (Some(c), _) => format!("-{c}"),
            (None, Some(l)) => format!("--{l}"),
            _ => continue,
        };
        if matches!(flag.as_str(), "-h" | "-V") {
            continue;
        }
        let value = if a.get_action().takes_values() {
            let v = a
                .get_value_names()
                .and_then(|v| v.first())
                .map(|v| v.to_string())
                .unwrap_or_else(|| a.get_id().to_string().to_uppercase());
            format!(" \\fI{}\\fR", esc(&v))
        } else {
            String::new()
        };
        line.push_str(&format!(" [\\fB{}\\fR{value}]", esc(&flag)));
    }
    for a in args().filter(|a| a.is_positional()) {
        let v = a
            .get_value_names()
            .and_then(|v| v.first())
            .map(|v| v.to_string())
            .unwrap_or_else(|| a.get_id().to_string().to_uppercase());
        let many = a.get_num_args().is_some_and(|n| n.max_values() > 1);
        let dots = if many { "..." } else { "" };
        let operand = format!("\\fI{}\\fR{dots}", esc(&v));
        if a.is_required_set() {
            line.push_str(&format!(" {operand}"));
        } else {
            line.push_str(&format!(" [{operand}]"));
        }
    }
    format!("{line}\n")
}

/// The MOUNT OPTIONS section: one tagged paragraph per `-o` option.
fn mount_options() -> String {
    let mut out = String::from(".SH \"MOUNT OPTIONS\"\nGiven as \\fB\\-o\\fR \\fIOPT\\fR[,\\fIOPT\\fR...]; the same option may be given several times, and later ones win.\n");
    for o in OPTIONS {
        out.push_str(&format!(".TP\n\\fB{}\\fR", esc(&usage(o))));
        if let Some(f) = o.flag {
            let p = o
                .value
                .placeholder()
                .map(|p| format!(" {p}"))
                .unwrap_or_default();
            out.push_str(&format!(" (also \\fB\\-\\-{}\\fR{})", esc(f), esc(&p)));
        }
        out.push('\n');
        let mut help = o.help.to_string();
        if !o.default.is_empty() {
            help.push_str(&format!(" Default: {}.", o.default));
        }
        out.push_str(&esc(&help));
        out.push('\n');
    }
    out.push_str(".PP\nSIZE is a byte count with an optional K, M, G or T (powers of 1024) and an optional B or iB: 4096, 64K, 32MiB, 1G. DURATION is seconds, or a number with ms, s or m: 60, 500ms, 2m.\n");
    out
}

/// `--help`'s closing text (examples, output, exit codes) as roff, laid out as the terminal
/// shows it: a line `HEADING:` at the left margin starts a part (a `.SH` section where
/// `heading` is `.SH`, else a paragraph naming it), indented lines keep their columns
/// (no fill), other lines are filled text.
fn laid_out(text: &str, heading: &str) -> String {
    let mut out = String::new();
    let mut nofill = false;
    for line in text.lines() {
        let indented = line.starts_with(' ');
        if nofill && !indented {
            out.push_str(".fi\n");
            nofill = false;
        }
        if line.trim().is_empty() {
            continue;
        }
        if !indented && line.ends_with(':') {
            let title = line.trim_end_matches(':');
            if heading == ".SH" {
                // "SUBCOMMANDS (no FUSE needed; ...)": the words before the parenthesis.
                let (name, rest) = match title.split_once(" (") {
                    Some((n, r)) => (n, format!("({r}")),
                    None => (title, String::new()),
                };
                out.push_str(&format!(".SH \"{}\"\n", esc(name)));
                if !rest.is_empty() {
                    out.push_str(&format!("{}\n", esc(&rest)));
                }
            } else {
                out.push_str(&format!(".PP\n{}:\n", esc(title)));
            }
            continue;
        }
        if indented {
            if !nofill {
                out.push_str(".PP\n.nf\n");
                nofill = true;
            }
            out.push_str(&esc(line));
            out.push('\n');
        } else {
            out.push_str(".PP\n");
            out.push_str(&esc(line));
            out.push('\n');
        }
    }
    if nofill {
        out.push_str(".fi\n");
    }
    out
}

/// Writes the completion script for `shell` to `out`. The script is made in memory first:
/// clap_complete panics when its writer fails, and `out` may be a pipe closed early
/// (`tfmount completions bash | head`), an error the caller decides about.
pub(crate) fn completions(shell: clap_complete::Shell, out: &mut dyn Write) -> std::io::Result<()> {
    let mut cmd = full_command();
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut cmd, "tfmount", &mut script);
    out.write_all(&script)?;
    out.flush()
}

/// The generated part of `docs/cli.md`: the table of mount options, then the `--help` text of
/// the mount form and of every subcommand, as the program prints it.
pub fn markdown() -> String {
    let mut out = String::new();
    out.push_str("| option | flag | default | what it does |\n|---|---|---|---|\n");
    for o in OPTIONS {
        let flag = match (o.flag, o.value.placeholder()) {
            (Some(f), Some(p)) => format!("`--{f} {p}`"),
            (Some(f), None) => format!("`--{f}`"),
            (None, _) => String::new(),
        };
        let default = if o.default.is_empty() {
            if o.no_op {
                "always on".to_string()
            } else {
                "off".to_string()
            }
        } else {
            format!("`{}`", o.default)
        };
        out.push_str(&format!(
            "| `-o {}` | {flag} | {default} | {} |\n",
            // A `|` in a table cell, even in code, is escaped (`direct_io=auto|always|never`).
            usage(o).replace('|', "\\|"),
            o.help.replace('|', "\\|")
        ));
    }
    out.push_str(
        "\nSIZE: a byte count with an optional `K`, `M`, `G` or `T` (powers of 1024) and an \
optional `B` or `iB`: `4096`, `64K`, `32MiB`, `1G`. DURATION: seconds, or a number with `ms`, `s` \
or `m`: `60`, `500ms`, `2m`.\n",
    );
    // A fixed width, so that the text does not depend on the terminal it was generated in.
    let mut mount = crate::cli::mount_command().term_width(100);
    out.push_str("\n#### `tfmount --help`\n\n```text\n");
    out.push_str(mount.render_long_help().to_string().trim_end());
    out.push_str("\n```\n");
    let mut cli = crate::cli::cli_command().term_width(100);
    cli.build();
    for sub in cli.get_subcommands_mut() {
        let name = sub.get_name().to_string();
        if name == "help" {
            continue;
        }
        out.push_str(&format!("\n#### `tfmount {name} --help`\n\n```text\n"));
        out.push_str(sub.render_long_help().to_string().trim_end());
        out.push_str("\n```\n");
        // `tfmount cache ls`, `tfmount cache clear`.
        for nested in sub.get_subcommands_mut() {
            let n = nested.get_name().to_string();
            if n == "help" {
                continue;
            }
            out.push_str(&format!("\n#### `tfmount {name} {n} --help`\n\n```text\n"));
            out.push_str(nested.render_long_help().to_string().trim_end());
            out.push_str("\n```\n");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn man_page_and_completions_render() {
        let mut man = Vec::new();
        manpage(&mut man).expect("render");
        let man = String::from_utf8(man).expect("utf-8");
        assert!(
            man.starts_with(".ie") || man.contains(".TH tfmount"),
            "{}",
            &man[..200]
        );
        for o in OPTIONS {
            let tagged = format!(".TP\n\\fB{}\\fR", esc(&usage(o)));
            assert!(man.contains(&tagged), "MOUNT OPTIONS lacks {}", o.name);
        }
        // The synopsis names each option's value; no page is referred to but this one.
        assert!(
            man.contains("[\\fB\\-o\\fR \\fIOPTIONS\\fR]")
                && man.contains("[\\fB\\-\\-tags\\fR \\fITAGS\\fR]")
                // MOUNTPOINT optional: --nfs-serve has none.
                && man.contains("\\fISOURCE\\fR [\\fIMOUNTPOINT\\fR]\n"),
            "{man}"
        );
        for sub in super::super::SUBCOMMANDS.iter().filter(|s| **s != "help") {
            let page = format!("tfmount\\-{sub}");
            assert!(!man.contains(&page), "refers to a page {page}(1)");
        }
        // The examples and exit codes keep their columns (no fill).
        let codes = man
            .find(".SH \"EXIT CODES\"\n.PP\n.nf\n")
            .expect("EXIT CODES, unfilled");
        assert!(man[codes..].contains("4 bad MOUNTPOINT"), "{man}");
        for sub in ["ls", "cat", "verify", "diff", "completions", "manpage"] {
            assert!(
                man.contains(&format!("tfmount {sub}")),
                "man page lacks {sub}"
            );
        }
        let mut bash = Vec::new();
        completions(clap_complete::Shell::Bash, &mut bash).expect("written");
        let bash = String::from_utf8(bash).expect("utf-8");
        assert!(
            bash.contains("--no-crc") && bash.contains("verify"),
            "{bash}"
        );
    }
}
