#!/usr/bin/env python3
"""tfmount's benchmark harness. Run by hand, NOT in CI:

    scripts/bench.py [--only SECTION|ROW[,...]] [--reps N] [--json FILE] [--before OLD.json]
    scripts/bench.py --list                   # every row: section, what, setup, command, target

A declarative table of ROWS (below): each row names what it measures, the command(s) timed, the
baseline measured in the same run (and the same repetitions), the target (an operator and a
value) and the unit. The SECTIONS measure: each writes its data (synthetic checkpoints from
examples/mkckpt, models from the writers' own Pythons), mounts, and records every run of every
timing into samples; each row is then computed from the medians of those samples. The harness
prints one table (row, value, baseline, ratio, target, PASS/MISS), writes every row and every
run as JSON (`--json FILE`, default WORK/bench.json, path printed) and, with `--before
OLD.json`, prints each row's figure against a previous run's: a closing note's before/after is
one command. A row whose tool is missing (nginx, moto_server, aria2c, a Python with TensorFlow,
Keras, Orbax...) is SKIPPED, naming what is missing. Ratios are against a baseline of this run;
a MISS stays a MISS; timings never live in tests.

Sections (`--only NAME`; the old `ONLY=NAME scripts/bench.sh` names; default: every section but
cache, orbax and issue19, as scripts/bench.sh ran):
  read        1, 2: cold and warm dd bs=1M of a BIG_GIB float32 tensor through a fresh mount vs
              memfuse (examples/memfuse.rs) serving the same bytes; dd of the data file for scale
  startup     3: `tfmount -f` until `cat KEY.shape` succeeds, 1k and 1M tensors
  walk        4: find MNT/variables -name '*.shape' | xargs cat, WALK_TENSORS tensors, vs a plain
              tree, vs memfuse of it (and memfuse in its own session, setsid); 100k vs
              tf.train.list_variables (TF_PYTHON)
  tf2names    15: TF2 object-based checkpoints, start -> first cat at 20k/1M variables; ls names/
  graph       6: ls of a 100k-node graph, cat of one node; ls of a plain 100k-file directory
  rss         5: the daemons' largest RssAnon after 1-4 (and 6)
  cli         7: verify vs dd; diff --stats of 100k-tensor checkpoints; ls -R vs find
  v1          8: V1 float32 (V1_MIB) and int64 tensors read, vs V2 (TF_PYTHON writes them)
  views       9: model.safetensors vs .bin; header of a 100k model.safetensors; stats/; text/
  direct_io   12: direct_io=never/auto vs dd, memfuse (page cache, --direct-io); the walk; cat/cp/py
  remote      10: moto_server (S3) and nginx (HTTP): requests, bytes, reads vs curl, diff on S3
  stream_crc  13: one fetch per byte over http:// (nginx plain and limit_rate 100m) vs curl
  keras       11: a ~1 GiB .keras (gen_keras_bench.py; KERAS_PYTHON): start -> stat, read, RSS
  tflite      14: a ~100 MB .tflite (gen_tflite.py --big): start -> stat, cold/warm read
  whole_tree  16: du and diff -rq of two WHOLE_MIB checkpoints' mounts
  python      17: the Python module (scripts/bench_python.py) vs TensorFlow, safetensors, h5py
  floor       20: load_file, cold/direct_io/warm dd vs memfuse; daemon CPU per GiB
  diff_values 21: diff --values of two 1 GiB checkpoints vs cat of both
  tfjs_floor  22: a 1 GiB TF.js weight in 256 shards vs memfuse
  export      23: tfmount export of a 1 GiB TF2 checkpoint vs TensorFlow's write of the same
              variables (tf.train.Checkpoint.write, TF_PYTHON) and cp of its files, to tmpfs
              (/dev/shm) and to BENCH_TMP's disk; the export's largest RssAnon
  nfs         24: tfmount --nfs-serve read by libnfs's nfs-cat (a BIG_GIB tensor) and nfs-ls -R
              (WALK_TENSORS tensors) vs nfs-ganesha (FSAL VFS) serving the same bytes from tmpfs
  edit        25: -o edit: cp of a 256 MiB .npy onto a tensor vs cp to a local directory; ls -R
              of WALK_TENSORS tensors' variables/ after 1,000 edits vs none
  orbax       18: a 1 GiB Orbax checkpoint (ORBAX_PYTHON; scripts/bench_orbax.py)
  cache       19: object storage at scale: nginx limit_rate RATE behind latency_proxy (LAT_MS)
  issue19     issue 19's table, TFMOUNT_BEFORE and this tree alternating (needs TFMOUNT_BEFORE)

Environment: REPS (3), BIG_GIB (1), WALK_TENSORS (20000), V1_MIB (1024), WHOLE_MIB (200),
REPS_MOTO (REPS), LAT_MS (20), RATE (100m), BENCH_TMP (/tmp), TFMOUNT_ARGS (extra daemon
arguments), TFMOUNT_BEFORE (an older tfmount binary, measured alternating in the same
repetitions where the section says so), CARGO_TARGET_DIR, KERAS_BENCH_FILE / TFLITE_BENCH_FILE
(reused, kept). Pythons, found from the environment, never from one machine: TF_PYTHON,
KERAS_PYTHON, CACHE_PYTHON, ORBAX_PYTHON, and the test venv TFMOUNT_TEST_VENV (default
~/.cache/tfmount-test-venv, what scripts/test.sh installs). The harness itself is Python 3's
standard library only.

The machine is probably shared and noisy: compare ratios, not absolute figures, and re-run
before believing a MISS.
"""

import argparse
import json
import math
import os
import random
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass, field

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NAN = float("nan")


def env_int(name, default):
    return int(os.environ.get(name) or default)


def env_float(name, default):
    return float(os.environ.get(name) or default)


# ---------------------------------------------------------------------------------------------
# expressions over the medians of the samples: what a row's value and baseline are
# ---------------------------------------------------------------------------------------------
class Expr:
    def __truediv__(self, o):
        return Op("/", self, lift(o))

    def __add__(self, o):
        return Op("+", self, lift(o))

    def __sub__(self, o):
        return Op("-", self, lift(o))

    def __mul__(self, o):
        return Op("*", self, lift(o))


def lift(x):
    return x if isinstance(x, Expr) else Const(x)


@dataclass
class Const(Expr):
    x: float

    def eval(self, m, v):
        return float(self.x)

    def keys(self, v):
        return []

    def __str__(self):
        return f"{self.x:g}"


@dataclass
class K(Expr):
    """The median of the runs recorded under KEY ({v}: the version, after or before)."""

    key: str
    how: str = "median"

    def eval(self, m, v):
        return m(self.key.format(v=v), self.how)

    def keys(self, v):
        return [self.key.format(v=v)]

    def __str__(self):
        return self.key if self.how == "median" else f"{self.how}({self.key})"


def Max(key):
    return K(key, "max")


@dataclass
class Op(Expr):
    op: str
    a: Expr
    b: Expr

    def eval(self, m, v):
        a, b = self.a.eval(m, v), self.b.eval(m, v)
        if math.isnan(a) or math.isnan(b):
            return NAN
        if self.op == "/":
            return math.inf if b == 0 else a / b
        return {"+": a + b, "-": a - b, "*": a * b}[self.op]

    def keys(self, v):
        return self.a.keys(v) + self.b.keys(v)

    def __str__(self):
        return f"({self.a} {self.op} {self.b})"


# ---------------------------------------------------------------------------------------------
# the table
# ---------------------------------------------------------------------------------------------
@dataclass
class Row:
    name: str  # today's figure id: "1", "19d", "issue19.cold"
    section: str  # the section that measures it (--only)
    what: str  # what it measures
    value: Expr  # the measured figure (median of this run)
    unit: str  # of value (and baseline): s, B, MiB, ticks, x ...
    base: Expr = None  # the baseline, measured in the same run (None: the value stands alone)
    ratio: str = "base/value"  # or "value/base": the figure the target applies to
    target: tuple = None  # (op, x) on the ratio (or the value without baseline); None: info
    cmd: str = ""  # the command timed (and its setup), for --list and the JSON
    versions: bool = False  # also for TFMOUNT_BEFORE: the row repeated as NAME@before


def R(name, section, what, value, unit="s", base=None, ratio="base/value", target=None, cmd="", versions=False):
    return Row(name, section, what, value, unit, base, ratio, target, cmd, versions)


MNT_DD = "dd if=MNT/variables/big/tensor.bin of=/dev/null bs=1M"
WALK = "find MNT/variables -name '*.shape' | xargs cat"

ROWS = [
    # 1, 2: sequential reads
    R("1", "read", "cold sequential read of the BIG_GIB tensor, fresh mount", K("cold.{v}"),
      base=K("mf.cold"), target=(">=", 0.9), versions=True,
      cmd=f"{MNT_DD} on a fresh mount; baseline: dd of memfuse's copy, fresh memfuse mount"),
    R("2", "read", "warm re-read of the same, same mount", K("warm.{v}"), base=K("mf.warm"),
      target=(">=", 0.9), versions=True, cmd=f"{MNT_DD} again; baseline: memfuse's warm re-read"),
    R("1/2.dd", "read", "dd of the .data file itself (page cache warm), for scale", K("dd"),
      cmd="dd if=big/ckpt.data-00000-of-00001 of=/dev/null bs=1M"),
    # 3: time to first answer
    R("3a", "startup", "start -> first cat of a .shape, 1k tensors", K("start.t1k"),
      cmd="tfmount -f t1k MNT &; poll cat MNT/variables/LAST.shape"),
    R("3b", "startup", "start -> first cat of a .shape, 1M tensors", K("start.t1m"),
      target=("<", 0.2), cmd="tfmount -f t1m MNT &; poll cat MNT/variables/LAST.shape"),
    R("3c", "startup", "1M / 1k start", K("start.t1m"), base=K("start.t1k"), ratio="value/base",
      target=("<=", 2), cmd="as 3a, 3b"),
    # 4: the metadata walk
    R("4", "walk", "walk of WALK_TENSORS tensors, mount / plain directory tree", K("walk.{v}"),
      base=K("walk.plain"), ratio="value/base", target=("<=", 2), versions=True,
      cmd=f"{WALK} on a fresh mount; baseline: the same over a plain copy of variables/"),
    R("4.memfuse", "walk", "same walk, mount / memfuse of the plain tree", K("walk.{v}"),
      base=K("walk.mf"), ratio="value/base", versions=True, cmd="baseline: memfuse of the plain tree"),
    R("4.session", "walk", "same walk, mount / memfuse in a session of its own (setsid)", K("walk.{v}"),
      base=K("walk.mfs"), ratio="value/base", target=("<=", 1.1), versions=True,
      cmd="baseline: setsid memfuse of the plain tree, as tfmount's daemon runs"),
    R("4.floor", "walk", "memfuse / plain (what FUSE alone costs)", K("walk.mf"), base=K("walk.plain"),
      ratio="value/base", cmd="the two baselines of 4"),
    R("4.100k", "walk", "100k tensors: the walk / tf.train.list_variables (TF imported)", K("walk.100k"),
      base=K("tf.list"), ratio="value/base", cmd=f"{WALK} of t100k; tf.train.list_variables in-process (TF_PYTHON)"),
    # 15: TF2 names
    *[R(f"15.{n}.{m}", "tf2names", f"TF2 {n} variables, names {m}: start -> first cat of a .shape",
        K(f"start.tf2_{n}_{m}"), base=K("start.t1k"), ratio="value/base",
        target=("<", 0.05 if n == "20k" else 0.1), cmd=f"mkckpt --tf2 {m}; as 3 (1k plain tensors: baseline)")
      for n in ("20k", "1m") for m in ("distinct", "identical")],
    R("15.names", "tf2names", "ls -f MNT/names | wc -l of 1M identically named variables", K("tf2.ls"),
      target=("<", 2), cmd="ls -f MNT/names | wc -l"),
    # 6: graph
    R("6a", "graph", "ls of graph/ of a 100k-node graph (fresh mount: indexes the nodes)", K("graph.ls"),
      base=K("graph.plain"), ratio="value/base", cmd="ls MNT/graph | wc -l; baseline: ls of a plain 100k-file dir"),
    R("6b", "graph", "then cat of one node's .pbtxt", K("graph.cat"), cmd="cat MNT/graph/node_054321.pbtxt"),
    # 5: memory
    R("5", "rss", "the daemons' largest RssAnon after 1-4 and 6", Max("rss"), unit="MiB",
      target=("<=", 64), cmd="/proc/PID/status RssAnon of the mount's processes after each section's last run"),
    # 7: subcommands
    R("7a", "cli", "tfmount verify of the BIG_GIB tensor vs dd of its data file", K("verify"), base=K("verify.dd"),
      target=(">=", 0.5), cmd="tfmount verify big/ckpt; baseline: dd of the data file"),
    R("7b", "cli", "diff --stats of two 100k-tensor checkpoints (1% differ)", K("diff100k"), target=("<", 1),
      cmd="tfmount diff --stats t100k t100k_b"),
    R("7b.bytes", "cli", "diff: data bytes read", K("diff100k.bytes"), unit="B", target=("<=", 0),
      cmd="the 'data bytes read' tfmount diff prints"),
    R("7c", "cli", "ls -R of 100k tensors; baseline: find over a fresh mount", K("lsR"), base=K("lsR.find"),
      cmd="tfmount ls -R t100k | wc -l; find MNT -mindepth 1 | wc -l"),
    # 8: V1
    R("8a", "v1", "V1 float32 V1_MIB MiB read: V2 / V1", K("v1.f32.v1.{v}"), base=K("v1.f32.v2.{v}"),
      versions=True, cmd="dd of MNT/variables/f32.bin, V1 mount and V2 mount (TF's savers)"),
    R("8b", "v1", "V1 int64 V1_MIB/2 MiB (varints) read: V2 / V1", K("v1.i64.v1.{v}"), base=K("v1.i64.v2.{v}"),
      target=(">=", 0.7), versions=True, cmd="dd of MNT/variables/i64.bin, V1 and V2 mounts"),
    R("8b.cpu", "v1", "int64: daemon CPU ticks per read, V1 / V2", K("v1.i64.c1.{v}"), unit="ticks",
      base=K("v1.i64.c2.{v}"), ratio="value/base", versions=True, cmd="/proc/PID/stat utime+stime around the read"),
    R("8.dd", "v1", "dd of the whole V1 file", K("v1.dd"), cmd="dd if=v1.ckpt of=/dev/null bs=1M"),
    # 9: views
    R("9a", "views", "sequential read of model.safetensors vs the .bin", K("views.st"), base=K("views.bin"),
      target=(">=", 0.9), cmd="dd of MNT/model.safetensors; baseline: dd of MNT/variables/big/tensor.bin"),
    R("9b", "views", "100k tensors: stat + header of model.safetensors", K("views.hdr"), target=("<", 1),
      cmd="stat; head -c 8+LEN MNT/model.safetensors"),
    R("9c", "views", "stats/ of the big tensor", K("views.stats"), cmd="cat MNT/stats/big/tensor.txt"),
    R("9c.rss", "views", "RssAnon after stats/", Max("views.stats.rss"), unit="MiB", cmd="after 9c"),
    R("9d", "views", "text/: first 100 bytes", K("views.head"), cmd="head -c 100 MNT/text/big/tensor.txt"),
    R("9d.cat", "views", "text/: cat of the whole text, MB/s", K("views.text.mbps"), unit="MB/s",
      cmd="cat MNT/text/big/tensor.txt | wc -c"),
    R("9d.rss", "views", "RssAnon after the text", Max("views.text.rss"), unit="MiB", cmd="after 9d.cat"),
    # 10: object storage
    R("10a", "remote", "S3 (moto) mount -> first stat, WALK_TENSORS tensors", K("s3.mount"),
      cmd="tfmount s3://bench/twalk/ckpt MNT; stat MNT/variables/LAST.shape"),
    R("10a.requests", "remote", "requests of 10a", K("s3.requests"), unit="requests", cmd="the daemon's log at unmount"),
    R("10b", "remote", "S3 cat of a 16 KiB tensor: bytes fetched (< 1 MiB + index)", K("s3.small.bytes"),
      unit="B", cmd="cat MNT/variables/SMALL.bin; 'bytes fetched' (the index: 10b.index)"),
    R("10b.index", "remote", "the .index's size, for 10b", K("s3.index"), unit="B", cmd="stat -c %s mix/ckpt.index"),
    R("10c", "remote", "S3 sequential read of the BIG_GIB tensor, curl / mount", K("s3.read"),
      base=K("s3.curl"), target=(">=", 0.8), cmd=f"{MNT_DD}; baseline: one ranged GET with curl (REPS_MOTO)"),
    R("10c.rss", "remote", "daemon RssAnon during 10c", Max("s3.rss"), unit="MiB", cmd="sampled 1 s into the read"),
    R("10d", "remote", "S3 diff --stats of two WALK_TENSORS-tensor checkpoints", K("s3.diff"),
      cmd="tfmount diff --stats s3://bench/twalk/ckpt s3://bench/twalk_b/ckpt"),
    R("10e", "remote", "moto: one ranged GET of 1 MiB / of the whole tensor", K("s3.get1m"), base=K("s3.curl"),
      ratio="value/base", cmd="curl -r of 1 MiB; baseline: 10c's curl"),
    R("10f", "remote", "HTTP (nginx) sequential read, curl / mount", K("http.read"), base=K("http.curl"),
      target=(">=", 0.8), cmd=f"tfmount http://.../mix/ckpt MNT; {MNT_DD}; baseline: curl -r"),
    R("10f.rss", "remote", "daemon RssAnon during 10f", Max("http.rss"), unit="MiB", cmd="sampled 0.3 s in"),
    R("10f.nocrc", "remote", "same, -o nocrc (one fetch), curl / mount", K("http.nocrc"), base=K("http.curl"),
      target=(">=", 0.8), cmd="tfmount -o nocrc ..."),
    # 11: keras
    R("11a", "keras", "start -> stat of a .shape, 1 GiB .keras", K("keras.start"), target=("<", 0.1),
      cmd="tfmount -f big.keras MNT &; poll stat MNT/variables/layers/dense/vars/0.shape"),
    R("11a.rchar", "keras", "bytes the daemon read for 11a", K("keras.rchar"), unit="B", cmd="/proc/PID/io rchar"),
    R("11a.syscr", "keras", "read calls the daemon made for 11a", K("keras.syscr"), unit="calls", cmd="/proc/PID/io syscr"),
    R("11b.cold", "keras", "cold read of the 256 MiB kernel, memfuse / mount", K("keras.cold"),
      base=K("keras.mf.cold"), target=(">=", 0.9), cmd="dd of MNT/variables/layers/dense/vars/0.bin; memfuse of its bytes"),
    R("11b.warm", "keras", "warm re-read, memfuse / mount", K("keras.warm"), base=K("keras.mf.warm"),
      target=(">=", 0.9), cmd="the same dd again"),
    R("11c", "keras", "the daemon's peak RssAnon while reading", Max("keras.peak"), unit="MiB",
      target=("<=", 64), cmd="RssAnon sampled every 20 ms during the dd of 11b, another fresh mount"),
    # 12: direct I/O
    *[R(f"12a.{m}", "direct_io", f"cold read, dd of the data file / mount ({m})", K(f"dio.cold.{m}"),
        base=K("dio.dd"), target=(">=", 0.6), cmd=f"{MNT_DD} on a fresh mount" + ("" if m == "before" else f" -o direct_io={m}"))
      for m in ("never", "auto", "before")],
    *[R(f"12b.{m}", "direct_io", f"warm re-read, dd / mount ({m})", K(f"dio.warm.{m}"), base=K("dio.dd"),
        target=(">=", 0.9), cmd="the same dd again") for m in ("never", "auto", "before")],
    R("12a.speedup", "direct_io", "cold read, auto / never (speed-up)", K("dio.cold.auto"), base=K("dio.cold.never"),
      cmd="12a's two"),
    R("12c.memfuse", "direct_io", "memfuse cold, dd / memfuse", K("dio.mf.cold"), base=K("dio.dd"),
      cmd="dd of memfuse's data"),
    R("12c.memfuse_dio", "direct_io", "memfuse --direct-io cold, dd / memfuse", K("dio.mfd.cold"), base=K("dio.dd"),
      cmd="dd of memfuse --direct-io's data"),
    R("12c.vs_auto", "direct_io", "memfuse --direct-io / auto, cold", K("dio.cold.auto"), base=K("dio.mfd.cold"),
      cmd="12a auto vs 12c"),
    R("12d", "direct_io", "walk, auto / never (an OPEN per file)", K("dio.walk.auto"), base=K("dio.walk.never"),
      ratio="value/base", cmd=f"{WALK}, -o direct_io=auto and =never"),
    R("12d.never", "direct_io", "walk, never / memfuse", K("dio.walk.never"), base=K("dio.walk.mf"), ratio="value/base",
      cmd="baseline: memfuse of the plain tree"),
    R("12d.auto", "direct_io", "walk, auto / memfuse", K("dio.walk.auto"), base=K("dio.walk.mf"), ratio="value/base",
      cmd="baseline: memfuse of the plain tree"),
    *[R(f"12e.{t}", "direct_io", f"{t} of the .bin, never / auto", K(f"dio.{t}.never"), base=K(f"dio.{t}.auto"),
        ratio="value/base", cmd=c) for t, c in (("cat", "cat MNT/.../tensor.bin"), ("cp", "cp ... /dev/shm"),
                                                ("py", "python3 open(...).read()"))],
    # 13: stream CRC
    *[R(f"13a.{lab}", "stream_crc", f"256 MiB over http://, {lab}: curl / mount", K(f"sc.{lab}"), base=K("sc.curl.256"),
        target=(">=", 0.9), cmd=f"tfmount {opts}http://127.0.0.1:PORT/sc256/ckpt MNT; {MNT_DD}; baseline: curl -r")
      for lab, opts in (("default", ""), ("crc_first", "-o crc_first "), ("direct_io", "-o direct_io=auto "),
                        ("before", "(TFMOUNT_BEFORE) "))],
    *[R(f"13b.{lab}", "stream_crc", f"256 MiB, nginx limit_rate 100m, {lab}: one curl stream / mount",
        K(f"sc.capped.{lab}"), base=K("sc.curl.cap"), target=(">=", 3), cmd=f"as 13a {opts}against the capped nginx")
      for lab, opts in (("default", ""), ("crc_first", "-o crc_first "), ("before", "(TFMOUNT_BEFORE) "))],
    *[R(f"13c.{lab}", "stream_crc", f"BIG_GIB over http://, {lab}: mount / curl (one fetch)", K(f"sc.big.{lab}"),
        base=K("sc.curl.big"), ratio="value/base", target=("<=", 1.1), cmd=f"as 13a, {opts}the BIG_GIB tensor")
      for lab, opts in (("default", ""), ("crc_first", "-o crc_first "), ("nocrc", "-o nocrc "),
                        ("direct_io", "-o direct_io=auto "), ("remote_cache", "-o remote_cache=2G "),
                        ("remote_cache_crc_first", "-o remote_cache=2G,crc_first "), ("before", "(TFMOUNT_BEFORE) "),
                        ("remote_cache_before", "(TFMOUNT_BEFORE) -o remote_cache=2G "))],
    R("13.fetched", "stream_crc", "bytes fetched for the BIG_GIB tensor, default / its size", K("sc.big.default.bytes"),
      unit="B", base=K("sc.big.size"), ratio="value/base", cmd="'bytes fetched' at unmount"),
    # 14: tflite
    R("14a", "tflite", "start -> stat of the largest tensor's .shape, 100 MB .tflite", K("tflite.start"),
      target=("<", 0.05), cmd="tfmount -f big.tflite MNT &; poll stat"),
    R("14a.rchar", "tflite", "bytes the daemon read for 14a", K("tflite.rchar"), unit="B", cmd="/proc/PID/io rchar"),
    R("14b.cold", "tflite", "cold read of that tensor, memfuse / mount", K("tflite.cold"), base=K("tflite.mf.cold"),
      target=(">=", 0.9), cmd="dd of MNT/variables/KEY.bin; memfuse of its bytes"),
    R("14b.warm", "tflite", "warm re-read, memfuse / mount", K("tflite.warm"), base=K("tflite.mf.warm"),
      target=(">=", 0.9), cmd="the same dd again"),
    # 16: whole tree
    R("16.du", "whole_tree", "du --apparent-size of a mount / tensor bytes", K("wt.du.hidden"), unit="B",
      base=K("wt.tensor_bytes"), ratio="value/base", target=("<=", 2.05), cmd="du -s --apparent-size -B1 MNT"),
    R("16.diff", "whole_tree", "diff -rq of two fresh mounts / of their variables/", K("wt.all.hidden"),
      base=K("wt.vars.hidden"), ratio="value/base", target=("<=", 2), cmd="diff -rq MNT_A MNT_B"),
    R("16.du.visible", "whole_tree", "(views=visible) du / tensor bytes (was 8.0x)", K("wt.du.visible"), unit="B",
      base=K("wt.tensor_bytes"), ratio="value/base", cmd="-o views=visible"),
    R("16.diff.visible", "whole_tree", "(views=visible) diff -rq / variables/ (was 21-78x)", K("wt.all.visible"),
      base=K("wt.vars.visible"), ratio="value/base", cmd="-o views=visible"),
    # 17: python
    R("17.tf", "python", "tfmount.open + every tensor (process) vs TF's reader (import excluded)", K("py.tfm"),
      base=K("py.tf"), target=(">=", 2), cmd="scripts/bench_python.py run"),
    R("17.st", "python", "the same vs safetensors' load_file (process)", K("py.tfm"), base=K("py.st"),
      target=(">=", 1.5), cmd="scripts/bench_python.py run"),
    R("17.mnt", "python", "before the module: mount + load_file + unmount vs TF's reader", K("py.mnt"),
      base=K("py.tf"), cmd="scripts/bench_python.py run"),
    R("17.tfm_in", "python", "tfmount's loop, imports excluded, vs TF's reader", K("py.tfm_in"), base=K("py.tf"),
      cmd="scripts/bench_python.py run"),
    R("17.h5", "python", "tfmount.open(model.weights.h5) + every tensor vs h5py", K("py.tfm_h5"), base=K("py.h5py"),
      target=(">=", 1.5), cmd="scripts/bench_python.py run"),
    R("17.first", "python", "tfmount.open of 1M tensors -> first array", K("py.first"), target=("<", 0.1),
      cmd="scripts/bench_python.py run"),
    # 18: orbax
    R("18a", "orbax", "Orbax start -> first stat of the 256 MiB array's .shape", K("orbax.start"),
      target=("<", 0.05), cmd="tfmount -f ckpt MNT &; poll stat MNT/variables/big.shape"),
    R("18a.rchar", "orbax", "bytes read to mount and stat", K("orbax.rchar"), unit="B", target=("<", 1048576),
      cmd="/proc/PID/io rchar"),
    R("18b", "orbax", "256 MiB chunked array read whole, tensorstore / tfmount", K("orbax.read"),
      base=K("orbax.ts"), target=(">=", 0.5), cmd="dd of MNT/variables/big.bin; baseline: bench_orbax.py read"),
    # 19: cache
    R("19a", "cache", "cold load_file, (aria2c + local) / mount (cache_dir)", K("c.cold_lf"),
      base=K("c.dl") + K("c.local_lf"), target=(">=", 1.0), cmd="load_file(MNT/model.safetensors), fresh cache_dir"),
    R("19a'", "cache", "the same without cache_dir (cache_dir=none)", K("c.nocache_lf"),
      base=K("c.dl") + K("c.local_lf"), cmd="-o cache_dir=none"),
    R("19b", "cache", "cold cat of every .bin, (aria2c + local) / mount", K("c.cold_cat"),
      base=K("c.dl") + K("c.local_cat"), target=(">=", 1.0), cmd="find MNT/variables -name '*.bin' | xargs cat"),
    R("19c", "cache", "warm load_file (remount on the cache), local / mount", K("c.warm_lf"), base=K("c.local_lf"),
      target=(">=", 0.9), cmd="the same on a remount of cache_dir"),
    R("19d", "cache", "warm cat of every .bin, local / mount", K("c.warm_cat"), base=K("c.local_cat"),
      target=(">=", 0.9), cmd="the same on a remount of cache_dir"),
    R("19e", "cache", "one 4 MiB tensor from a cold mount: GETs after the mount's and stat's", K("c.one_gets"),
      unit="GETs", target=("<=", 2), cmd="stat + cat of one .bin, -o cache_dir=none"),
    *[R(f"19f.{ck}.{b}", "cache", f"{ck} via the proxy: {b} / mount", K(f"c.mnt_{ck}"), base=K(f"c.{b}_{ck}"),
        cmd=f"{MNT_DD}; baseline: {b}") for ck in ("sc256", "big") for b in ("curl", "aria")],
    R("19g", "cache", "default mount, cat of every .bin, (aria2c + local) / mount", K("c.def_cat"),
      base=K("c.dl") + K("c.local_cat"), target=(">=", 1.0), cmd="no options: the default disk cache, fresh"),
    R("19g.fetched", "cache", "19g: fetched / tensor bytes", K("c.def_cat_b"), unit="B", base=K("c.tensor_bytes"),
      ratio="value/base", cmd="'bytes fetched'"),
    R("19h", "cache", "default mount, load_file, (aria2c + local) / mount", K("c.def_lf"),
      base=K("c.dl") + K("c.local_lf"), target=(">=", 1.0), cmd="no options"),
    R("19h.fetched", "cache", "19h: fetched / tensor bytes", K("c.def_lf_b"), unit="B", base=K("c.tensor_bytes"),
      ratio="value/base", cmd="'bytes fetched'"),
    R("19i", "cache", "cache_dir=none, cat of every .bin, (aria2c + local) / mount", K("c.nocache_cat"),
      base=K("c.dl") + K("c.local_cat"), target=(">=", 0.8), cmd="-o cache_dir=none"),
    R("19i.fetched", "cache", "19i: fetched / tensor bytes", K("c.nocache_cat_b"), unit="B", base=K("c.tensor_bytes"),
      ratio="value/base", cmd="'bytes fetched'"),
    R("19j", "cache", "cache_dir=none, load_file: fetched / tensor bytes", K("c.nocache_lf_b"), unit="B",
      base=K("c.tensor_bytes"), ratio="value/base", target=("<=", 1.05), cmd="'bytes fetched'"),
    # 20: floor
    R("20a", "floor", "load_file of a 524 MiB model.safetensors, memfuse / mount", K("fl.lf.{v}"), base=K("fl.mf.lf"),
      target=(">=", 0.9), versions=True, cmd="load_file(MNT/model.safetensors); memfuse of a copy"),
    R("20a.plain", "floor", "load_file of a plain local copy / mount, for scale", K("fl.lf.{v}"),
      base=K("fl.plain.lf"), versions=True, cmd="load_file(copy)"),
    R("20b", "floor", "cold dd of the BIG_GIB tensor, page cache, memfuse / mount", K("fl.cold.{v}"),
      base=K("fl.mf.cold"), target=(">=", 0.9), versions=True, cmd=f"{MNT_DD} -o direct_io=never"),
    R("20c", "floor", "cold dd, direct_io=auto, memfuse --direct-io / mount", K("fl.dio.{v}"), base=K("fl.mf.dio"),
      target=(">=", 0.9), versions=True, cmd=f"{MNT_DD} -o direct_io=auto"),
    R("20d", "floor", "warm re-read, memfuse / mount", K("fl.warm.{v}"), base=K("fl.mf.warm"), target=(">=", 0.95),
      versions=True, cmd="the dd of 20b again"),
    R("20e.read", "floor", "daemon CPU seconds per GiB served: 20b's cold read", K("fl.cpugib.{v}"), unit="s/GiB",
      versions=True, cmd="/proc/PID/stat utime+stime around 20b"),
    R("20e.load_file", "floor", "daemon CPU seconds per GiB served: 20a's load_file", K("fl.lfcpugib.{v}"),
      unit="s/GiB", versions=True, cmd="/proc/PID/stat around 20a"),
    # 21, 22
    R("21", "diff_values", "diff --values of two 1 GiB checkpoints (every tensor changed), cat / diff",
      K("dv.diff"), base=K("dv.cat"), target=(">=", 0.5), cmd="tfmount diff --values A B; baseline: cat of both data files"),
    R("22", "tfjs_floor", "cold dd of a 1 GiB TF.js weight in 256 shards, memfuse / mount", K("tj.cold.{v}"),
      base=K("tj.mf.cold"), target=(">=", 0.9), versions=True, cmd="dd of MNT/variables/big/kernel.bin; memfuse of the bytes as one file"),
    # 23: export
    R("23a", "export", "export of a 1 GiB TF2 checkpoint to tmpfs, TF's write / export", K("ex.shm"),
      base=K("ex.tf.shm"), target=(">=", 1.0),
      cmd="tfmount export SRC /dev/shm/...; baseline: tf.train.Checkpoint.write of the same variables to /dev/shm"),
    R("23b", "export", "the same, cp of the checkpoint's files to tmpfs / export", K("ex.shm"),
      base=K("ex.cp.shm"), target=(">=", 0.5), cmd="cp SRC.index SRC.data-* /dev/shm/..."),
    R("23c", "export", "export to BENCH_TMP's disk (fsync included), TF's write (no fsync) / export", K("ex.disk"),
      base=K("ex.tf.disk"), target=(">=", 0.667), cmd="tfmount export SRC BENCH_TMP/...; baseline: TF's write there"),
    R("23d", "export", "the same, cp to disk / export", K("ex.disk"), base=K("ex.cp.disk"), target=None,
      cmd="cp SRC.index SRC.data-* BENCH_TMP/..."),
    R("23f", "export", "export to a .safetensors file on tmpfs, cp of the checkpoint's files / export",
      K("ex.st.shm"), base=K("ex.cp.shm"), target=(">=", 0.667),
      cmd="tfmount export SRC /dev/shm/.../model.safetensors; baseline: cp as 23b"),
    R("23e", "export", "the export's largest RssAnon (MiB) exporting 1 GiB", Max("ex.rss"), unit="MiB",
      target=("<=", 64), cmd="/proc/PID/status RssAnon, polled every 10 ms"),
    R("22.cpu", "tfjs_floor", "the daemon's CPU for the 1 GiB", K("tj.cpu.{v}"), unit="ticks", versions=True,
      cmd="/proc/PID/stat around the dd"),
]

# issue 19's table: every row for TFMOUNT_BEFORE and this tree (section issue19)
I19 = [
    ("cold", "cold read 1 GiB, dd / mount (after: direct_io=auto)", K("i19.cold.{v}"), K("i19.dd"), "base/value", (">=", 0.6)),
    ("warm", "warm re-read, dd / mount (default direct_io=never)", K("i19.pcwarm.{v}"), K("i19.dd"), "base/value", (">=", 0.9)),
    ("warm.memfuse", "same: memfuse page cache warm / mount", K("i19.pcwarm.{v}"), K("i19.mf.pcwarm"), "base/value", None),
    ("warm.dio", "warm re-read, dd / mount (after: direct_io=auto)", K("i19.warm.{v}"), K("i19.dd"), "base/value", None),
    ("pc", "page cache cold: memfuse / mount", K("i19.pc.{v}"), K("i19.mf.pc"), "base/value", None),
    ("dio", "memfuse FOPEN_DIRECT_IO cold / mount cold", K("i19.cold.{v}"), K("i19.mf.dio"), "base/value", None),
    ("http256", "256 MiB over http://, curl / mount", K("i19.h256.{v}"), K("i19.curl.256"), "base/value", (">=", 0.9)),
    ("http_capped", "same, nginx limit_rate 100m: one curl / mount", K("i19.hcap.{v}"), K("i19.curl.cap"), "base/value", (">=", 3)),
    ("http_big", "1 GiB over http://, default: mount / curl", K("i19.hbig.{v}"), K("i19.curl.big"), "value/base", ("<=", 1.1)),
    ("http_nocrc", "1 GiB over http://, -o nocrc: mount / curl", K("i19.hnocrc.{v}"), K("i19.curl.big"), "value/base", ("<=", 1.1)),
    ("http_rc", "1 GiB over http://, -o remote_cache=2G: mount / curl", K("i19.hrc.{v}"), K("i19.curl.big"), "value/base", ("<=", 1.1)),
    ("stats", "stats/ of 1 GiB float32: numpy / mount", K("i19.stats.{v}"), K("i19.numpy"), "base/value", (">=", 5)),
    ("v1", "64 MiB int64 saved by TF's V1 saver: V2 / V1 read time", K("i19.v1.{v}"), K("i19.v2.{v}"), "base/value", (">=", 0.7)),
    ("walk", "walk of WALK_TENSORS tensors: mount / memfuse", K("i19.walk.{v}"), K("i19.mf.walk"), "value/base", None),
    ("walk.session", "same: mount / memfuse in its own session", K("i19.walk.{v}"), K("i19.mf.swalk"), "value/base", ("<=", 1.1)),
]
ROWS += [
    # 24: NFS
    R("24a", "nfs", "nfs-cat of the BIG_GIB tensor: nfs-ganesha (the same bytes, a plain file on tmpfs) / tfmount --nfs-serve",
      K("nfs.cat.tfmount"), base=K("nfs.cat.ganesha"), target=(">=", 1.0),
      cmd="nfs-cat nfs://127.0.0.1//variables/big/tensor.bin?nfsport=P&mountport=P; baseline: nfs-cat of tensor.bin from nfs-ganesha 4 (FSAL VFS) exporting a tmpfs directory"),
    R("24b", "nfs", "nfs-ls -R of WALK_TENSORS tensors' variables/: nfs-ganesha (a plain copy on tmpfs) / tfmount",
      K("nfs.walk.tfmount"), base=K("nfs.walk.ganesha"), target=(">=", 1.0),
      cmd="nfs-ls -R nfs://127.0.0.1//variables?...; baseline: the same over nfs-ganesha exporting cp -r of a mount's variables/"),
    R("24c", "nfs", "the same nfs-cat: FUSE (dd bs=1M, fresh mount) / NFS, for scale", K("nfs.cat.tfmount"),
      base=K("nfs.cat.fuse"), ratio="value/base", cmd="dd if=MNT/variables/big/tensor.bin of=/dev/null bs=1M"),
]
ROWS += [
    # 25: editable mounts
    R("25a", "edit", "replace a 256 MiB tensor: cp x.npy to a local directory / cp x.npy onto the tensor's .npy in an -o edit mount",
      K("edit.cp.mount"), base=K("edit.cp.local"), target=(">=", 0.5),
      cmd="cp x.npy MNT/variables/big/tensor.npy (a fresh -o edit=DIR mount of a 256 MiB tensor, DIR on BENCH_TMP's disk); baseline: cp x.npy BENCH_TMP/local/x.npy"),
    R("25b", "edit", "ls -R MNT/variables of WALK_TENSORS tensors, -o edit: after 1,000 edits / with none",
      K("edit.ls.edited"), base=K("edit.ls.none"), ratio="value/base", target=("<=", 1.2),
      cmd="ls -R MNT/variables > /dev/null (a fresh mount each); the edits: 400 rm, 300 mv, 300 cp of an .npy, spread over the tensors, journaled in DIR"),
]
ROWS += [R(f"issue19.{n}", "issue19", w, v, base=b, ratio=r, target=t, versions=True, cmd="bench_issue19")
         for n, w, v, b, r, t in I19]

# ---------------------------------------------------------------------------------------------
# running things
# ---------------------------------------------------------------------------------------------
class Skip(Exception):
    """A section cannot run here: what is missing."""


def log(msg=""):
    print(msg, flush=True)


def warn(msg):
    print(f"bench: {msg}", file=sys.stderr, flush=True)


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def which(name, *extra):
    p = shutil.which(name)
    if p:
        return p
    for e in extra:
        if os.access(e, os.X_OK):
            return e
    return None


def py_has(py, modules):
    if not py or not os.access(py, os.X_OK):
        return False
    return subprocess.run([py, "-c", "import " + ", ".join(modules)], capture_output=True,
                          env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")).returncode == 0


def test_venv_python():
    venv = os.environ.get("TFMOUNT_TEST_VENV") or os.path.expanduser("~/.cache/tfmount-test-venv")
    return os.path.join(venv, "bin", "python")


def find_python(modules, *names):
    """The first Python of the environment variables NAMES, then the test venv's, that imports
    MODULES; None if none does."""
    cands = [os.environ.get(n) for n in names] + [test_venv_python()]
    for py in cands:
        if py and py_has(py, modules):
            return py
    return None


class Ctx:
    def __init__(self, args):
        self.reps = args.reps
        self.big_gib = os.environ.get("BIG_GIB") or "1"
        self.walk_tensors = env_int("WALK_TENSORS", 20000)
        self.tfmount_args = (os.environ.get("TFMOUNT_ARGS") or "").split()
        self.before = os.environ.get("TFMOUNT_BEFORE") or None
        if self.before and not os.access(self.before, os.X_OK):
            sys.exit(f"bench: TFMOUNT_BEFORE={self.before} is not an executable")
        self.versions = ["after"] + (["before"] if self.before else [])
        target = os.environ.get("CARGO_TARGET_DIR") or os.path.join(REPO, "target")
        rel = os.path.join(target, "release")
        self.tfmount = os.path.join(rel, "tfmount")
        self.ex = lambda n: os.path.join(rel, "examples", n)
        self.work = tempfile.mkdtemp(prefix="tfmount-bench.", dir=os.environ.get("BENCH_TMP") or "/tmp")
        self.S = defaultdict(list)  # key -> runs
        self.mounts = []
        self.procs = []
        self.made = {}
        self.skipped = {}  # section -> why
        self.hz = os.sysconf("SC_CLK_TCK")

    # -- bookkeeping --------------------------------------------------------------------------
    def put(self, key, x):
        self.S[key].append(x)

    def med(self, key, how="median"):
        xs = [x for x in self.S.get(key, []) if isinstance(x, (int, float)) and not math.isnan(x)]
        if not xs:
            return NAN
        if how == "max":
            return max(xs)
        xs = sorted(xs)
        return xs[(len(xs) - 1) // 2]  # bash's median: the lower middle of an even count

    def bin(self, v):
        return self.before if v == "before" else self.tfmount

    def order(self, r):
        """The versions in this repetition's order (alternating when there are two)."""
        return list(reversed(self.versions)) if r % 2 == 0 else list(self.versions)

    # -- processes ----------------------------------------------------------------------------
    def run(self, argv, check=True, **kw):
        kw.setdefault("stdout", subprocess.DEVNULL)
        p = subprocess.run(argv, **kw)
        if check and p.returncode != 0:
            warn(f"{' '.join(map(str, argv))[:200]} failed (exit {p.returncode})")
        return p

    def out(self, argv, **kw):
        return subprocess.run(argv, stdout=subprocess.PIPE, text=True, **kw).stdout

    def timed(self, cmd, ok=(0,), **kw):
        """Seconds CMD took (argv list, or a shell line), its output discarded; nan if it failed."""
        t0 = time.perf_counter()
        if isinstance(cmd, str):
            p = subprocess.run(["sh", "-c", cmd], stdout=subprocess.DEVNULL, **kw)
        else:
            p = subprocess.run(cmd, stdout=subprocess.DEVNULL, **kw)
        t = time.perf_counter() - t0
        if p.returncode not in ok:
            warn(f"{cmd if isinstance(cmd, str) else ' '.join(map(str, cmd))} failed (exit {p.returncode})")
            return NAN
        return t

    def bg(self, argv, **kw):
        p = subprocess.Popen(argv, **kw)
        self.procs.append(p)
        return p

    def dd(self, path):
        return self.timed(["dd", f"if={path}", "of=/dev/null", "bs=1M", "status=none"])

    def warm(self, *paths):
        for p in paths:
            with open(p, "rb") as f:
                while f.read(1 << 24):
                    pass

    # -- mounts -------------------------------------------------------------------------------
    def mp(self):
        d = tempfile.mkdtemp(prefix="mnt.", dir=self.work)
        self.mounts.append(d)
        return d

    def mount(self, src, mnt, v="after", opts=(), env=None, quiet=False):
        """The daemonizing form of VERSION; True once MNT is a mount."""
        argv = [self.bin(v), *self.tfmount_args, *opts, src, mnt]
        p = subprocess.run(argv, env=env)
        if p.returncode != 0 or not os.path.ismount(mnt):
            if not quiet:
                warn(f"tfmount {' '.join(opts)} {src} {mnt} failed")
            return False
        return True

    def unmount(self, mnt):
        subprocess.run(["fusermount3", "-u", mnt], stderr=subprocess.DEVNULL)
        for _ in range(100):
            if not os.path.ismount(mnt):
                return
            time.sleep(0.05)
        subprocess.run(["fusermount3", "-uz", mnt], stderr=subprocess.DEVNULL)

    def pids(self, mnt):
        """The processes serving MNT: the daemon and its watchdog (pgrep -f 'tfmount .*MNT$')."""
        out = self.out(["pgrep", "-f", f"tfmount .*{mnt}$"])
        return [int(x) for x in out.split()]

    def unmount_wait(self, mnt):
        self.unmount(mnt)
        for _ in range(200):
            if not self.pids(mnt):
                return
            time.sleep(0.05)
        warn(f"the daemon of {mnt} is still running")

    def proc_field(self, mnt, fname, field_):
        total = 0
        for pid in self.pids(mnt):
            try:
                with open(f"/proc/{pid}/{fname}") as f:
                    for line in f:
                        parts = line.split()
                        if parts and parts[0] == field_ + ":":
                            total += int(parts[1])
            except OSError:
                pass
        return total

    def rss_mib(self, mnt):
        return self.proc_field(mnt, "status", "RssAnon") / 1024

    def io(self, mnt, field_):
        return self.proc_field(mnt, "io", field_)

    def cpu(self, mnt):
        t = 0
        for pid in self.pids(mnt):
            try:
                with open(f"/proc/{pid}/stat") as f:
                    parts = f.read().rsplit(")", 1)[1].split()
                t += int(parts[11]) + int(parts[12])  # utime, stime (fields 14, 15)
            except (OSError, IndexError):
                pass
        return t

    def note_rss(self, what, mnt):
        mib = self.rss_mib(mnt)
        log(f"   RssAnon {what}: {mib:.1f} MiB")
        self.put("rss", mib)

    def memfuse(self, src, mnt, dio=False, setsid=False):
        """A memfuse mount of SRC in the background, ready (it printed `ready`); or None."""
        logf = os.path.join(self.work, f"memfuse.{random.randrange(1 << 30)}.log")
        argv = ([which("setsid")] if setsid else []) + [self.ex("memfuse")] + (["--direct-io"] if dio else []) + [src, mnt]
        with open(logf, "w") as err:
            p = self.bg(argv, stderr=err)
        for _ in range(1200):
            with open(logf) as f:
                if "ready" in f.read() and os.path.ismount(mnt):
                    return p
            if p.poll() is not None:
                break
            time.sleep(0.05)
        warn(f"memfuse {src} did not mount")
        return None

    def memfuse_stop(self, p, mnt):
        self.unmount(mnt)
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            p.kill()

    def memfuse_cold_warm(self, src, mnt, dio=False):
        p = self.memfuse(src, mnt, dio=dio)
        if not p:
            return NAN, NAN
        c = self.dd(os.path.join(mnt, "data"))
        w = self.dd(os.path.join(mnt, "data"))
        self.memfuse_stop(p, mnt)
        return c, w

    def cold_warm(self, src, mnt, path, v="after", opts=()):
        if not self.mount(src, mnt, v, opts):
            return NAN, NAN
        c = self.dd(os.path.join(mnt, path))
        w = self.dd(os.path.join(mnt, path))
        self.unmount_wait(mnt)
        return c, w

    def walk(self, root):
        return self.timed(f"find '{root}' -name '*.shape' | xargs cat")

    def walk_v(self, src, mnt, v="after", opts=()):
        if not self.mount(src, mnt, v, opts):
            return NAN
        t = self.walk(os.path.join(mnt, "variables"))
        self.unmount_wait(mnt)
        return t

    def walk_memfuse(self, tree, mnt, setsid=False):
        p = self.memfuse(tree, mnt, setsid=setsid)
        if not p:
            return NAN
        t = self.walk(mnt)
        self.memfuse_stop(p, mnt)
        return t

    def start_to_stat(self, src, mnt, probe, logf, read=False):
        """REPS times: `tfmount -f SRC MNT` to the first successful stat (or read, as `cat` does)
        of MNT/PROBE, polled in-process; (seconds, rchar, syscr) of each run."""
        runs = []
        for _ in range(self.reps):
            with open(logf, "a") as err:
                t0 = time.perf_counter()
                p = self.bg([self.tfmount, "-f", *self.tfmount_args, src, mnt], stdout=subprocess.DEVNULL, stderr=err)
                t1 = None
                path = os.path.join(mnt, probe)
                for _ in range(2_000_000):
                    try:
                        if read:
                            with open(path, "rb") as f:
                                f.read()
                        else:
                            os.stat(path)
                        t1 = time.perf_counter()
                        break
                    except OSError:
                        if p.poll() is not None:
                            break
            if t1 is None:
                warn(f"{probe} never appeared in the mount of {src}; daemon log {logf}")
                self.unmount_wait(mnt)
                break
            runs.append((t1 - t0, self.io(mnt, "rchar"), self.io(mnt, "syscr"), self.rss_mib(mnt)))
            self.unmount_wait(mnt)
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
        return runs

    # -- data ---------------------------------------------------------------------------------
    CKPTS = {
        "big": lambda c: ["--tensors", "0", "--big-gib", c.big_gib],
        "t1k": lambda c: ["--tensors", "1000"],
        "t1m": lambda c: ["--tensors", "1000000"],
        "t100k": lambda c: ["--tensors", "100000"],
        "t100k_b": lambda c: ["--tensors", "100000", "--alter-every", "100"],
        "twalk": lambda c: ["--tensors", str(c.walk_tensors)],
        "twalk_b": lambda c: ["--tensors", str(c.walk_tensors), "--alter-every", "100"],
        "mix": lambda c: ["--tensors", "1", "--elems", "4096", "--big-gib", c.big_gib],
        "sc256": lambda c: ["--tensors", "0", "--big-gib", "0.25"],
        "c300": lambda c: ["--tensors", "300", "--elems", "894784", "--depth", "2"],
    }

    def ck(self, name, *args):
        """WORK/NAME/ckpt written by mkckpt (once): its prefix; the keys it printed in self.made."""
        if name not in self.made:
            d = os.path.join(self.work, name)
            os.makedirs(d, exist_ok=True)
            argv = [self.ex("mkckpt"), os.path.join(d, "ckpt"), *(args or self.CKPTS[name](self))]
            out = self.out(argv)
            kv = dict(line.split("=", 1) for line in out.splitlines() if re.match(r"^\w+=", line))
            for line in out.splitlines():
                if "=" not in line or not re.match(r"^\w+=", line):
                    log(f"   {name}: {line}")
            self.made[name] = kv
        return os.path.join(self.work, name, "ckpt")

    def key_of(self, name, k="last_key"):
        self.ck(name)
        return self.made[name].get(k)

    def tensor_at(self, src, key="big/tensor"):
        """(offset, size) of KEY in its shard, from tensors.tsv (columns 8 and 4)."""
        for line in self.out([self.tfmount, "cat", src, "tensors.tsv"]).splitlines():
            f = line.split("\t")
            if f[0] == key:
                return int(f[7]), int(f[3])
        raise Skip(f"{key} not in {src}'s tensors.tsv")

    def plain_tree(self):
        """WORK/plain: variables/ of twalk copied to a plain directory (once)."""
        d = os.path.join(self.work, "plain")
        if not os.path.isdir(d):
            mnt = self.mp()
            if not self.mount(self.ck("twalk"), mnt):
                raise Skip("mounting twalk failed")
            self.run(["cp", "-r", os.path.join(mnt, "variables"), d])
            self.unmount_wait(mnt)
        return d

    def nginx(self, name, directives, root=None):
        """nginx serving ROOT (WORK) on a free port of 127.0.0.1, with DIRECTIVES in its server."""
        exe = which("nginx", "/usr/sbin/nginx")
        if not exe:
            raise Skip("nginx not found (scripts/test.sh installs nginx-light)")
        d = os.path.join(self.work, f"ng_{name}")
        os.makedirs(os.path.join(d, "tmp"), exist_ok=True)
        port = free_port()
        t = os.path.join(d, "tmp")
        conf = f"""daemon off;
master_process off;
worker_processes 1;
pid {d}/nginx.pid;
error_log {d}/error.log;
events {{ worker_connections 256; }}
http {{
  access_log off;
  client_body_temp_path {t};
  proxy_temp_path {t};
  fastcgi_temp_path {t};
  uwsgi_temp_path {t};
  scgi_temp_path {t};
  default_type application/octet-stream;
  server {{ listen 127.0.0.1:{port}; root {root or self.work}; {directives} }}
}}
"""
        with open(os.path.join(d, "nginx.conf"), "w") as f:
            f.write(conf)
        self.bg([exe, "-c", f"{d}/nginx.conf", "-p", d, "-e", f"{d}/error.log"])
        for _ in range(100):
            if subprocess.run(["curl", "-s", "-o", "/dev/null", f"http://127.0.0.1:{port}/"]).returncode == 0:
                break
            time.sleep(0.1)
        return port

    def logged(self, logf, pattern, wait=True):
        """The last number PATTERN (a regex with one group) matches in the daemon's log."""
        for _ in range(50 if wait else 1):
            try:
                with open(logf) as f:
                    text = f.read()
            except OSError:
                text = ""
            if "bytes fetched" in text or not wait:
                break
            time.sleep(0.1)
        found = re.findall(pattern, text)
        return float(found[-1]) if found else NAN

    def sc_read(self, binary, opts, url):
        """A fresh mount of URL, dd of big/tensor.bin; (seconds, bytes fetched)."""
        logf = os.path.join(self.work, f"sc.{random.randrange(1 << 30)}.log")
        mnt = self.mp()
        env = dict(os.environ, RUST_LOG="info")
        if subprocess.run([binary, *opts, "--log-file", logf, url, mnt], env=env).returncode != 0:
            warn(f"mount of {url} failed")
            return NAN, NAN
        t = self.dd(os.path.join(mnt, "variables/big/tensor.bin"))
        self.unmount(mnt)
        return t, self.logged(logf, r"bytes fetched (\d+)")

    def cleanup(self):
        for m in self.mounts:
            if os.path.ismount(m):
                subprocess.run(["fusermount3", "-u", m], stderr=subprocess.DEVNULL)
                if os.path.ismount(m):
                    subprocess.run(["fusermount3", "-uz", m], stderr=subprocess.DEVNULL)
        for p in self.procs:
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    p.kill()
        shutil.rmtree(self.work, ignore_errors=True)


# ---------------------------------------------------------------------------------------------
# the sections: each sets up, runs REPS repetitions, records runs into c.S
# ---------------------------------------------------------------------------------------------
SECTIONS = {}  # name -> (title, function), in the order of a full run


def section(name, title):
    def reg(fn):
        SECTIONS[name] = (title, fn)
        return fn
    return reg


@section("read", "1/2: sequential read of big/tensor, bs=1M, cold (fresh mount) then warm, vs memfuse")
def s_read(c):
    src = c.ck("big")
    data = src + ".data-00000-of-00001"
    mnt = c.mp()
    for r in range(1, c.reps + 1):
        c.warm(data)  # baselines right before the mount's reads, page cache warm again
        c.put("dd", c.dd(data))
        mc, mw = c.memfuse_cold_warm(data, mnt)
        c.put("mf.cold", mc)
        c.put("mf.warm", mw)
        for v in c.versions:
            if not c.mount(src, mnt, v):
                break
            c.put(f"cold.{v}", c.dd(os.path.join(mnt, "variables/big/tensor.bin")))
            c.put(f"warm.{v}", c.dd(os.path.join(mnt, "variables/big/tensor.bin")))
            if r == c.reps:
                c.note_rss(f"big-file mount after the reads ({v})", mnt)
            c.unmount(mnt)


@section("startup", "3: start to first successful cat of a .shape")
def s_startup(c):
    for name in ("t1k", "t1m"):
        startup(c, name)


def startup(c, name):
    src = c.ck(name)
    key = c.key_of(name)
    mnt = c.mp()
    runs = c.start_to_stat(src, mnt, f"variables/{key}.shape", os.path.join(c.work, f"{name}.daemon.log"), read=True)
    for t, _, _, rss in runs:
        c.put(f"start.{name}", t)
    if runs:
        c.put("rss", runs[-1][3])
        log(f"   {name}: key {key}, runs {' '.join(f'{r[0]:.4f}' for r in runs)}")


@section("walk", "4: find MNT/variables -name '*.shape' | xargs cat (fresh mount per run)")
def s_walk(c):
    plain = c.plain_tree()
    mnt = c.mp()
    for r in range(1, c.reps + 1):
        c.put("walk.plain", c.walk(plain))
        c.put("walk.mf", c.walk_memfuse(plain, mnt))
        c.put("walk.mfs", c.walk_memfuse(plain, mnt, setsid=True))
        for v in c.versions:
            if not c.mount(c.ck("twalk"), mnt, v):
                break
            c.put(f"walk.{v}", c.walk(os.path.join(mnt, "variables")))
            if r == c.reps:
                c.note_rss(f"{c.walk_tensors}-tensor mount after the walk ({v})", mnt)
            c.unmount(mnt)
    # 100k tensors vs tf.train.list_variables (in-process, TF imported), with TensorFlow only.
    py = find_python(["tensorflow"], "TF_PYTHON")
    if not py:
        c.skipped["4.100k"] = "no Python with TensorFlow (TF_PYTHON, or the test venv)"
        return
    src = c.ck("t100k")
    if c.mount(src, mnt):
        c.put("walk.100k", c.walk(mnt))
        c.unmount(mnt)
    prog = """import statistics, sys, time
import tensorflow as tf
runs = []
for _ in range(int(sys.argv[2])):
    t0 = time.perf_counter()
    v = tf.train.list_variables(sys.argv[1])
    runs.append(time.perf_counter() - t0)
assert len(v) == 100000, len(v)
print(f"{statistics.median(runs):.6f}")
"""
    out = c.out([py, "-c", prog, src, str(c.reps)], env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"),
                stderr=subprocess.DEVNULL).strip()
    c.put("tf.list", float(out) if out else NAN)


@section("tf2names", "15: TF2 object-based checkpoints: start to first cat, names/ of 1M identical names")
def s_tf2names(c):
    startup(c, "t1k")
    for n, count in (("20k", "20000"), ("1m", "1000000")):
        for m in ("distinct", "identical"):
            name = f"tf2_{n}_{m}"
            c.ck(name, "--tensors", count, "--elems", "1", "--tf2", m)
            startup(c, name)
    mnt = c.mp()
    for _ in range(c.reps):
        if not c.mount(c.ck("tf2_1m_identical"), mnt):
            break
        t0 = time.perf_counter()
        n = len(os.listdir(os.path.join(mnt, "names")))  # ls -f | wc -l: the listing, unsorted
        c.put("tf2.ls", time.perf_counter() - t0)
        log(f"   ls -f names/: {n} entries")
        c.unmount(mnt)


@section("graph", "6: ls of a 100k-node graph directory, then cat of one node (fresh mount per run)")
def s_graph(c):
    g = os.path.join(c.work, "g100k")
    c.run([c.ex("mkgraph"), g, "--nodes", "100000", "--flat", "1"])
    mnt = c.mp()
    for r in range(1, c.reps + 1):
        if not c.mount(g, mnt):
            break
        t0 = time.perf_counter()
        n = len(c.out(["ls", os.path.join(mnt, "graph")]).splitlines())
        t1 = time.perf_counter()
        c.run(["cat", os.path.join(mnt, "graph/node_054321.pbtxt")])
        t2 = time.perf_counter()
        c.put("graph.ls", t1 - t0)
        c.put("graph.cat", t2 - t1)
        if n != 100000:
            warn(f"ls listed {n} nodes, expected 100000")
        if r == c.reps:
            c.note_rss("100k-node graph after ls + cat", mnt)
        c.unmount(mnt)
    plain = os.path.join(c.work, "plain_g")
    os.makedirs(plain, exist_ok=True)
    for i in range(100000):
        open(os.path.join(plain, f"node_{i:06d}.pbtxt"), "w").close()
    for _ in range(c.reps):
        c.put("graph.plain", c.timed(f"ls '{plain}' | wc -l"))


@section("rss", "5: RssAnon (summed over each mount's tfmount processes): the largest of 1-4 and 6")
def s_rss(c):
    if not c.S.get("rss"):
        raise Skip("5 is read after sections read, startup, walk and graph: run them with it")


@section("cli", "7: subcommands (no FUSE): verify, diff, ls -R")
def s_cli(c):
    big = c.ck("big")
    data = big + ".data-00000-of-00001"
    c.run([c.tfmount, "verify", big], stderr=subprocess.DEVNULL)  # warms the page cache
    for _ in range(c.reps):
        c.warm(data)
        c.put("verify.dd", c.dd(data))
        c.put("verify", c.timed([c.tfmount, "verify", big]))
    a, b = c.ck("t100k"), c.ck("t100k_b")
    for _ in range(c.reps):
        t0 = time.perf_counter()
        p = subprocess.run([c.tfmount, "diff", "--stats", a, b], capture_output=True, text=True)
        c.put("diff100k", time.perf_counter() - t0)
    m = re.search(r"data bytes read (\d+)", p.stderr)
    c.put("diff100k.bytes", float(m.group(1)) if m else NAN)
    lines = len(p.stdout.splitlines())
    if lines != 1000:
        warn(f"diff printed {lines} lines, expected 1000")
    log(f"   diff: {p.stderr.strip()}")
    mnt = c.mp()
    for _ in range(c.reps):
        c.put("lsR", c.timed(f"'{c.tfmount}' ls -R '{a}' | wc -l"))
        if not c.mount(a, mnt):
            break
        c.put("lsR.find", c.timed(f"find '{mnt}' -mindepth 1 | wc -l"))
        c.unmount(mnt)


V1_WRITE = """import os, sys
import numpy as np
import tensorflow as tf
out, mib = sys.argv[1], int(sys.argv[2])
os.makedirs(out, exist_ok=True)
tf.compat.v1.disable_eager_execution()
f = np.arange(mib * (1 << 18), dtype=np.float32) * np.float32(0.5)
i = (np.arange(mib * (1 << 16), dtype=np.int64) * 2654435761) - (1 << 40)
vf = tf.compat.v1.get_variable("f32", initializer=f)
vi = tf.compat.v1.get_variable("i64", initializer=i)
with tf.compat.v1.Session() as s:
    s.run(tf.compat.v1.global_variables_initializer())
    tf.compat.v1.train.Saver(write_version=tf.compat.v1.train.SaverDef.V1).save(
        s, os.path.join(out, "v1.ckpt"), write_meta_graph=False)
    tf.compat.v1.train.Saver().save(s, os.path.join(out, "v2.ckpt"), write_meta_graph=False)
"""


def v1_write(c, d, mib):
    py = find_python(["tensorflow"], "TF_PYTHON")
    if not py:
        raise Skip("no Python with TensorFlow (TF_PYTHON, or the test venv): the V1 files are written by its V1 Saver")
    if not os.path.exists(os.path.join(d, "v1.ckpt")):
        if c.run([py, "-c", V1_WRITE, d, str(mib)], env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")).returncode:
            raise Skip("writing the V1 checkpoint failed")
    return d


@section("v1", "8: V1 checkpoints: sequential reads of large V1 tensors vs V2")
def s_v1(c):
    mib = env_int("V1_MIB", 1024)
    d = v1_write(c, os.path.join(c.work, "v1"), mib)
    v1file, v2 = os.path.join(d, "v1.ckpt"), os.path.join(d, "v2.ckpt")
    m1, m2 = c.mp(), c.mp()
    for key in ("f32", "i64"):
        for r in range(1, c.reps + 1):
            c.warm(v1file, v2 + ".data-00000-of-00001")
            t = c.dd(v1file)
            if key == "f32":
                c.put("v1.dd", t)
            for v in c.versions:  # each version's V1 read, then its V2 read
                for which_, src, mnt in (("v1", v1file, m1), ("v2", v2, m2)):
                    if not c.mount(src, mnt, v):
                        return
                    c0 = c.cpu(mnt)
                    c.put(f"v1.{key}.{which_}.{v}", c.dd(os.path.join(mnt, f"variables/{key}.bin")))
                    c.put(f"v1.{key}.c{which_[1]}.{v}", c.cpu(mnt) - c0)
                    if which_ == "v1" and r == c.reps:
                        c.note_rss(f"V1 mount after reading {key} ({v})", mnt)
                    c.unmount(mnt)


@section("views", "9: views of big/tensor and of the 100k-tensor checkpoint (fresh mount per run)")
def s_views(c):
    big, t100k = c.ck("big"), c.ck("t100k")
    data = big + ".data-00000-of-00001"
    mnt = c.mp()

    def read_v(src, path):
        if not c.mount(src, mnt):
            return NAN
        t = c.dd(os.path.join(mnt, path))
        c.unmount_wait(mnt)
        return t

    for r in range(1, c.reps + 1):
        c.warm(data)
        c.put("views.bin", read_v(big, "variables/big/tensor.bin"))
        c.put("views.st", read_v(big, "model.safetensors"))
        if not c.mount(t100k, mnt):
            break
        t0 = time.perf_counter()
        st = os.path.join(mnt, "model.safetensors")
        os.stat(st)
        with open(st, "rb") as f:  # the header: 8-byte length + JSON
            hlen = int.from_bytes(f.read(8), "little")
            f.read(hlen)
        c.put("views.hdr", time.perf_counter() - t0)
        c.unmount_wait(mnt)
        if not c.mount(big, mnt):
            break
        c.put("views.stats", c.timed(["cat", os.path.join(mnt, "stats/big/tensor.txt")]))
        if r == c.reps:
            c.put("views.stats.rss", c.rss_mib(mnt))
        c.unmount_wait(mnt)
        if not c.mount(big, mnt):
            break
        c.put("views.head", c.timed(["head", "-c", "100", os.path.join(mnt, "text/big/tensor.txt")]))
        c.unmount_wait(mnt)
    if c.mount(big, mnt):  # the whole text once
        t0 = time.perf_counter()
        n = 0
        with open(os.path.join(mnt, "text/big/tensor.txt"), "rb") as f:
            while True:
                b = f.read(1 << 20)
                if not b:
                    break
                n += len(b)
        c.put("views.text.mbps", n / (time.perf_counter() - t0) / 1e6)
        c.put("views.text.rss", c.rss_mib(mnt))
        c.unmount_wait(mnt)


@section("direct_io", "12: direct I/O: big/tensor and the walk, direct_io=never/auto (fresh mount per run)")
def s_direct_io(c):
    big = c.ck("big")
    data = big + ".data-00000-of-00001"
    tree = c.plain_tree()
    mnt = c.mp()
    modes = ["never", "auto"] + (["before"] if c.before else [])
    shm = f"/dev/shm/tfmount-bench-cp.{os.getpid()}"
    for _ in range(c.reps):
        c.warm(data)
        c.put("dio.dd", c.dd(data))
        mc, _ = c.memfuse_cold_warm(data, mnt)
        c.put("dio.mf.cold", mc)
        mc, _ = c.memfuse_cold_warm(data, mnt, dio=True)
        c.put("dio.mfd.cold", mc)
        for m in modes:
            v, opts = ("before", ()) if m == "before" else ("after", ("-o", f"direct_io={m}"))
            cw = c.cold_warm(big, mnt, "variables/big/tensor.bin", v, opts)
            c.put(f"dio.cold.{m}", cw[0])
            c.put(f"dio.warm.{m}", cw[1])
        c.put("dio.walk.mf", c.walk_memfuse(tree, mnt))
        for m in ("never", "auto"):
            c.put(f"dio.walk.{m}", c.walk_v(c.ck("twalk"), mnt, "after", ("-o", f"direct_io={m}")))
        for m in ("never", "auto"):
            binf = os.path.join(mnt, "variables/big/tensor.bin")
            for tool, cmd in (("cat", ["cat", binf]), ("cp", ["cp", binf, shm]),
                              ("py", [sys.executable, "-c", "import sys; open(sys.argv[1], 'rb').read()", binf])):
                if not c.mount(big, mnt, "after", ("-o", f"direct_io={m}")):
                    break
                c.put(f"dio.{tool}.{m}", c.timed(cmd))
                if tool == "cp" and os.path.exists(shm):
                    os.unlink(shm)
                c.unmount_wait(mnt)


@section("remote", "10: object storage (moto_server and nginx on 127.0.0.1)")
def s_remote(c):
    moto = which("moto_server", os.path.join(os.path.dirname(test_venv_python()), "moto_server"))
    if not moto:
        raise Skip("moto_server not found (scripts/install-test-servers.sh, or the test venv)")
    port = free_port()
    c.bg([moto, "-H", "127.0.0.1", "-p", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    for _ in range(100):
        if subprocess.run(["curl", "-s", "-o", "/dev/null", url + "/"]).returncode == 0:
            break
        time.sleep(0.1)
    c.run(["curl", "-s", "-X", "PUT", f"{url}/bench"])
    home = os.path.join(c.work, "home")
    os.makedirs(home, exist_ok=True)
    env = dict(os.environ, AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing", AWS_REGION="us-east-1",
               AWS_ENDPOINT_URL=url, AWS_EC2_METADATA_DISABLED="true", HOME=home)
    for name in ("twalk", "twalk_b", "mix"):
        d = os.path.dirname(c.ck(name))
        for f in sorted(os.listdir(d)):
            c.run(["curl", "-s", "-f", "-X", "PUT", "--upload-file", os.path.join(d, f), f"{url}/bench/{name}/{f}"])
    mnt = c.mp()
    key = c.key_of("twalk")
    logf = os.path.join(c.work, "remote_a.log")
    t0 = time.perf_counter()
    if subprocess.run([c.tfmount, "--log-file", logf, "s3://bench/twalk/ckpt", mnt], env=dict(env, RUST_LOG="info")).returncode:
        raise Skip("mounting s3://bench/twalk/ckpt failed")
    os.stat(os.path.join(mnt, f"variables/{key}.shape"))
    c.put("s3.mount", time.perf_counter() - t0)
    c.unmount(mnt)
    time.sleep(0.5)
    c.put("s3.requests", c.logged(logf, r"requests (\d+)", wait=False))
    small = c.key_of("mix")
    logf = os.path.join(c.work, "remote_b.log")
    if subprocess.run([c.tfmount, "--log-file", logf, "s3://bench/mix/ckpt", mnt], env=dict(env, RUST_LOG="info")).returncode == 0:
        c.run(["cat", os.path.join(mnt, f"variables/{small}.bin")])
        c.unmount(mnt)
        time.sleep(0.5)
        c.put("s3.small.bytes", c.logged(logf, r"bytes fetched (\d+)"))
    c.put("s3.index", os.path.getsize(c.ck("mix") + ".index"))
    off, size = c.tensor_at(c.ck("mix"))
    obj = f"{url}/bench/mix/ckpt.data-00000-of-00001"
    sig = ["--aws-sigv4", "aws:amz:us-east-1:s3", "--user", "testing:testing"]

    def read_big(delay, key_rss):
        t0 = time.perf_counter()
        p = subprocess.Popen(["dd", f"if={mnt}/variables/big/tensor.bin", "of=/dev/null", "bs=1M", "status=none"])
        time.sleep(delay)
        c.put(key_rss, c.rss_mib(mnt))
        p.wait()
        return time.perf_counter() - t0

    for _ in range(env_int("REPS_MOTO", c.reps)):
        c.put("s3.curl", c.timed(["curl", "-s", "-f", *sig, "-r", f"{off}-{off + size - 1}", obj, "-o", "/dev/null"]))
        if subprocess.run([c.tfmount, "s3://bench/mix/ckpt", mnt], env=env).returncode:
            break
        c.put("s3.read", read_big(1, "s3.rss"))
        c.unmount(mnt)
    t0 = time.perf_counter()
    subprocess.run([c.tfmount, "diff", "--stats", "s3://bench/twalk/ckpt", "s3://bench/twalk_b/ckpt"], env=env,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    c.put("s3.diff", time.perf_counter() - t0)
    c.put("s3.get1m", c.timed(["curl", "-s", "-f", *sig, "-r", f"{off}-{off + (1 << 20) - 1}", obj, "-o", "/dev/null"]))
    # 10f: the same read over http:// from nginx (ranges served from the file)
    try:
        nport = c.nginx("remote", "", root=c.work)
    except Skip as e:
        c.skipped["10f"] = str(e)
        return
    hurl = f"http://127.0.0.1:{nport}/mix/ckpt"
    for _ in range(c.reps):
        c.warm(c.ck("mix") + ".data-00000-of-00001")
        c.put("http.curl", c.timed(["curl", "-s", "-f", "-r", f"{off}-{off + size - 1}", hurl + ".data-00000-of-00001",
                                    "-o", "/dev/null"]))
        for k, opts in (("http.read", []), ("http.nocrc", ["-o", "nocrc"])):
            if c.run([c.tfmount, *opts, hurl, mnt], env=env).returncode:
                break
            c.put(k, read_big(0.3, "http.rss" if k == "http.read" else "http.rss.nocrc"))
            c.unmount(mnt)


@section("stream_crc", "13: one fetch per byte over http:// with the CRC on (nginx, 127.0.0.1)")
def s_stream_crc(c):
    plain = c.nginx("plain", "")
    capped = c.nginx("capped", "limit_rate 100m;")
    sc256, big = c.ck("sc256"), c.ck("big")
    b = c.before
    variants = [  # row label, binary, options, port, checkpoint
        ("sc.default", c.tfmount, [], plain, "sc256"),
        ("sc.crc_first", c.tfmount, ["-o", "crc_first"], plain, "sc256"),
        ("sc.direct_io", c.tfmount, ["-o", "direct_io=auto"], plain, "sc256"),
        ("sc.capped.default", c.tfmount, [], capped, "sc256"),
        ("sc.capped.crc_first", c.tfmount, ["-o", "crc_first"], capped, "sc256"),
        ("sc.big.default", c.tfmount, [], plain, "big"),
        ("sc.big.crc_first", c.tfmount, ["-o", "crc_first"], plain, "big"),
        ("sc.big.nocrc", c.tfmount, ["-o", "nocrc"], plain, "big"),
        ("sc.big.direct_io", c.tfmount, ["-o", "direct_io=auto"], plain, "big"),
        ("sc.big.remote_cache", c.tfmount, ["-o", "remote_cache=2G"], plain, "big"),
        ("sc.big.remote_cache_crc_first", c.tfmount, ["-o", "remote_cache=2G,crc_first"], plain, "big"),
    ] + ([("sc.before", b, [], plain, "sc256"), ("sc.capped.before", b, [], capped, "sc256"),
          ("sc.big.before", b, [], plain, "big"), ("sc.big.remote_cache_before", b, ["-o", "remote_cache=2G"], plain, "big")]
         if b else [])
    at = {"sc256": c.tensor_at(sc256), "big": c.tensor_at(big)}
    c.put("sc.big.size", at["big"][1])
    for _ in range(c.reps):
        c.warm(sc256 + ".data-00000-of-00001", big + ".data-00000-of-00001")
        for k, ck, port in (("sc.curl.256", "sc256", plain), ("sc.curl.cap", "sc256", capped), ("sc.curl.big", "big", plain)):
            off, size = at[ck]
            c.put(k, c.timed(["curl", "-s", "-f", "-r", f"{off}-{off + size - 1}",
                              f"http://127.0.0.1:{port}/{ck}/ckpt.data-00000-of-00001", "-o", "/dev/null"]))
        for label, binary, opts, port, ck in variants:
            t, fetched = c.sc_read(binary, opts, f"http://127.0.0.1:{port}/{ck}/ckpt")
            c.put(label, t)
            c.put(label + ".bytes", fetched)


def keras_python():
    return find_python(["keras"], "KERAS_PYTHON", "TF_PYTHON")


def start_read_section(c, prefix, src, key, probe_read=False):
    """The rows of 11 and 14: start -> stat of KEY's .shape (rchar, syscr), then cold and warm dd
    of its .bin on fresh mounts against memfuse serving its bytes."""
    mnt = c.mp()
    for t, rchar, syscr, _ in c.start_to_stat(src, mnt, f"variables/{key}.shape", os.path.join(c.work, f"{prefix}.daemon.log")):
        c.put(f"{prefix}.start", t)
        c.put(f"{prefix}.rchar", rchar)
        c.put(f"{prefix}.syscr", syscr)
    kernel = os.path.join(c.work, f"{prefix}_kernel.bin")
    with open(kernel, "wb") as f:
        subprocess.run([c.tfmount, "cat", src, f"variables/{key}.bin"], stdout=f)
    for _ in range(c.reps):
        mc, mw = c.memfuse_cold_warm(kernel, mnt)
        c.put(f"{prefix}.mf.cold", mc)
        c.put(f"{prefix}.mf.warm", mw)
        cw = c.cold_warm(src, mnt, f"variables/{key}.bin")
        c.put(f"{prefix}.cold", cw[0])
        c.put(f"{prefix}.warm", cw[1])
        if prefix == "keras":  # 11c: the peak RssAnon while reading, another fresh mount
            if not c.mount(src, mnt):
                break
            pids = c.pids(mnt)
            p = subprocess.Popen(["dd", f"if={mnt}/variables/{key}.bin", "of=/dev/null", "bs=1M", "status=none"])
            peak = 0
            while p.poll() is None:
                kib = 0
                for pid in pids:
                    try:
                        with open(f"/proc/{pid}/status") as f:
                            for line in f:
                                if line.startswith("RssAnon:"):
                                    kib += int(line.split()[1])
                    except OSError:
                        pass
                peak = max(peak, kib)
                time.sleep(0.02)
            peak = max(peak, c.proc_field(mnt, "status", "RssAnon"))
            c.put("keras.peak", peak / 1024)
            c.unmount_wait(mnt)
    os.unlink(kernel)


@section("keras", "11: a ~1 GiB Keras 3 .keras file")
def s_keras(c):
    py = keras_python()
    if not py:
        raise Skip("no Python with keras: set KERAS_PYTHON (scripts/test.sh installs one)")
    kfile = os.environ.get("KERAS_BENCH_FILE") or os.path.join(c.work, "keras/big.keras")
    if not os.path.isfile(kfile):
        os.makedirs(os.path.dirname(kfile), exist_ok=True)
        log(f"   writing {kfile} with Keras ({py})")
        if c.run([py, os.path.join(REPO, "scripts/gen_keras_bench.py"), kfile],
                 env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"), stderr=subprocess.DEVNULL).returncode:
            raise Skip("gen_keras_bench.py failed")
    c.warm(kfile)
    start_read_section(c, "keras", kfile, "layers/dense/vars/0")


@section("tflite", "14: a ~100 MB TFLite model")
def s_tflite(c):
    py = keras_python() or find_python(["tensorflow"], "TF_PYTHON")
    if not py:
        raise Skip("no Python with TensorFlow: set TF_PYTHON (scripts/test.sh installs one)")
    tfile = os.environ.get("TFLITE_BENCH_FILE") or os.path.join(c.work, "tflite/big.tflite")
    if not os.path.isfile(tfile):
        os.makedirs(os.path.dirname(tfile), exist_ok=True)
        log(f"   writing {tfile} with TensorFlow's converter ({py})")
        if c.run([py, os.path.join(REPO, "scripts/gen_tflite.py"), "--big", tfile, "100"],
                 env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"), stderr=subprocess.DEVNULL).returncode:
            raise Skip("gen_tflite.py --big failed")
    best, key = -1, None
    for line in c.out([c.tfmount, "cat", tfile, "tensors.tsv"]).splitlines()[1:]:
        f = line.split("\t")
        if int(f[3]) > best:
            best, key = int(f[3]), f[0]
    if key is None:
        raise Skip(f"no tensor in {tfile}")
    c.warm(tfile)
    start_read_section(c, "tflite", tfile, key)


@section("whole_tree", "16: the whole tree: du and diff -rq of a mount vs its tensors")
def s_whole_tree(c):
    mib, n = env_int("WHOLE_MIB", 200), 200
    elems = mib * 1024 * 1024 // 4 // n
    a = c.ck("wt_a", "--tensors", str(n), "--elems", str(elems), "--depth", "2")
    b = c.ck("wt_b", "--tensors", str(n), "--elems", str(elems), "--depth", "2", "--alter-every", "40")
    c.put("wt.tensor_bytes", n * elems * 4)
    for mode in ("hidden", "visible"):
        opts = ("-o", f"views={mode}")
        ta = c.mp()
        if not c.mount(a, ta, opts=opts):
            raise Skip(f"mounting {a} failed")
        c.put(f"wt.du.{mode}", float(c.out(["du", "-s", "--apparent-size", "-B1", ta]).split()[0]))
        c.unmount(ta)
        for _ in range(c.reps):
            for k, sub in ((f"wt.all.{mode}", ""), (f"wt.vars.{mode}", "variables")):
                ta, tb = c.mp(), c.mp()
                if not (c.mount(a, ta, opts=opts) and c.mount(b, tb, opts=opts)):
                    raise Skip("mounting the whole-tree checkpoints failed")
                c.put(k, c.timed(["diff", "-rq", os.path.join(ta, sub), os.path.join(tb, sub)], ok=(0, 1),
                                 stderr=subprocess.DEVNULL))
                c.unmount(ta)
                c.unmount(tb)


@section("python", "17: the Python module: every tensor into numpy, vs TensorFlow, safetensors, h5py")
def s_python(c):
    tfpy = find_python(["tensorflow", "h5py", "safetensors"], "TF_PYTHON")
    if not tfpy:
        raise Skip("no Python with tensorflow, h5py and safetensors: set TF_PYTHON (scripts/test.sh installs one)")
    tgt = os.environ.get("CARGO_TARGET_DIR") or os.path.join(REPO, "target")
    mvenv = os.path.join(tgt, "wheel-smoke/venv")
    if not py_has(os.path.join(mvenv, "bin/python"), ["maturin"]):
        c.run([sys.executable, "-m", "venv", mvenv])
        c.run([os.path.join(mvenv, "bin/pip"), "install", "-q", "maturin>=1.9,<2.0"])
    wheels = os.path.join(c.work, "pywheel")
    with open(os.path.join(c.work, "pywheel.log"), "w") as f:
        if subprocess.run([os.path.join(mvenv, "bin/maturin"), "build", "--release", "--out", wheels], cwd=REPO,
                          stdout=f, stderr=f).returncode:
            raise Skip(f"building the release wheel failed: {c.work}/pywheel.log")
    bvenv = os.path.join(c.work, "pyvenv")
    whl = [os.path.join(wheels, w) for w in os.listdir(wheels) if w.endswith(".whl")]
    if c.run([tfpy, "-m", "venv", bvenv]).returncode or \
            c.run([os.path.join(bvenv, "bin/pip"), "install", "-q", *whl, "safetensors", "h5py"]).returncode:
        raise Skip("installing the wheel into a venv failed")
    d = os.path.join(c.work, "py")
    c.run([tfpy, os.path.join(REPO, "scripts/bench_python.py"), "write", d], stderr=subprocess.DEVNULL)
    first = c.ck("py1m", "--tensors", "1000000", "--elems", "16")
    os.makedirs(os.path.join(d, "big1m"), exist_ok=True)
    for f in os.listdir(os.path.dirname(first)):
        os.symlink(os.path.join(os.path.dirname(first), f), os.path.join(d, "big1m", f))
    env = dict(os.environ, TF_PYTHON=tfpy, TFMOUNT_PY=os.path.join(bvenv, "bin/python"), FIRST_KEY=c.key_of("py1m"))
    out = c.out([os.path.join(bvenv, "bin/python"), os.path.join(REPO, "scripts/bench_python.py"), "run", d, str(c.reps)],
                env=env)
    lines = out.splitlines()
    if not lines:
        raise Skip("bench_python.py run printed nothing")
    for k, x in json.loads(lines[0]).items():  # its medians (its own REPS runs, interleaved)
        c.put(f"py.{k}", x)
    for line in lines[1:]:
        log("   " + line)


@section("floor", "20: the mount at FUSE's floor, vs memfuse")
def s_floor(c):
    big = c.ck("big")
    data = big + ".data-00000-of-00001"
    cpy = find_python(["safetensors", "numpy"], "CACHE_PYTHON")
    if not cpy:
        raise Skip("no Python with safetensors and numpy: set CACHE_PYTHON (scripts/test.sh installs one)")
    py = os.path.join(c.work, "floorpy")
    if py_has(cpy, ["tensorflow", "h5py", "safetensors"]):
        c.run([cpy, os.path.join(REPO, "scripts/bench_python.py"), "write", py], stderr=subprocess.DEVNULL)
    else:
        log(f"   (no TensorFlow in {cpy}: mkckpt's 338 tensors instead of TensorFlow's writer)")
        os.makedirs(py, exist_ok=True)
        c.run([c.ex("mkckpt"), os.path.join(py, "ckpt"), "--tensors", "338", "--elems", "406000", "--depth", "1"])
    mnt = c.mp()
    st = os.path.join(c.work, "floor.safetensors")
    if c.mount(os.path.join(py, "ckpt"), mnt):
        shutil.copyfile(os.path.join(mnt, "model.safetensors"), st)
        c.unmount_wait(mnt)
    if not os.path.exists(st) or not os.path.getsize(st):
        raise Skip("could not copy model.safetensors")
    st_bytes, big_bytes = os.path.getsize(st), os.path.getsize(data)
    lf = ("import sys, time\nfrom safetensors.numpy import load_file\n"
          "t = time.perf_counter(); d = load_file(sys.argv[1]); print('%.6f' % (time.perf_counter() - t))")

    def lf_t(path):  # load_file's seconds, timed in the process after its imports
        out = c.out([cpy, "-c", lf, path]).strip()
        return float(out) if out else NAN

    gib = 1 << 30
    for r in range(1, c.reps + 1):
        c.warm(data, st, *[os.path.join(py, f) for f in os.listdir(py) if f.startswith("ckpt.")])
        mc, mw = c.memfuse_cold_warm(data, mnt)
        c.put("fl.mf.cold", mc)
        c.put("fl.mf.warm", mw)
        c.put("fl.mf.dio", c.memfuse_cold_warm(data, mnt, dio=True)[0])
        p = c.memfuse(st, mnt)
        if p:
            c.put("fl.mf.lf", lf_t(os.path.join(mnt, "data")))
            c.memfuse_stop(p, mnt)
        c.put("fl.plain.lf", lf_t(st))
        for v in c.order(r):
            if c.mount(big, mnt, v, ("-o", "direct_io=never")):
                c0 = c.cpu(mnt)
                c.put(f"fl.cold.{v}", c.dd(os.path.join(mnt, "variables/big/tensor.bin")))
                c.put(f"fl.cpugib.{v}", (c.cpu(mnt) - c0) / c.hz / (big_bytes / gib))
                c.put(f"fl.warm.{v}", c.dd(os.path.join(mnt, "variables/big/tensor.bin")))
                c.unmount_wait(mnt)
            if c.mount(big, mnt, v, ("-o", "direct_io=auto")):
                c.put(f"fl.dio.{v}", c.dd(os.path.join(mnt, "variables/big/tensor.bin")))
                c.unmount_wait(mnt)
            if c.mount(os.path.join(py, "ckpt"), mnt, v):
                c0 = c.cpu(mnt)
                c.put(f"fl.lf.{v}", lf_t(os.path.join(mnt, "model.safetensors")))
                c.put(f"fl.lfcpugib.{v}", (c.cpu(mnt) - c0) / c.hz / (st_bytes / gib))
                c.unmount_wait(mnt)


@section("diff_values", "21: diff --values of two 1 GiB checkpoints, every tensor changed, vs cat of both")
def s_diff_values(c):
    a = c.ck("dv_a", "--tensors", "256", "--elems", "1048576", "--depth", "2")
    b = c.ck("dv_b", "--tensors", "256", "--elems", "1048576", "--depth", "2", "--alter-every", "1")
    files = [a + ".data-00000-of-00001", b + ".data-00000-of-00001"]
    for _ in range(c.reps):
        c.warm(*files)
        c.put("dv.cat", c.timed(["cat", *files]))
        c.put("dv.diff", c.timed([c.tfmount, "diff", "--values", a, b], ok=(0, 1)))  # 1: differences


TFJS_WRITE = """import json, os, sys
d, n, shard = sys.argv[1], 256, 4 << 20
paths = [f"group1-shard{i + 1}of{n}.bin" for i in range(n)]
with open(os.path.join(d, "whole"), "wb") as whole:
    for p in paths:
        b = os.urandom(shard)
        with open(os.path.join(d, p), "wb") as f:
            f.write(b)
        whole.write(b)
weights = [{"name": "big/kernel", "shape": [n * shard // 4], "dtype": "float32"}]
model = {"format": "layers-model", "generatedBy": "bench.py", "convertedBy": None,
         "modelTopology": {}, "weightsManifest": [{"paths": paths, "weights": weights}]}
with open(os.path.join(d, "model.json"), "w") as f:
    json.dump(model, f)
"""


@section("export", "23: tfmount export of a 1 GiB TF2 checkpoint vs TensorFlow's write and cp")
def s_export(c):
    tfpy = find_python(["tensorflow", "numpy"], "TF_PYTHON")
    if not tfpy:
        raise Skip("no Python with tensorflow: set TF_PYTHON (scripts/test.sh installs one)")
    if not os.path.isdir("/dev/shm"):
        raise Skip("no /dev/shm")
    shm = tempfile.mkdtemp(prefix="tfmount-bench-export.", dir="/dev/shm")
    try:
        src = os.path.join(shm, "src/ckpt")
        n, elems = 256, 1 << 20  # 256 float32 variables of 4 MiB: 1 GiB
        files = lambda p: [os.path.join(os.path.dirname(p), f) for f in os.listdir(os.path.dirname(p))
                           if f.startswith(os.path.basename(p) + ".")]
        for r in range(c.reps):
            outs = {"shm": os.path.join(shm, f"tf{r}/ckpt"), "disk": os.path.join(c.work, f"extf{r}/ckpt")}
            got = c.out([tfpy, os.path.join(REPO, "scripts/bench_export.py"), src, str(n), str(elems),
                         outs["shm"], outs["disk"]], stderr=subprocess.DEVNULL,
                        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")).split()
            if len(got) != 2:
                raise Skip("scripts/bench_export.py printed nothing (TensorFlow failed)")
            c.put("ex.tf.shm", float(got[0]))
            c.put("ex.tf.disk", float(got[1]))
            for where, out in outs.items():
                for f in files(out):
                    os.remove(f)
            c.warm(*files(src))
            for where, base in (("shm", shm), ("disk", c.work)):
                cp_dir = os.path.join(base, f"cp{r}")
                os.makedirs(cp_dir, exist_ok=True)
                c.put(f"ex.cp.{where}", c.timed(["cp", *files(src), cp_dir]))
                shutil.rmtree(cp_dir)
                out = os.path.join(base, f"ex{r}/ckpt")
                t0 = time.perf_counter()
                p = subprocess.Popen([c.tfmount, "export", src, out], stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL)
                peak = 0
                while p.poll() is None:
                    try:
                        with open(f"/proc/{p.pid}/status") as f:
                            for line in f:
                                if line.startswith("RssAnon:"):
                                    peak = max(peak, int(line.split()[1]))
                    except OSError:
                        pass
                    time.sleep(0.01)
                t = time.perf_counter() - t0
                c.put(f"ex.{where}", t if p.returncode == 0 else NAN)
                c.put("ex.rss", peak / 1024)
                shutil.rmtree(os.path.dirname(out))
            st = os.path.join(shm, f"st{r}/model.safetensors")
            t0 = time.perf_counter()
            ok = subprocess.run([c.tfmount, "export", src, st], stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL).returncode == 0
            c.put("ex.st.shm", time.perf_counter() - t0 if ok else NAN)
            shutil.rmtree(os.path.dirname(st))
    finally:
        shutil.rmtree(shm, ignore_errors=True)


def ganesha(c, export):
    """nfs-ganesha (FSAL VFS, NFSv3 over TCP only) exporting EXPORT read-only on free ports of
    127.0.0.1: (process, nfs port, mount port); Skip with its log's last lines if it cannot."""
    exe = which("ganesha.nfsd", "/usr/bin/ganesha.nfsd")
    if not exe:
        raise Skip("ganesha.nfsd not found (apt-get install nfs-ganesha nfs-ganesha-vfs rpcbind)")
    if not c.out(["pgrep", "-x", "rpcbind"]).strip():
        rpcbind = which("rpcbind", "/usr/sbin/rpcbind", "/sbin/rpcbind")
        if not rpcbind:
            raise Skip("nfs-ganesha registers with rpcbind, which is not installed (apt-get install rpcbind)")
        c.run([rpcbind, "-w"])
    d = os.path.join(c.work, "ganesha")
    os.makedirs(d, exist_ok=True)
    nfs_port, mnt_port = free_port(), free_port()
    conf = os.path.join(d, "ganesha.conf")
    with open(conf, "w") as f:
        f.write(f"""NFS_CORE_PARAM {{
    NFS_Port = {nfs_port}; MNT_Port = {mnt_port}; NLM_Port = {free_port()}; Rquota_Port = {free_port()};
    Protocols = 3; Enable_NLM = false; Enable_RQUOTA = false; Bind_addr = 127.0.0.1;
}}
NFSV4 {{ Graceless = true; }}
EXPORT {{
    Export_Id = 1; Path = {export}; Pseudo = /export; Access_Type = RO; Squash = No_Root_Squash;
    Protocols = 3; Transports = TCP; SecType = sys; FSAL {{ Name = VFS; }}
}}
LOG {{ Default_Log_Level = WARN; }}
""")
    logf = os.path.join(d, "log")
    p = c.bg([exe, "-F", "-f", conf, "-L", logf, "-p", os.path.join(d, "pid")],
             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(300):
        if p.poll() is not None:
            break
        try:
            socket.create_connection(("127.0.0.1", nfs_port), timeout=1).close()
            socket.create_connection(("127.0.0.1", mnt_port), timeout=1).close()
            return p, nfs_port, mnt_port
        except OSError:
            time.sleep(0.1)
    tail = ""
    if os.path.exists(logf):
        with open(logf, errors="replace") as f:
            tail = " | ".join(line.strip()[-120:] for line in f.readlines()[-3:])
    raise Skip(f"nfs-ganesha did not start: {tail}")


def nfs_serve(c, src):
    """`tfmount --nfs-serve 0 SRC` in the background: (process, port)."""
    p = c.bg([c.tfmount, "--nfs-serve", "0", src], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    m = re.search(r" on 127\.0\.0\.1:(\d+) ", p.stdout.readline())
    if not m:
        raise Skip("tfmount --nfs-serve printed no port")
    return p, int(m.group(1))


@section("nfs", "24: the NFS server read by libnfs (nfs-cat, nfs-ls -R) vs nfs-ganesha serving the same bytes from tmpfs")
def s_nfs(c):
    for tool in ("nfs-cat", "nfs-ls"):
        if not which(tool):
            raise Skip(f"{tool} not found (scripts/test.sh installs libnfs-utils)")
    if not os.path.isdir("/dev/shm"):
        raise Skip("no /dev/shm")
    shm = tempfile.mkdtemp(prefix="tfmount-bench-nfs.", dir="/dev/shm")
    try:
        big = c.ck("big")
        with open(os.path.join(shm, "tensor.bin"), "wb") as f:
            subprocess.run([c.tfmount, "cat", big, "variables/big/tensor.bin"], stdout=f, check=True)
        shutil.copytree(c.plain_tree(), os.path.join(shm, "variables"), symlinks=True)
        g, gport, gmnt = ganesha(c, shm)
        tb, tbport = nfs_serve(c, big)
        tw, twport = nfs_serve(c, c.ck("twalk"))
        gurl = lambda p: f"nfs://127.0.0.1{shm}/{p}?nfsport={gport}&mountport={gmnt}"
        turl = lambda port, p: f"nfs://127.0.0.1//{p}?nfsport={port}&mountport={port}"
        mnt = c.mp()
        for r in range(c.reps):
            for who in (("ganesha", "tfmount") if r % 2 == 0 else ("tfmount", "ganesha")):
                if who == "ganesha":
                    c.put("nfs.cat.ganesha", c.timed(["nfs-cat", gurl("tensor.bin")]))
                    c.put("nfs.walk.ganesha", c.timed(["nfs-ls", "-R", gurl("variables")]))
                else:
                    c.put("nfs.cat.tfmount", c.timed(["nfs-cat", turl(tbport, "variables/big/tensor.bin")]))
                    c.put("nfs.walk.tfmount", c.timed(["nfs-ls", "-R", turl(twport, "variables")]))
            if c.mount(big, mnt):
                c.put("nfs.cat.fuse", c.dd(os.path.join(mnt, "variables/big/tensor.bin")))
                c.unmount_wait(mnt)
        for p in (tb, tw, g):
            p.terminate()
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
    finally:
        shutil.rmtree(shm, ignore_errors=True)


@section("edit", "25: editable mounts: cp of a 256 MiB .npy onto a tensor vs cp to a local directory; ls after 1,000 edits vs none")
def s_edit(c):
    sc = c.ck("sc256")
    x = os.path.join(c.work, "edit-x.npy")
    if not os.path.exists(x):
        with open(x, "wb") as f:
            subprocess.run([c.tfmount, "cat", sc, "variables/big/tensor.npy"], stdout=f, check=True)
    local = os.path.join(c.work, "edit-local")
    mnt = c.mp()
    for r in range(c.reps):
        # Each cp writes 256 MiB anew to the same disk: from a clean page cache (sync), and
        # what the last one wrote removed (no writeback of it behind the next).
        c.warm(x)
        shutil.rmtree(local, ignore_errors=True)
        os.makedirs(local)
        os.sync()
        c.put("edit.cp.local", c.timed(["cp", x, os.path.join(local, "x.npy")]))
        shutil.rmtree(local, ignore_errors=True)
        d = os.path.join(c.work, f"edit-dir-{r}")
        shutil.rmtree(d, ignore_errors=True)
        if not c.mount(sc, mnt, opts=("-o", f"edit={d}")):
            break
        os.sync()
        c.put("edit.cp.mount", c.timed(["cp", x, os.path.join(mnt, "variables/big/tensor.npy")]))
        c.unmount_wait(mnt)
        shutil.rmtree(d, ignore_errors=True)
    shutil.rmtree(local, ignore_errors=True)
    tw = c.ck("twalk")
    none_dir, edited_dir = os.path.join(c.work, "edit-none"), os.path.join(c.work, "edit-1000")
    for d in (none_dir, edited_dir):
        shutil.rmtree(d, ignore_errors=True)
    # 1,000 edits through a mount: rm, mv and cp of a small .npy, spread over the tensors.
    if not c.mount(tw, mnt, opts=("-o", f"edit={edited_dir}")):
        return
    v = os.path.join(mnt, "variables")
    names = sorted(os.path.join(r, f[:-4]) for r, _, fs in os.walk(v) for f in fs if f.endswith(".npy"))
    if not names:
        raise Skip("the -o edit mount of twalk lists no tensors")
    small = os.path.join(c.work, "edit-small.npy")
    shutil.copyfile(names[0] + ".npy", small)
    step = max(1, len(names) // 1000)
    for i, n in enumerate(names[::step][:1000]):
        if i % 10 < 4:
            os.unlink(n + ".npy")
        elif i % 10 < 7:
            os.rename(n + ".npy", n + "_moved.npy")
        else:
            shutil.copyfile(small, f"{n}_new.npy")
    c.unmount_wait(mnt)
    for r in range(c.reps):
        for which_, d in (("none", none_dir), ("edited", edited_dir)) if r % 2 == 0 else (("edited", edited_dir), ("none", none_dir)):
            if not c.mount(tw, mnt, opts=("-o", f"edit={d}")):
                return
            c.put(f"edit.ls.{which_}", c.timed(f"ls -R '{mnt}/variables' > /dev/null"))
            c.unmount_wait(mnt)


@section("tfjs_floor", "22: a TF.js weight of 1 GiB in 256 shards, cold dd vs memfuse")
def s_tfjs_floor(c):
    d = os.path.join(c.work, "tfjs_floor")
    os.makedirs(d, exist_ok=True)
    if not os.path.exists(os.path.join(d, "whole")):
        c.run([sys.executable, "-c", TFJS_WRITE, d])
    mnt = c.mp()
    files = [os.path.join(d, f) for f in os.listdir(d)]
    for r in range(1, c.reps + 1):
        c.warm(*files)
        c.put("tj.mf.cold", c.memfuse_cold_warm(os.path.join(d, "whole"), mnt)[0])
        for v in c.order(r):
            if not c.mount(os.path.join(d, "model.json"), mnt, v):
                continue
            c0 = c.cpu(mnt)
            c.put(f"tj.cold.{v}", c.dd(os.path.join(mnt, "variables/big/kernel.bin")))
            c.put(f"tj.cpu.{v}", c.cpu(mnt) - c0)
            c.unmount_wait(mnt)


@section("orbax", "18: a 1 GiB Orbax checkpoint")
def s_orbax(c):
    opy = os.environ.get("ORBAX_PYTHON")
    if not (opy and py_has(opy, ["orbax.checkpoint", "tensorstore", "jax"])):
        raise Skip("no Python with orbax-checkpoint, jax and tensorstore: set ORBAX_PYTHON")
    d = os.path.join(c.work, "orbax")
    ckpt = os.path.join(d, "ckpt")
    if not os.path.isdir(ckpt):
        os.makedirs(d, exist_ok=True)
        if c.run([opy, os.path.join(REPO, "scripts/bench_orbax.py"), "write", d, "1024"], cwd=c.work,
                 stderr=subprocess.DEVNULL).returncode:
            raise Skip("bench_orbax.py write failed")
    c.warm(*[os.path.join(r, f) for r, _, fs in os.walk(ckpt) for f in fs])
    mnt = c.mp()
    for t, rchar, _, _ in c.start_to_stat(ckpt, mnt, "variables/big.shape", os.path.join(c.work, "orbax.daemon.log")):
        c.put("orbax.start", t)
        c.put("orbax.rchar", rchar)
    for _ in range(c.reps):
        if not c.mount(ckpt, mnt):
            break
        c.put("orbax.read", c.dd(os.path.join(mnt, "variables/big.bin")))  # a failed read: nan
        c.unmount_wait(mnt)
    out = c.out([opy, os.path.join(REPO, "scripts/bench_orbax.py"), "read", d, str(c.reps)], cwd=c.work,
                stderr=subprocess.DEVNULL)
    m = re.search(r"tensorstore_s=([\d.]+)", out)
    c.put("orbax.ts", float(m.group(1)) if m else NAN)


@section("cache", "19: object storage at scale: +LAT_MS ms per request, nginx limit_rate RATE per connection")
def s_cache(c):
    lat, rate = os.environ.get("LAT_MS") or "20", os.environ.get("RATE") or "100m"
    aria = which("aria2c")
    if not aria:
        raise Skip("aria2c not found (apt-get install aria2)")
    cpy = find_python(["safetensors", "numpy"], "CACHE_PYTHON")
    if not cpy:
        raise Skip("no Python with safetensors and numpy: set CACHE_PYTHON")
    c300, sc256, big = c.ck("c300"), c.ck("sc256"), c.ck("big")
    up = c.nginx("lat", f"limit_rate {rate};")
    pf = os.path.join(c.work, "proxy.port")
    with open(pf, "w") as f:
        c.bg([c.ex("latency_proxy"), str(up), lat], stdout=f)
    for _ in range(50):
        if os.path.getsize(pf):
            break
        time.sleep(0.1)
    with open(pf) as f:
        port = f.read().strip()
    base = f"http://127.0.0.1:{port}"
    url = f"{base}/c300/ckpt"
    cache, dl, xdg = (os.path.join(c.work, n) for n in ("cache", "dl", "xdg"))
    c.put("c.tensor_bytes", os.path.getsize(c300 + ".data-00000-of-00001"))
    tsv = c.out([c.tfmount, "cat", c300, "tensors.tsv"]).splitlines()
    one = tsv[150].split("\t")[0]  # awk's NR == 151
    lf = ("import sys\nfrom safetensors.numpy import load_file\nd = load_file(sys.argv[1])\n"
          "assert sum(v.nbytes for v in d.values()) > 0")
    what = {
        "lf": lambda m: c.run([cpy, "-c", lf, os.path.join(m, "model.safetensors")]).returncode == 0,
        "cat": lambda m: subprocess.run(f"find '{m}/variables' -name '*.bin' -print0 | sort -z | xargs -0 cat >/dev/null",
                                        shell=True).returncode == 0,
        "stat": lambda m: bool(os.stat(os.path.join(m, f"variables/{one}.shape"))),
        "one": lambda m: bool(os.stat(os.path.join(m, f"variables/{one}.shape"))) and
        c.run(["cat", os.path.join(m, f"variables/{one}.bin")]).returncode == 0,
    }

    def timed_mount(src, opts, w):
        """A fresh mount of SRC with OPTS, W over it, the mount timed in; (s, GETs, bytes fetched).
        Without cache_dir the default disk cache: XDG_CACHE_HOME=WORK/xdg, never the user's."""
        logf = os.path.join(c.work, f"tm.{random.randrange(1 << 30)}.log")
        mnt = c.mp()
        env = dict(os.environ, XDG_CACHE_HOME=xdg, TFMOUNT_CACHE_DIR="", RUST_LOG="info")
        t0 = time.perf_counter()
        if subprocess.run([c.tfmount, *opts, "--log-file", logf, src, mnt], env=env).returncode:
            return NAN, NAN, NAN
        if not what[w](mnt):
            warn(f"{w} of {src} failed")
        t = time.perf_counter() - t0
        c.unmount(mnt)
        return t, c.logged(logf, r"\(GET (\d+),"), c.logged(logf, r"bytes fetched (\d+),", wait=False)

    def put3(k, res, gets=None, fetched=None):
        c.put(k, res[0])
        if gets:
            c.put(gets, res[1])
        if fetched:
            c.put(fetched, res[2])
        return res

    for _ in range(c.reps):
        shutil.rmtree(dl, ignore_errors=True)
        os.makedirs(dl)
        c.put("c.dl", c.timed([aria, "-q", "-Z", "-x", "8", "-s", "8", "-k", "1M", "-j", "2", "-d", dl,
                               "--allow-overwrite=true", url + ".index", url + ".data-00000-of-00001"]))
        c.run(["sync"])
        put3("c.local_lf", timed_mount(os.path.join(dl, "ckpt"), [], "lf"))
        put3("c.local_cat", timed_mount(os.path.join(dl, "ckpt"), [], "cat"))
        co = ["-o", f"cache_dir={cache}"]
        for w in ("lf", "cat"):  # cold through the mount, an empty cache_dir; then a remount on it
            shutil.rmtree(cache, ignore_errors=True)
            put3(f"c.cold_{w}", timed_mount(url, co, w))
            c.run(["sync"])
            put3(f"c.warm_{w}", timed_mount(url, co, w), gets=f"c.warm_{w}_gets")
        for w in ("cat", "lf"):  # no options: the default disk cache, fresh
            shutil.rmtree(xdg, ignore_errors=True)
            put3(f"c.def_{w}", timed_mount(url, [], w), fetched=f"c.def_{w}_b")
        for w in ("lf", "cat"):
            put3(f"c.nocache_{w}", timed_mount(url, ["-o", "cache_dir=none"], w), fetched=f"c.nocache_{w}_b")
        g0 = timed_mount(url, ["-o", "cache_dir=none"], "stat")[1]
        t, g1, _ = timed_mount(url, ["-o", "cache_dir=none"], "one")
        c.put("c.one_t", t)
        c.put("c.one_gets", g1 - g0)
        for name, src in (("sc256", sc256), ("big", big)):
            off, size = c.tensor_at(src)
            obj = f"{base}/{name}/ckpt.data-00000-of-00001"
            c.put(f"c.curl_{name}", c.timed(["curl", "-s", "-f", "-r", f"{off}-{off + size - 1}", obj, "-o", "/dev/null"]))
            target = os.path.join(dl, f"{name}.data")
            if os.path.exists(target):
                os.unlink(target)
            c.put(f"c.aria_{name}", c.timed([aria, "-q", "-x", "8", "-s", "8", "-k", "1M", "-d", dl, "-o", f"{name}.data",
                                             "--allow-overwrite=true", obj]))
            c.put(f"c.mnt_{name}", c.sc_read(c.tfmount, [], f"{base}/{name}/ckpt")[0])


NUMPY_STATS = """import sys, time
import numpy as np
path, off, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
t0 = time.perf_counter()
a = np.fromfile(path, dtype="<f4", count=n, offset=off)
fin = np.isfinite(a)
counts = (int(fin.sum()), int(np.isnan(a).sum()), int((a == np.inf).sum()),
          int((a == -np.inf).sum()), int((a == 0).sum()))
f = a[fin]
lo, hi = f.min(), f.max()
d = f.astype(np.float64)
mean, std = d.mean(), d.std()
hist = np.histogram(f, bins=16, range=(lo, hi))
print(f"{time.perf_counter() - t0:.6f}")
"""


@section("issue19", "issue 19: every row of its table, TFMOUNT_BEFORE and this tree alternating")
def s_issue19(c):
    if not c.before:
        raise Skip("issue19 compares with TFMOUNT_BEFORE: set it to the older binary")
    big, sc256, twalk = c.ck("big"), c.ck("sc256"), c.ck("twalk")
    data = big + ".data-00000-of-00001"
    tree = c.plain_tree()
    mnt = c.mp()
    py = find_python(["tensorflow"], "TF_PYTHON")
    v1 = None
    if py:
        try:
            v1 = v1_write(c, os.path.join(c.work, "v1_19"), 128)  # int64: 64 MiB
        except Skip as e:
            c.skipped["issue19.v1"] = str(e)
    else:
        c.skipped["issue19.v1"] = "no Python with TensorFlow: set TF_PYTHON"
    npy = find_python(["numpy"], "TF_PYTHON", "CACHE_PYTHON")
    try:
        plain, capped = c.nginx("plain19", ""), c.nginx("capped19", "limit_rate 100m;")
    except Skip as e:
        plain = capped = None
        for n in ("http256", "http_capped", "http_big", "http_nocrc", "http_rc"):
            c.skipped[f"issue19.{n}"] = str(e)
    at = {"sc256": c.tensor_at(sc256), "big": c.tensor_at(big)}

    def curl_t(ck, port):
        off, size = at[ck]
        return c.timed(["curl", "-s", "-f", "-r", f"{off}-{off + size - 1}",
                        f"http://127.0.0.1:{port}/{ck}/ckpt.data-00000-of-00001", "-o", "/dev/null"])

    def stats_v(v):
        if not c.mount(big, mnt, v):
            return NAN
        t0 = time.perf_counter()
        with open(os.path.join(mnt, "stats/big/tensor.txt"), "rb") as f, open(os.path.join(c.work, f"stats.{v}.txt"), "wb") as o:
            o.write(f.read())
        t = time.perf_counter() - t0
        c.unmount_wait(mnt)
        return t

    def read_v(src, path, v):
        if not c.mount(src, mnt, v):
            return NAN
        t = c.dd(os.path.join(mnt, path))
        c.unmount_wait(mnt)
        return t

    for r in range(1, c.reps + 1):
        c.warm(data, sc256 + ".data-00000-of-00001")
        c.put("i19.dd", c.dd(data))
        mc, mw = c.memfuse_cold_warm(data, mnt)
        c.put("i19.mf.pc", mc)
        c.put("i19.mf.pcwarm", mw)
        c.put("i19.mf.dio", c.memfuse_cold_warm(data, mnt, dio=True)[0])
        c.put("i19.mf.walk", c.walk_memfuse(tree, mnt))
        c.put("i19.mf.swalk", c.walk_memfuse(tree, mnt, setsid=True))
        if npy:
            out = c.out([npy, "-c", NUMPY_STATS, data, str(at["big"][0]), str(at["big"][1] // 4)],
                        stderr=subprocess.DEVNULL).strip()
            c.put("i19.numpy", float(out) if out else NAN)
        if plain:
            c.put("i19.curl.256", curl_t("sc256", plain))
            c.put("i19.curl.cap", curl_t("sc256", capped))
            c.put("i19.curl.big", curl_t("big", plain))
        for v in c.order(r):
            tb = "variables/big/tensor.bin"
            if v == "after":
                cw = c.cold_warm(big, mnt, tb, v, ("-o", "direct_io=auto"))
                c.put("i19.cold.after", cw[0])
                c.put("i19.warm.after", cw[1])
                cw = c.cold_warm(big, mnt, tb, v, ("-o", "direct_io=never"))
                c.put("i19.pc.after", cw[0])
                c.put("i19.pcwarm.after", cw[1])
            else:
                cw = c.cold_warm(big, mnt, tb, v)
                for k in ("cold", "pc"):
                    c.put(f"i19.{k}.before", cw[0])
                for k in ("warm", "pcwarm"):
                    c.put(f"i19.{k}.before", cw[1])
            if plain:
                b = c.bin(v)
                c.put(f"i19.h256.{v}", c.sc_read(b, [], f"http://127.0.0.1:{plain}/sc256/ckpt")[0])
                c.put(f"i19.hcap.{v}", c.sc_read(b, [], f"http://127.0.0.1:{capped}/sc256/ckpt")[0])
                c.put(f"i19.hbig.{v}", c.sc_read(b, [], f"http://127.0.0.1:{plain}/big/ckpt")[0])
                c.put(f"i19.hnocrc.{v}", c.sc_read(b, ["-o", "nocrc"], f"http://127.0.0.1:{plain}/big/ckpt")[0])
                c.put(f"i19.hrc.{v}", c.sc_read(b, ["-o", "remote_cache=2G"], f"http://127.0.0.1:{plain}/big/ckpt")[0])
            c.put(f"i19.stats.{v}", stats_v(v))
            if v1:
                c.put(f"i19.v1.{v}", read_v(os.path.join(v1, "v1.ckpt"), "variables/i64.bin", v))
                c.put(f"i19.v2.{v}", read_v(os.path.join(v1, "v2.ckpt"), "variables/i64.bin", v))
            c.put(f"i19.walk.{v}", c.walk_v(twalk, mnt, v))
    sa, sb = (os.path.join(c.work, f"stats.{v}.txt") for v in ("after", "before"))
    if os.path.exists(sa) and os.path.exists(sb):
        same = open(sa, "rb").read() == open(sb, "rb").read()
        log("   stats/big/tensor.txt: " + ("the same text before and after" if same else "differs before / after"))


# ---------------------------------------------------------------------------------------------
# the table, the JSON, the comparison
# ---------------------------------------------------------------------------------------------
DEFAULT_OFF = {"orbax", "cache", "issue19"}  # as scripts/bench.sh: run only when asked for


def expand(rows, versions):
    """(row, version, name) for each row and version it is measured for."""
    for row in rows:
        for v in (versions if row.versions else ["after"]):
            yield row, v, row.name + ("" if v == "after" else f"@{v}")


def fmt(x, unit):
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "nan"
    if unit == "s":
        return f"{x * 1000:.1f} ms"
    if unit in ("B", "ticks", "requests", "GETs", "calls"):
        return f"{x:.0f}" + ("" if unit in ("ticks",) else f" {unit}" if unit != "B" else " B")
    if unit == "MiB":
        return f"{x:.1f} MiB"
    return f"{x:.3g} {unit}"


def tfmt(target):
    if not target:
        return "-"
    op, t = target
    return f"{op} {int(t)}" if float(t).is_integer() else f"{op} {t:g}"


def check(x, target):
    if target is None:
        return "info"
    op, t = target
    if x is None or math.isnan(x):
        return "MISS"
    return "PASS" if {">=": x >= t, "<=": x <= t, "<": x < t, ">": x > t}[op] else "MISS"


def evaluate(c, selected_rows, ran, section_skip):
    out = []
    for row, v, name in expand(selected_rows, c.versions if c else ["after"]):
        rec = {"name": name, "section": row.section, "version": v, "what": row.what, "unit": row.unit,
               "cmd": row.cmd, "target": list(row.target) if row.target else None,
               "ratio_is": row.ratio if row.base else None}
        why = section_skip.get(row.section) or (c.skipped.get(row.name) if c else None) \
            or (None if row.section in ran else "section not run") \
            or ("needs TFMOUNT_BEFORE" if "before" in row.name and not row.versions and not c.before else None)
        if why:
            rec.update(result="SKIPPED", why=why, value=None, baseline=None, ratio=None, figure=None)
            out.append(rec)
            continue
        value = row.value.eval(c.med, v)
        base = row.base.eval(c.med, v) if row.base else None
        ratio = None
        if base is not None:
            a, b = (base, value) if row.ratio == "base/value" else (value, base)
            ratio = NAN if math.isnan(a) or math.isnan(b) else (math.inf if b == 0 else a / b)
        fig = ratio if row.base else value
        keys = row.value.keys(v) + (row.base.keys(v) if row.base else [])
        if all(not c.S.get(k) for k in keys):
            rec.update(result="SKIPPED", why="nothing measured (see the section's output)", value=None,
                       baseline=None, ratio=None, figure=None)
            out.append(rec)
            continue
        rec.update(value=value, baseline=base, ratio=ratio, figure=fig, result=check(fig, row.target),
                   runs={k: c.S.get(k, []) for k in keys})
        out.append(rec)
    return out


def clean(x):
    """JSON has no nan or inf: null for them."""
    if isinstance(x, float) and (math.isnan(x) or math.isinf(x)):
        return None
    if isinstance(x, dict):
        return {k: clean(v) for k, v in x.items()}
    if isinstance(x, list):
        return [clean(v) for v in x]
    return x


def print_table(recs):
    log(f"{'row':<22} {'value':>14} {'baseline':>14} {'ratio':>8}  {'target':<8} result")
    for r in recs:
        tgt = tfmt(r["target"])
        if r["result"] == "SKIPPED":
            log(f"{r['name']:<22} {'':>14} {'':>14} {'':>8}  {tgt:<8} SKIPPED: {r['why']}")
            continue
        ratio = "-" if r["ratio"] is None else ("nan" if math.isnan(r["ratio"]) else f"{r['ratio']:.3f}")
        log(f"{r['name']:<22} {fmt(r['value'], r['unit']):>14} {fmt(r['baseline'], r['unit']) if r['baseline'] is not None else '-':>14} "
            f"{ratio:>8}  {tgt:<8} {r['result']}   {r['what']}")


def compare(old_path, recs):
    with open(old_path) as f:
        old = {r["name"]: r for r in json.load(f)["rows"]}
    log(f"\n== against {old_path} (the figure: the ratio where a row has a baseline, else the value)")
    log(f"{'row':<22} {'before':>12} {'after':>12} {'after/before':>12}  {'target':<8} before -> after")
    for r in recs:
        o = old.get(r["name"])
        if not o:
            continue
        a, b = r.get("figure"), o.get("figure")
        unit = "x" if r.get("ratio_is") else r["unit"]
        show = (lambda x: "-" if x is None else f"{x:.3f}") if unit == "x" else (lambda x: "-" if x is None else fmt(x, unit))
        ch = "-" if a is None or b is None or b == 0 or (isinstance(a, float) and math.isnan(a)) else f"{a / b:.3f}"
        tgt = tfmt(r["target"])
        log(f"{r['name']:<22} {show(b):>12} {show(a):>12} {ch:>12}  {tgt:<8} {o['result']} -> {r['result']}")


def select(tokens):
    """Sections to run and rows to show, from section names and row names (or their prefixes)."""
    if not tokens:
        return [s for s in SECTIONS if s not in DEFAULT_OFF], ROWS
    sections, rows = [], []
    for t in tokens:
        if t in SECTIONS:
            sections.append(t)
            rows += [r for r in ROWS if r.section == t]
            continue
        hit = [r for r in ROWS if r.name == t] or [r for r in ROWS if r.name.startswith(t)]
        if not hit:
            sys.exit(f"bench: {t!r} is neither a section ({', '.join(SECTIONS)}) nor a row (--list)")
        rows += hit
        sections += [r.section for r in hit]
    order = [s for s in SECTIONS if s in sections]
    # 5 is read from what 1-4 and 6 recorded
    if "rss" in order and len(order) == 1:
        order = [s for s in SECTIONS if s in ("read", "startup", "walk", "graph", "rss")]
    return order, [r for r in ROWS if r in rows]


def git_rev():
    p = subprocess.run(["git", "-C", REPO, "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    return p.stdout.strip() or None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="Sections and environment: see the header of scripts/bench.py (--help-long).")
    ap.add_argument("--only", default=os.environ.get("ONLY") or "", help="sections or rows, comma-separated")
    ap.add_argument("--reps", type=int, default=env_int("REPS", 3), help="repetitions (REPS, default 3)")
    ap.add_argument("--json", help="write the rows and every run here (default: BENCH_TMP/tfmount-bench-DATE.json)")
    ap.add_argument("--before", help="a previous run's JSON: print each row's figure against it")
    ap.add_argument("--after", help="with --before: compare two JSON files, run nothing")
    ap.add_argument("--list", action="store_true", help="print the rows (what, command, baseline, target) and exit")
    ap.add_argument("--no-build", action="store_true", help="use the release binaries already built")
    ap.add_argument("--help-long", action="store_true", help="print the header (sections, environment)")
    args = ap.parse_args()
    if args.help_long:
        print(__doc__)
        return 0
    tokens = [t for t in re.split(r"[,\s]+", args.only) if t]
    if args.list:
        for r in select(tokens)[1]:
            tgt = f"{r.target[0]} {r.target[1]:g}" if r.target else "info"
            base = f"{r.ratio.replace('value', str(r.value)).replace('base', str(r.base))}" if r.base else str(r.value)
            log(f"{r.name:<20} [{r.section}] {r.what}\n{'':<20}   figure: {base} ({r.unit}), target {tgt}"
                f"{', also TFMOUNT_BEFORE' if r.versions else ''}\n{'':<20}   command: {r.cmd}")
        return 0
    if args.after:
        if not args.before:
            sys.exit("bench: --after needs --before")
        with open(args.after) as f:
            recs = json.load(f)["rows"]
        compare(args.before, recs)
        return 0
    for tool in ("fusermount3", "dd", "curl"):
        if not which(tool):
            sys.exit(f"bench: {tool} not found (fusermount3: apt-get install fuse3)")
    if not os.path.exists("/dev/fuse"):
        sys.exit("bench: /dev/fuse is missing")
    order, rows = select(tokens)
    if not args.no_build:
        log("== building (release)")
        for extra in ([], ["--example", "mkckpt"], ["--example", "mkgraph"], ["--example", "memfuse"],
                      ["--example", "latency_proxy"]):
            if subprocess.run(["cargo", "build", "--release", "--quiet", *extra], cwd=REPO).returncode:
                sys.exit(f"bench: cargo build --release {' '.join(extra)} failed")
    target = os.environ.get("CARGO_TARGET_DIR") or os.path.join(REPO, "target")
    if not os.access(os.path.join(target, "release", "tfmount"), os.X_OK):
        sys.exit(f"bench: {target}/release/tfmount missing")
    c = Ctx(args)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(130))
    load0 = open("/proc/loadavg").read().split()[:3]
    log(f"== machine: {os.cpu_count()} CPUs, load {' '.join(load0)}; timings are the median of {c.reps}")
    log("   (shared machines are noisy: read the ratios, each against a baseline from this same run)")
    log(f"== work dir {c.work}; sections: {' '.join(order)}")
    section_skip, ran = {}, set()
    try:
        for name in order:
            title, fn = SECTIONS[name]
            log(f"\n== {title}")
            t0 = time.perf_counter()
            try:
                fn(c)
                ran.add(name)
            except Skip as e:
                section_skip[name] = str(e)
                log(f"   SKIPPED: {e}")
            log(f"   ({time.perf_counter() - t0:.0f} s)")
    except KeyboardInterrupt:
        warn("interrupted: the rows so far")
    finally:
        load1 = open("/proc/loadavg").read().split()[:3]
        recs = evaluate(c, rows, ran, section_skip)
        c.cleanup()
    log(f"\n== summary (median of {c.reps}; noisy machine, load now {' '.join(load1)})")
    print_table(recs)
    path = args.json or os.path.join(os.environ.get("BENCH_TMP") or "/tmp",
                                     time.strftime("tfmount-bench-%Y%m%d-%H%M%S.json"))
    doc = {"meta": {"commit": git_rev(), "date": time.strftime("%Y-%m-%dT%H:%M:%S"), "reps": c.reps,
                    "cpus": os.cpu_count(), "load_before": load0, "load_after": load1, "sections": order,
                    "before_binary": c.before, "big_gib": c.big_gib, "walk_tensors": c.walk_tensors,
                    "tfmount_args": c.tfmount_args},
           "rows": clean(recs), "samples": clean(dict(c.S))}
    with open(path, "w") as f:
        json.dump(doc, f, indent=1)
    log(f"\n== JSON: {path}")
    if args.before:
        compare(args.before, clean(recs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
