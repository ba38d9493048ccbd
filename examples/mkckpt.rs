//! Writes a synthetic V2 checkpoint for benchmarks and scale tests.
//!
//! ```text
//! cargo run --release --example mkckpt -- PREFIX --tensors N \
//!     [--elems E] [--big-gib G] [--depth D] [--shards S] [--snappy] [--alter-every K]
//!     [--tf2 distinct|identical]
//! ```
//!
//! N float32 tensors of E elements each, named in a model-like hierarchy of D path components,
//! e.g. `layer_00042/sub_3/kernel` for D = 3 (`layer_i/leaf` for D = 2, `tensor_i` for D = 1,
//! more `sub_k` levels beyond 3). Leaves cycle through kernel/bias/gamma/beta, each `sub_k`
//! level has 8 entries, and consecutive tensors go to consecutive shards. Contents are
//! deterministic pseudo-random values in [-1, 1). `--big-gib G` adds `big/tensor`, a float32
//! tensor of G GiB written streamed in 1 MiB pieces (shard 0). `--alter-every K` gives every
//! K-th tensor (i % K == K - 1) other values: with the same other arguments, a checkpoint that
//! differs from the default one in 1/K of its tensors (`tfmount diff` benchmarks).
//! `--tf2 MODE` writes a TF2 object-based checkpoint instead: each name is an object path (keys
//! `<name>/.ATTRIBUTES/VARIABLE_VALUE`) and the object graph is stored, the variables' own
//! names (`full_name`) all distinct (the object paths) or all `Variable` (what unnamed
//! `tf.Variable`s get: `names/` then uniquifies N identical names).
//!
//! Prints what it wrote, the time taken, and `first_key=` / `last_key=` lines (bytewise order)
//! that scripts can parse.

use std::io;
use std::path::PathBuf;
use std::time::Instant;

use clap::Parser;
use tfmount::parse::dtype::DType;
use tfmount::testkit::rng::Rng;
use tfmount::testkit::writer::{object_graph, CheckpointWriter, VARIABLE_VALUE_SUFFIX};

const FLOAT: DType = DType(1);
const LEAVES: [&str; 4] = ["kernel", "bias", "gamma", "beta"];
const FANOUT: u64 = 8;

#[derive(Parser, Debug)]
#[command(about = "Write a synthetic TensorFlow V2 checkpoint (tfmount benchmarks)")]
struct Args {
    /// Checkpoint prefix: writes PREFIX.index and PREFIX.data-*-of-*
    prefix: PathBuf,
    /// Number of float32 tensors
    #[arg(long, default_value_t = 1000)]
    tensors: u64,
    /// Elements per tensor
    #[arg(long, default_value_t = 16)]
    elems: u64,
    /// Also write `big/tensor`, a float32 tensor of this many GiB (streamed)
    #[arg(long, default_value_t = 0.0)]
    big_gib: f64,
    /// Path components per tensor name (1 = flat)
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=16))]
    depth: u32,
    /// Number of data shards
    #[arg(long, default_value_t = 1)]
    shards: u32,
    /// Snappy-compress index blocks (TensorFlow does not; tests the reader's Snappy path)
    #[arg(long)]
    snappy: bool,
    /// Give every K-th tensor (i % K == K - 1) other values (0: none)
    #[arg(long, default_value_t = 0)]
    alter_every: u64,
    /// Write a TF2 object-based checkpoint: keys and object graph, variable names distinct
    /// or identical
    #[arg(long, value_parser = ["distinct", "identical"])]
    tf2: Option<String>,
}

/// The name of tensor `i` with `depth` path components.
fn tensor_name(i: u64, depth: u32, width: usize) -> String {
    match depth {
        1 => format!("tensor_{i:0width$}"),
        2 => format!("layer_{:0width$}/{}", i / 4, LEAVES[(i % 4) as usize]),
        _ => {
            let leaf = LEAVES[(i % 4) as usize];
            let mut rest = i / 4;
            let mut subs = Vec::new();
            for _ in 0..depth - 2 {
                subs.push(rest % FANOUT);
                rest /= FANOUT;
            }
            let mut name = format!("layer_{rest:0width$}");
            for s in subs.iter().rev() {
                name.push_str(&format!("/sub_{s}"));
            }
            name.push('/');
            name.push_str(leaf);
            name
        }
    }
}

/// `n` float32 values in [-1, 1) from `rng`, two per draw, little-endian, appended to `out`.
fn fill_f32(rng: &mut Rng, out: &mut Vec<u8>, n: u64) {
    let mut left = n;
    while left > 0 {
        let r = rng.next();
        for half in [r as u32, (r >> 32) as u32]
            .into_iter()
            .take(left.min(2) as usize)
        {
            let f = (half >> 8) as f32 / (1u32 << 23) as f32 - 1.0;
            out.extend_from_slice(&f.to_le_bytes());
        }
        left = left.saturating_sub(2);
    }
}

fn main() -> io::Result<()> {
    let args = Args::parse();
    let start = Instant::now();
    let mut w = CheckpointWriter::new(&args.prefix, args.shards)?.snappy(args.snappy);
    // Width of the numbered component, so names sort in numeric order.
    let top = match args.depth {
        1 => args.tensors,
        2 => args.tensors.div_ceil(4),
        d => args.tensors.div_ceil(4 * FANOUT.pow(d - 2)),
    };
    let width = top.max(1).to_string().len().max(5);
    let mut buf = Vec::with_capacity(args.elems as usize * 4);
    let (mut first, mut last): (Option<String>, Option<String>) = (None, None);
    let mut variables: Vec<(String, String)> = Vec::new();
    for i in 0..args.tensors {
        let path = tensor_name(i, args.depth, width);
        let name = match args.tf2.as_deref() {
            Some(mode) => {
                let full = if mode == "identical" {
                    "Variable".to_string()
                } else {
                    path.clone()
                };
                let key = format!("{path}{VARIABLE_VALUE_SUFFIX}");
                variables.push((path, full));
                key
            }
            None => path,
        };
        buf.clear();
        let altered = args.alter_every > 0 && i % args.alter_every == args.alter_every - 1;
        fill_f32(
            &mut Rng::new(if altered { i ^ (1 << 63) } else { i }),
            &mut buf,
            args.elems,
        );
        w.add(
            name.as_bytes(),
            FLOAT,
            &[args.elems],
            &buf,
            (i % args.shards as u64) as u32,
        )?;
        if first.as_ref().is_none_or(|f| name < *f) {
            first = Some(name.clone());
        }
        if last.as_ref().is_none_or(|l| name > *l) {
            last = Some(name);
        }
    }
    if args.tf2.is_some() {
        w.add_object_graph(&object_graph(&variables))?;
    }
    let small_secs = start.elapsed().as_secs_f64();
    let mut big_bytes = 0u64;
    if args.big_gib > 0.0 {
        let elems = (args.big_gib * (1u64 << 30) as f64 / 4.0).round() as u64;
        big_bytes = elems * 4;
        let mut rng = Rng::new(0xb16);
        let mut chunk = Vec::with_capacity(1 << 20);
        w.add_streamed(b"big/tensor", FLOAT, &[elems], big_bytes, 0, |out| {
            let mut left = elems;
            while left > 0 {
                let n = left.min(1 << 18);
                chunk.clear();
                fill_f32(&mut rng, &mut chunk, n);
                out.write_all(&chunk)?;
                left -= n;
            }
            Ok(())
        })?;
        let k = "big/tensor".to_string();
        if first.as_ref().is_none_or(|f| k < *f) {
            first = Some(k.clone());
        }
        if last.as_ref().is_none_or(|l| k > *l) {
            last = Some(k);
        }
    }
    let summary = w.finish()?;
    let secs = start.elapsed().as_secs_f64();
    println!(
        "wrote {} tensors of {} float32 elements (depth {}, {} shard(s){}) in {:.2}s",
        args.tensors,
        args.elems,
        args.depth,
        args.shards,
        if args.snappy { ", snappy" } else { "" },
        small_secs
    );
    if big_bytes > 0 {
        println!(
            "wrote big/tensor: {} bytes ({:.3} GiB) in {:.2}s",
            big_bytes,
            big_bytes as f64 / (1u64 << 30) as f64,
            secs - small_secs
        );
    }
    println!(
        "index: {} entries, {} blocks, {} bytes; data: {} bytes; total {:.2}s",
        summary.entries, summary.blocks, summary.index_bytes, summary.data_bytes, secs
    );
    println!("prefix={}", args.prefix.display());
    if let (Some(f), Some(l)) = (first, last) {
        println!("first_key={f}");
        println!("last_key={l}");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert_eq!(tensor_name(42, 1, 5), "tensor_00042");
        assert_eq!(tensor_name(42, 2, 5), "layer_00010/gamma");
        // i = 4 * (8 * layer + sub) + leaf
        assert_eq!(
            tensor_name(4 * (8 * 42 + 3), 3, 5),
            "layer_00042/sub_3/kernel"
        );
        assert_eq!(
            tensor_name(4 * (8 * (8 * 7 + 1) + 2) + 1, 4, 5),
            "layer_00007/sub_1/sub_2/bias"
        );
    }
}
