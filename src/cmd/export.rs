//! `tfmount export SOURCE OUT`: the engine ([`crate::model::export`]) with the plan's steps on
//! stdout (text, or JSON Lines with `--json`) and one summary line on stderr.

use std::io::Write;
use std::time::Instant;

use crate::cli::{ExportArgs, ExportEdit, ExportTo};
use crate::model::export::{export, Edit, Glob, Options, Step, To};
use crate::model::lines::closed;

fn edits(args: &ExportArgs) -> Result<Vec<Edit>, String> {
    args.edits
        .iter()
        .map(|e| match e {
            ExportEdit::Keep(g) => Glob::new(g).map(Edit::Keep),
            ExportEdit::Drop(g) => Glob::new(g).map(Edit::Drop),
            ExportEdit::WeightsOnly => Ok(Edit::WeightsOnly),
            ExportEdit::Rename(r) => Edit::rename(r),
            ExportEdit::Cast(c) => Edit::cast(c),
            ExportEdit::Set(v) => Edit::set(v),
        })
        .collect()
}

fn json_str(s: &str) -> String {
    serde_json::Value::String(s.to_string()).to_string()
}

/// `tfmount commit MNT OUT`: `export --edits DIR SOURCE OUT`, DIR and SOURCE found from MNT.
pub(crate) fn commit(mut args: ExportArgs) -> i32 {
    let dir = match super::edits::dir_of(&args.source) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("tfmount commit: {e}");
            return 3;
        }
    };
    match crate::formats::edits::Journal::read(&dir).and_then(|j| j.named_source()) {
        Ok(source) => {
            args.source = source.into();
            args.edits_dir = Some(dir);
            run(&args)
        }
        Err(e) => {
            eprintln!("tfmount commit: {e}");
            3
        }
    }
}

pub(crate) fn run(args: &ExportArgs) -> i32 {
    let start = Instant::now();
    let mut edits = match edits(args) {
        Ok(e) => e,
        Err(e) => {
            eprintln!("tfmount export: {e}");
            return 2;
        }
    };
    if let Some(dir) = &args.edits_dir {
        let journal = match crate::formats::edits::Journal::read(dir) {
            Ok(j) => j,
            Err(e) => {
                eprintln!("tfmount export: --edits {e}");
                return 3;
            }
        };
        match crate::model::edits::to_export(&journal) {
            Ok(mut first) => {
                first.append(&mut edits);
                edits = first;
            }
            Err(e) => {
                eprintln!("tfmount export: --edits {}: {e}", dir.display());
                return 1;
            }
        }
    }
    let opts = Options {
        to: args.to.map(|t| match t {
            ExportTo::Tf => To::Tf,
            ExportTo::Safetensors => To::Safetensors,
            ExportTo::Savedmodel => To::SavedModel,
        }),
        shard_size: args.shard_size,
        force: args.force,
        dry_run: args.dry_run,
        no_object_graph: args.no_object_graph,
        variables_from: args.variables_from.clone(),
        by_names: args.names,
        edits,
    };
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    let mut quiet = false;
    let mut step = |s: &Step| {
        if quiet {
            return;
        }
        let line = if args.json {
            match s {
                Step::Drop(k) => format!(
                    "{{\"type\":\"drop\",\"key\":{}}}",
                    json_str(&String::from_utf8_lossy(k))
                ),
                Step::Rename(a, b) => format!(
                    "{{\"type\":\"rename\",\"key\":{},\"to\":{}}}",
                    json_str(&String::from_utf8_lossy(a)),
                    json_str(&String::from_utf8_lossy(b))
                ),
                Step::Set(k, shape, d) => format!(
                    "{{\"type\":\"set\",\"key\":{},\"shape\":{shape:?},\"dtype\":{}}}",
                    json_str(&String::from_utf8_lossy(k)),
                    json_str(&d.display_name())
                ),
                Step::Cast(k, a, b) => format!(
                    "{{\"type\":\"cast\",\"key\":{},\"from\":{},\"to\":{}}}",
                    json_str(&String::from_utf8_lossy(k)),
                    json_str(&a.display_name()),
                    json_str(&b.display_name())
                ),
            }
        } else {
            s.line()
        };
        if let Err(e) = writeln!(out, "{line}") {
            if !closed(&e) {
                eprintln!("tfmount export: stdout: {e}");
            }
            quiet = true;
        }
    };
    // A SOURCE that cannot be opened is exit 3; anything refused after is 1.
    if let Err(e) = crate::model::open::one_checkpoint(&args.source) {
        eprintln!("tfmount export: {e}");
        return 3;
    }
    let r = export(&args.source, &args.out, &opts, &mut step);
    let s = match r {
        Ok(s) => s,
        Err(e) => {
            let _ = out.flush();
            eprintln!(
                "tfmount export: {e}; nothing written at {}",
                args.out.display()
            );
            return 1;
        }
    };
    let ms = start.elapsed().as_millis();
    if args.json {
        let files: Vec<String> = s
            .files
            .iter()
            .map(|f| json_str(&f.display().to_string()))
            .collect();
        let _ = writeln!(
            out,
            "{{\"type\":\"summary\",\"to\":\"{}\",\"out\":{},\"dry_run\":{},\"tensors\":{},\"bytes\":{},\"dropped\":{},\"renamed\":{},\"files\":[{}],\"milliseconds\":{ms}}}",
            s.to.name(),
            json_str(&s.out.display().to_string()),
            s.dry_run,
            s.tensors,
            s.bytes,
            s.dropped,
            s.renamed,
            files.join(",")
        );
    }
    let _ = out.flush();
    eprintln!(
        "export: {} tensors, {} bytes {} {}, {} dropped, {} renamed, {:.3} s",
        s.tensors,
        s.bytes,
        if s.dry_run {
            "would be written to"
        } else {
            "written to"
        },
        s.out.display(),
        s.dropped,
        s.renamed,
        ms as f64 / 1000.0
    );
    0
}
