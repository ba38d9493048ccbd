//! The kernels measured in-process (criterion; `cargo bench --bench kernels`): the statistics of
//! `stats/` over a float32 tensor, the value comparison of `diff --values`, the streaming CRC-32C
//! check of served bytes, and parsing an `.index` table. Small inputs (a few MiB): these are the
//! loops, not the mount; `scripts/bench.py` measures the mount against its baselines.

use std::hint::black_box;
use std::sync::Arc;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use tfmount::parse::dtype::DType;
use tfmount::parse::table::{NoBlockStore, Table};
use tfmount::render::stats;
use tfmount::testkit::kernels;
use tfmount::testkit::rng::Rng;
use tfmount::testkit::writer::TableBuilder;

const MIB: usize = 1 << 20;

/// DT_FLOAT (tensorflow/core/framework/types.proto).
fn f32_dtype() -> DType {
    DType(1)
}

/// `n` float32 values in [-1, 1), as little-endian bytes.
fn floats(n: usize, seed: u64) -> Vec<u8> {
    let mut r = Rng::new(seed);
    (0..n)
        .flat_map(|_| ((r.next() >> 40) as f32 / (1u64 << 23) as f32 - 1.0).to_le_bytes())
        .collect()
}

fn stats_f32(c: &mut Criterion) {
    let bytes = floats(MIB, 1); // 4 MiB
    let mut g = c.benchmark_group("stats");
    g.throughput(Throughput::Bytes(bytes.len() as u64));
    g.bench_function("f32_4MiB", |b| {
        b.iter(|| stats::compute(f32_dtype(), black_box(&bytes)).expect("stats"))
    });
    g.finish();
}

fn compare_values(c: &mut Criterion) {
    let a = floats(MIB, 2);
    let b = floats(MIB, 3);
    let mut g = c.benchmark_group("diff_values");
    g.throughput(Throughput::Bytes(2 * a.len() as u64));
    g.bench_function("f32_4MiB", |bn| {
        bn.iter(|| kernels::compare_values(f32_dtype(), black_box(&a), black_box(&b), 0.0, 0.0))
    });
    g.finish();
}

fn crc_stream(c: &mut Criterion) {
    let data = floats(4 * MIB, 4); // 16 MiB
    let want = crc32c::crc32c(&data);
    let mut g = c.benchmark_group("crc32c_stream");
    g.throughput(Throughput::Bytes(data.len() as u64));
    g.bench_function("16MiB_in_1MiB_pieces", |b| {
        b.iter(|| {
            assert_eq!(
                kernels::stream_check(black_box(&data), want, MIB),
                Some(true)
            );
        })
    });
    g.finish();
}

fn table_parse(c: &mut Criterion) {
    let mut t = TableBuilder::new(Vec::new());
    for i in 0..20_000u32 {
        let key = format!("layer_{:05}/sub_{}/kernel", i / 8, i % 8);
        t.add(key.as_bytes(), &[0u8; 40]).expect("add");
    }
    let (bytes, _) = t.finish().expect("finish");
    let bytes: Arc<Vec<u8>> = Arc::new(bytes);
    let mut g = c.benchmark_group("table");
    g.throughput(Throughput::Bytes(bytes.len() as u64));
    g.bench_function("open_and_parse_every_block_20k", |b| {
        b.iter(|| {
            let t = Table::open(bytes.clone(), Arc::new(NoBlockStore)).expect("open");
            let mut n = 0;
            for i in 0..t.num_blocks() {
                n += t.block(i as u32).expect("block").len();
            }
            assert_eq!(n, 20_000);
        })
    });
    g.finish();
}

criterion_group!(
    kernels_group,
    stats_f32,
    compare_values,
    crc_stream,
    table_parse
);
criterion_main!(kernels_group);
