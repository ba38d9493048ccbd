//! Reference material rendered from the command-line definitions: the man page
//! (`tfmount manpage`, clap_mangen), shell completions (`tfmount completions SHELL`,
//! clap_complete) and the generated part of `docs/cli.md` ([`markdown`]), so that none of them
//! can drift from what the command line accepts.

use std::io::Write;

use crate::options::{usage, OPTIONS};

/// One command for documentation: the mount form with every subcommand beside it (the parser
/// keeps them apart, see [`super::is_subcommand`]).
pub fn full_command() -> clap::Command {
    let subs: Vec<clap::Command> = super::cli_command().get_subcommands().cloned().collect();
    super::mount_command()
        .subcommands(subs)
        .args_conflicts_with_subcommands(true)
        .subcommand_negates_reqs(true)
}

/// Writes the man page (roff) to `out`.
pub fn manpage(out: &mut dyn Write) -> std::io::Result<()> {
    let cmd = full_command();
    let man = clap_mangen::Man::new(cmd.clone());
    let mut buf = Vec::new();
    man.render(&mut buf)?;
    out.write_all(&buf)?;
    // One section per subcommand, with its own options.
    for sub in cmd.get_subcommands().filter(|s| s.get_name() != "help") {
        let full = format!("tfmount {}", sub.get_name());
        let sub = sub.clone().display_name(full.clone()).bin_name(full);
        let m = clap_mangen::Man::new(sub);
        let mut b = Vec::new();
        m.render_name_section(&mut b)?;
        m.render_synopsis_section(&mut b)?;
        m.render_description_section(&mut b)?;
        m.render_options_section(&mut b)?;
        m.render_extra_section(&mut b)?;
        // Subsections of this page rather than pages of their own.
        let text = String::from_utf8_lossy(&b).replace(".SH ", ".SS ");
        out.write_all(format!(".SH \"{}\"\n", sub_title(&text)).as_bytes())?;
        out.write_all(text.as_bytes())?;
    }
    Ok(())
}

fn sub_title(text: &str) -> String {
    // The NAME section's first line of text: "tfmount\\-ls \\- List ..."
    text.lines()
        .find(|l| !l.starts_with('.'))
        .unwrap_or("")
        .replace('"', "")
}

/// Writes the completion script for `shell` to `out`.
pub fn completions(shell: clap_complete::Shell, out: &mut dyn Write) {
    let mut cmd = full_command();
    clap_complete::generate(shell, &mut cmd, "tfmount", out);
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
    let mut mount = super::mount_command().term_width(100);
    out.push_str("\n#### `tfmount --help`\n\n```text\n");
    out.push_str(mount.render_long_help().to_string().trim_end());
    out.push_str("\n```\n");
    let mut cli = super::cli_command().term_width(100);
    cli.build();
    for sub in cli.get_subcommands_mut() {
        let name = sub.get_name().to_string();
        if name == "help" {
            continue;
        }
        out.push_str(&format!("\n#### `tfmount {name} --help`\n\n```text\n"));
        out.push_str(sub.render_long_help().to_string().trim_end());
        out.push_str("\n```\n");
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
            assert!(man.contains(o.name), "man page lacks {}", o.name);
        }
        for sub in ["ls", "cat", "verify", "diff", "completions", "manpage"] {
            assert!(
                man.contains(&format!("tfmount {sub}")),
                "man page lacks {sub}"
            );
        }
        let mut bash = Vec::new();
        completions(clap_complete::Shell::Bash, &mut bash);
        let bash = String::from_utf8(bash).expect("utf-8");
        assert!(
            bash.contains("--no-crc") && bash.contains("verify"),
            "{bash}"
        );
    }
}
