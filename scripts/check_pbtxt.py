#!/usr/bin/env python3
"""Check a mounted tfmount GRAPH view against an expected record written by scripts/gen_graph_fixtures.py.

Usage::

    python3 scripts/check_pbtxt.py MOUNTPOINT EXPECTED_JSON [--dir-suffixes=LIST] [--no-root] [--strict-count] [-v]
    python3 scripts/check_pbtxt.py --selftest [EXPECTED_JSON ...]

Needs TensorFlow's protobuf classes (``import tensorflow``) and numpy; run it with the fixture virtualenv.

MOUNTPOINT is the directory holding ``meta_graphs/``, the root links (``graph``, ``functions``, ...) and
``saved_model.pbtxt`` -- for a checkpoint directory source that is the checkpoint's own directory
(``MOUNT/model.ckpt``). Every rendered file is parsed with ``google.protobuf.text_format.Parse`` into its message
class and compared with TensorFlow's message, decoded from the base64 in EXPECTED_JSON (equality, or equal
deterministic serialisations, so NaN floats compare equal to themselves):

==========================================  =======================================================
``meta_graphs/<dir>/graph/<node>.pbtxt``     NodeDef, one per ``graph_def.node``
``.../functions/<fn>.pbtxt``                FunctionDef with ``node_def`` cleared
``.../functions/<fn>/<node>.pbtxt``         NodeDef, one per ``FunctionDef.node_def``
``.../signatures/<key>.pbtxt``              SignatureDef
``.../signatures.txt``                      text: equal (modulo leading/trailing blank lines) to one of the
                                            recorded saved_model_cli outputs (see below)
``.../meta_info_def.pbtxt``                 MetaGraphDef.MetaInfoDef   (only when set in TF's message;
``.../saver_def.pbtxt``                     SaverDef                    when not set, the file may be
``.../object_graph.pbtxt``                  SavedObjectGraph            absent)
``.../collections/<key>.pbtxt``             CollectionDef
``.../constants/<node>.{bin,shape,dtype}``  sha256 and size of .bin, text of .shape / .dtype; ``.npy``
                                            exists exactly for numpy-native dtypes and np.load gives the
                                            same dtype, shape and bytes
``saved_model.pbtxt``                       SavedModel (SavedModel sources)
==========================================  =======================================================

``<dir>`` is the record's ``dir`` (tags joined by ``,``, escaped as one component). The default meta graph
(``default_meta_graph``) is also checked through the root links ``MOUNT/graph``, ``MOUNT/functions``, ...
(skip with ``--no-root``). GraphDef sources (``kind: graph_def``) are checked at the root only.
``--strict-count`` also fails when a directory holds more ``.pbtxt``/constant files than expected.

Names become paths by the SAME escaping as checkpoint keys (scripts/check_npy.py, reused here): a node name
is a key, ``/`` makes directories; a function's nodes live under the function name as an extra first
component (key ``<fn>/<node>``). One open question is the set of suffixes reserved for directory components
(rule 3): the checkpoint rule reserves ``.bin .shape .dtype .npy``; here the files are ``.pbtxt``, so by
default ``.pbtxt`` is reserved too (a node ``odd/name.pbtxt/leaf`` beside a node ``odd/name`` would
otherwise collide: ``odd/name.pbtxt`` would be a file and a directory). ``--dir-suffixes=.bin,.shape,.dtype,.npy``
selects the checkpoint rule unchanged.

``signatures.txt`` candidates, from the expected record: ``show_all_section`` (this meta graph's part of
``saved_model_cli show --dir D --all``), the same without its last line (the ops set, printed in Python hash
order), ``signatures_txt`` (``saved_model_cli show --dir D --tag_set T``), and the ``signature_show`` outputs
joined. If the record has none, signatures.txt is not checked.

One line is printed per failure, then exactly ``N passed, M failed``; the exit status is 1 if anything failed.

``--selftest`` renders TensorFlow's own messages (text_format.MessageToString) and constants into a temporary
directory laid out as above (root links are symlinks), runs the checker on it, expects 0 failures, then damages
a few files and expects the checker to notice. The constants are rendered by an independent pure-Python
TensorProto decoder (``tensor_layout`` below, following the C++ ``Tensor::FromProto`` rules) and compared
with the expected sha256 -- a cross-check of the records themselves.
"""

import base64
import hashlib
import json
import os
import shutil
import struct
import sys
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check_npy  # noqa: E402
from check_npy import NUMPY_NATIVE  # noqa: E402

CKPT_SUFFIXES = (".bin", ".shape", ".dtype", ".npy")
DEFAULT_DIR_SUFFIXES = CKPT_SUFFIXES + (".pbtxt",)


def _pb():
    """TensorFlow's message classes (imported lazily: importing tensorflow takes seconds)."""
    from google.protobuf import text_format
    from tensorflow.core.framework import function_pb2, graph_pb2, node_def_pb2
    from tensorflow.core.protobuf import (meta_graph_pb2, saved_model_pb2, saved_object_graph_pb2,
                                          saver_pb2)

    return {
        "text_format": text_format,
        "NodeDef": node_def_pb2.NodeDef,
        "FunctionDef": function_pb2.FunctionDef,
        "GraphDef": graph_pb2.GraphDef,
        "SignatureDef": meta_graph_pb2.SignatureDef,
        "MetaGraphDef": meta_graph_pb2.MetaGraphDef,
        "MetaInfoDef": meta_graph_pb2.MetaGraphDef.MetaInfoDef,
        "CollectionDef": meta_graph_pb2.CollectionDef,
        "SaverDef": saver_pb2.SaverDef,
        "SavedObjectGraph": saved_object_graph_pb2.SavedObjectGraph,
        "SavedModel": saved_model_pb2.SavedModel,
    }


# ----------------------------------------------------------------------------------------------
# Paths
# ----------------------------------------------------------------------------------------------

def escape_component(comp, is_dir, dir_suffixes=DEFAULT_DIR_SUFFIXES):
    """check_npy.escape_component with a configurable set of reserved directory suffixes (rule 3)."""
    return check_npy.escape_component(comp, is_dir, dir_suffixes)


def key_to_path(key, suffix, dir_suffixes=DEFAULT_DIR_SUFFIXES):
    """Relative path (bytes) of the file for `key` (str or bytes) with `suffix` (e.g. '.pbtxt')."""
    if isinstance(key, str):
        key = key.encode("utf-8")
    comps = key.split(b"/")
    levels = [escape_component(c, i < len(comps) - 1, dir_suffixes) for i, c in enumerate(comps)]
    levels[-1] += suffix.encode()
    return b"/".join(levels)


# ----------------------------------------------------------------------------------------------
# Independent TensorProto -> tfmount tensor layout (C++ Tensor::FromProto rules)
# ----------------------------------------------------------------------------------------------

# DataType enum -> (name, numpy dtype or None for strings, typed field)
_DT = {
    1: ("float32", "<f4", "float_val"), 2: ("float64", "<f8", "double_val"), 3: ("int32", "<i4", "int_val"),
    4: ("uint8", "u1", "int_val"), 5: ("int16", "<i2", "int_val"), 6: ("int8", "i1", "int_val"),
    7: ("string", None, "string_val"), 8: ("complex64", "<c8", "scomplex_val"), 9: ("int64", "<i8", "int64_val"),
    10: ("bool", "?", "bool_val"), 11: ("qint8", "i1", "int_val"), 12: ("quint8", "u1", "int_val"),
    13: ("qint32", "<i4", "int_val"), 14: ("bfloat16", "<u2", "half_val"), 15: ("qint16", "<i2", "int_val"),
    16: ("quint16", "<u2", "int_val"), 17: ("uint16", "<u2", "int_val"), 18: ("complex128", "<c16", "dcomplex_val"),
    19: ("float16", "<u2", "half_val"), 22: ("uint32", "<u4", "uint32_val"), 23: ("uint64", "<u8", "uint64_val"),
    24: ("float8_e5m2", "u1", "float8_val"), 25: ("float8_e4m3fn", "u1", "float8_val"),
    26: ("float8_e4m3fnuz", "u1", "float8_val"), 27: ("float8_e4m3b11fnuz", "u1", "float8_val"),
    28: ("float8_e5m2fnuz", "u1", "float8_val"), 29: ("int4", "u1", "int_val"), 30: ("uint4", "u1", "int_val"),
    31: ("int2", "u1", "int_val"), 32: ("uint2", "u1", "int_val"), 33: ("float4_e2m1fn", "u1", "float8_val"),
}
_SUBBYTE_MASK = {"int4": 0x0F, "uint4": 0x0F, "int2": 0x03, "uint2": 0x03}


def _read_varint(buf, pos):
    result = shift = 0
    while True:
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7


def tensor_layout(tp):
    """(dtype name, shape, layout bytes) of a TensorProto, decoded without TensorFlow's Python helpers."""
    name, npdt, field = _DT[tp.dtype]
    shape = [d.size for d in tp.tensor_shape.dim]
    n = int(np.prod(shape)) if shape else 1
    if n == 0:
        return name, shape, b""
    if name == "string":
        if tp.tensor_content:
            c = tp.tensor_content
            pos = 0
            lens = []
            for _ in range(n):
                ln, pos = _read_varint(c, pos)
                lens.append(ln)
            vals = []
            for ln in lens:
                vals.append(c[pos:pos + ln])
                pos += ln
            if pos != len(c):
                raise ValueError("string tensor_content size mismatch")
        else:
            vals = list(tp.string_val)
            vals = (vals + [vals[-1]] * (n - len(vals)))[:n] if vals else [b""] * n
        return name, shape, b"".join(struct.pack("<Q", len(v)) + v for v in vals)
    dt = np.dtype(npdt)
    if tp.tensor_content:
        if len(tp.tensor_content) != n * dt.itemsize:
            raise ValueError("tensor_content size mismatch")
        return name, shape, bytes(tp.tensor_content)
    if field == "float8_val":
        vals = list(tp.float8_val)
    elif field in ("scomplex_val", "dcomplex_val"):
        flat = list(getattr(tp, field))
        vals = [complex(flat[i], flat[i + 1]) for i in range(0, len(flat) - 1, 2)]
    else:
        vals = list(getattr(tp, field))
    if not vals:
        return name, shape, bytes(n * dt.itemsize)
    vals = (vals + [vals[-1]] * (n - len(vals)))[:n]
    if name in _SUBBYTE_MASK:
        return name, shape, bytes(v & _SUBBYTE_MASK[name] for v in vals)
    if field == "half_val":
        arr = np.array(vals, dtype=np.int64).astype("<u2")
    elif name in ("qint8", "qint16", "qint32", "int8", "int16", "uint8", "uint16", "quint8", "quint16"):
        arr = np.array(vals, dtype=np.int64).astype(dt)  # int_val holds them as int32 (wraps like C++)
    else:
        arr = np.array(vals, dtype=dt)
    return name, shape, arr.tobytes()


# ----------------------------------------------------------------------------------------------
# The checker
# ----------------------------------------------------------------------------------------------

def b64msg(cls, s):
    m = cls()
    m.ParseFromString(base64.b64decode(s))
    return m


def function_header(f):
    h = type(f)()
    h.CopyFrom(f)
    del h.node_def[:]
    return h


def signatures_txt_candidates(mg, concrete_functions=""):
    """What signatures.txt may hold: this meta graph's section of ``show --all`` (its ops line
    included), followed for a TF2 meta graph (one with an object graph) by the ``Concrete
    Functions:`` part of ``show --all``; older renderings are accepted too."""
    cands = []
    sec = mg.get("show_all_section")
    if sec:
        if mg.get("has", {}).get("object_graph_def") and concrete_functions:
            cands.append(("show_all_section + Concrete Functions", sec + concrete_functions))
        cands.append(("show_all_section", sec))
        lines = sec.rstrip("\n").split("\n")
        if lines and lines[-1].startswith("The MetaGraph with tag set"):
            cands.append(("show_all_section without the ops line", "\n".join(lines[:-1]) + "\n"))
    if mg.get("signatures_txt"):
        cands.append(("signatures_txt", mg["signatures_txt"]))
    if mg.get("signature_show"):
        cands.append(("signature_show joined", "".join(mg["signature_show"][k] for k in sorted(mg["signature_show"]))))
    return cands


_OPS = " contains the following ops: "


def canon_show_all(text):
    """``text`` with the ops line's Python set (printed in hash order) sorted."""
    import ast

    out = []
    for line in text.strip("\n").split("\n"):
        head, sep, ops = line.partition(_OPS)
        if sep and head.startswith("The MetaGraph with tag set "):
            try:
                items = sorted(ast.literal_eval(ops)) if ops != "set()" else []
                line = head + sep + repr(items)
            except (ValueError, SyntaxError):
                pass
        out.append(line)
    return "\n".join(out)


class Checker:
    def __init__(self, root, expected, dir_suffixes=DEFAULT_DIR_SUFFIXES, check_root=True, strict_count=False,
                 verbose=False, quiet=False):
        self.pb = _pb()
        self.quiet = quiet
        self.root = os.fsencode(root)
        self.exp = expected
        self.sfx = dir_suffixes
        self.check_root = check_root
        self.strict = strict_count
        self.verbose = verbose
        self.passed = 0
        self.failed = 0
        self.failures = []

    # -- reporting
    def ok(self, what):
        self.passed += 1
        if self.verbose:
            print("ok   %s" % what)

    def fail(self, what, why):
        self.failed += 1
        line = "FAIL %s: %s" % (what, why)
        self.failures.append(line)
        if not self.quiet:
            print(line)

    # -- helpers
    def path(self, base, key, suffix):
        return os.path.join(base, key_to_path(key, suffix, self.sfx))

    def rel(self, p):
        return os.fsdecode(os.path.relpath(p, self.root))

    def read(self, p):
        with open(p, "rb") as f:
            return f.read()

    def compare_msg(self, p, cls, want, label=None):
        label = label or self.rel(p)
        try:
            raw = self.read(p)
        except OSError as e:
            self.fail(label, "cannot read: %s" % e.strerror)
            return
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            self.fail(label, "not UTF-8: %s" % e)
            return
        got = cls()
        try:
            self.pb["text_format"].Parse(text, got)
        except Exception as e:
            self.fail(label, "text_format.Parse(%s) failed: %s" % (cls.DESCRIPTOR.name, str(e).splitlines()[0]))
            return
        if got == want or got.SerializeToString(deterministic=True) == want.SerializeToString(deterministic=True):
            self.ok(label)
            return
        a = self.pb["text_format"].MessageToString(want).splitlines()
        b = self.pb["text_format"].MessageToString(got).splitlines()
        i = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
        self.fail(label, "%s differs from TensorFlow's at line %d: expected %r, got %r"
                  % (cls.DESCRIPTOR.name, i + 1, a[i] if i < len(a) else "<end>", b[i] if i < len(b) else "<end>"))

    def count(self, base, label, suffixes, want):
        if not os.path.isdir(base):
            return
        n = 0
        for _dp, _dn, fns in os.walk(base):
            n += sum(1 for fn in fns if fn.endswith(tuple(s.encode() for s in suffixes)))
        if n == want:
            self.ok("%s: %d files" % (label, n))
        elif n < want:
            pass  # the missing ones were reported one by one
        elif self.strict:
            self.fail(label, "%d files, expected %d" % (n, want))
        else:
            print("note %s: %d files, expected %d (extra files; --strict-count makes this a failure)" % (label, n, want))

    # -- views
    def check_graph(self, base, gd, consts):
        pb = self.pb
        gdir = os.path.join(base, b"graph")
        for nd in gd.node:
            self.compare_msg(self.path(gdir, nd.name, ".pbtxt"), pb["NodeDef"], nd)
        self.count(gdir, self.rel(gdir), [".pbtxt"], len(gd.node))
        fdir = os.path.join(base, b"functions")
        nfiles = 0
        for f in gd.library.function:
            fname = f.signature.name
            self.compare_msg(self.path(fdir, fname, ".pbtxt"), pb["FunctionDef"], function_header(f))
            for nd in f.node_def:
                self.compare_msg(self.path(fdir, fname + "/" + nd.name, ".pbtxt"), pb["NodeDef"], nd)
            nfiles += 1 + len(f.node_def)
        self.count(fdir, self.rel(fdir), [".pbtxt"], nfiles)
        self.check_constants(os.path.join(base, b"constants"), consts)

    def check_constants(self, cdir, consts):
        for name, rec in consts.items():
            stem = os.path.join(cdir, key_to_path(name, "", self.sfx))
            label = "constant %r" % name
            try:
                data = self.read(stem + b".bin")
            except OSError as e:
                self.fail(label + " .bin", "cannot read %s: %s" % (self.rel(stem + b".bin"), e.strerror))
            else:
                st = os.stat(stem + b".bin")
                if hashlib.sha256(data).hexdigest() != rec["sha256"] or len(data) != rec["nbytes"]:
                    self.fail(label + " .bin", "%d bytes sha256 %s, expected %d bytes sha256 %s"
                              % (len(data), hashlib.sha256(data).hexdigest(), rec["nbytes"], rec["sha256"]))
                elif st.st_size != len(data):
                    self.fail(label + " .bin", "stat size %d != %d bytes read" % (st.st_size, len(data)))
                else:
                    self.ok(label + " .bin")
            for sfx, want in ((b".shape", " ".join(str(d) for d in rec["shape"]) + "\n"),
                              (b".dtype", rec["dtype"] + "\n")):
                try:
                    got = self.read(stem + sfx).decode("utf-8", "replace")
                except OSError as e:
                    self.fail(label + " " + sfx.decode(), "cannot read: %s" % e.strerror)
                    continue
                if got == want:
                    self.ok(label + " " + sfx.decode())
                else:
                    self.fail(label + " " + sfx.decode(), "%r, expected %r" % (got, want))
            npy = stem + b".npy"
            if not rec["npy"]:
                if os.path.lexists(npy):
                    self.fail(label + " .npy", "exists, but %s is not a numpy-native dtype" % rec["dtype"])
                else:
                    self.ok(label + " no .npy")
                continue
            try:
                arr = np.load(npy, allow_pickle=False)
            except Exception as e:
                self.fail(label + " .npy", "cannot load: %s: %s" % (type(e).__name__, e))
                continue
            probs = []
            if arr.dtype.name != rec["dtype"] or rec["dtype"] not in NUMPY_NATIVE:
                probs.append("dtype %s != %s" % (arr.dtype.name, rec["dtype"]))
            if list(arr.shape) != rec["shape"]:
                probs.append("shape %s != %s" % (list(arr.shape), rec["shape"]))
            if hashlib.sha256(np.ascontiguousarray(arr).tobytes()).hexdigest() != rec["sha256"]:
                probs.append("sha256 differs")
            if probs:
                self.fail(label + " .npy", "; ".join(probs))
            else:
                self.ok(label + " .npy")
        self.count(cdir, self.rel(cdir), [".bin"], len(consts))

    def check_meta_graph(self, base, rec, mg):
        pb = self.pb
        self.check_graph(base, mg.graph_def, rec.get("constants", {}))
        sdir = os.path.join(base, b"signatures")
        for k, sd in mg.signature_def.items():
            self.compare_msg(self.path(sdir, k, ".pbtxt"), pb["SignatureDef"], sd)
        self.count(sdir, self.rel(sdir), [".pbtxt"], len(mg.signature_def))
        cdir = os.path.join(base, b"collections")
        for k, cd in mg.collection_def.items():
            self.compare_msg(self.path(cdir, k, ".pbtxt"), pb["CollectionDef"], cd)
        self.count(cdir, self.rel(cdir), [".pbtxt"], len(mg.collection_def))
        for field, fn, cls in (("meta_info_def", b"meta_info_def.pbtxt", "MetaInfoDef"),
                               ("saver_def", b"saver_def.pbtxt", "SaverDef"),
                               ("object_graph_def", b"object_graph.pbtxt", "SavedObjectGraph")):
            p = os.path.join(base, fn)
            if mg.HasField(field):
                self.compare_msg(p, pb[cls], getattr(mg, field))
            elif os.path.lexists(p):
                self.compare_msg(p, pb[cls], pb[cls](), self.rel(p) + " (not set in TF's message)")
            else:
                self.ok("%s absent (not set in TF's message)" % self.rel(p))
        cands = signatures_txt_candidates(rec, self.exp.get("show_all_concrete_functions") or "")
        p = os.path.join(base, b"signatures.txt")
        if cands:
            try:
                got = self.read(p).decode("utf-8", "replace")
            except OSError as e:
                self.fail(self.rel(p), "cannot read: %s" % e.strerror)
            else:
                match = [nm for nm, c in cands if canon_show_all(got) == canon_show_all(c)]
                if match:
                    self.ok("%s (= %s)" % (self.rel(p), match[0]))
                else:
                    self.fail(self.rel(p), "matches none of the recorded saved_model_cli outputs (%s); first line %r"
                              % (", ".join(nm for nm, _ in cands), got.strip("\n").split("\n")[0]))

    def run(self):
        pb = self.pb
        exp = self.exp
        kind = exp["kind"]
        if kind == "graph_def":
            self.check_graph(self.root, b64msg(pb["GraphDef"], exp["graph_def"]), exp.get("constants", {}))
        else:
            mgs = exp["meta_graphs"]
            dirs = os.path.join(self.root, b"meta_graphs")
            for rec in mgs:
                mg = b64msg(pb["MetaGraphDef"], rec["meta_graph"])
                base = os.path.join(dirs, rec["dir"].encode("utf-8"))
                if not os.path.isdir(base):
                    self.fail(self.rel(base), "meta graph directory missing (tags %r)" % rec["tags"])
                else:
                    self.check_meta_graph(base, rec, mg)
            if os.path.isdir(dirs):
                have = sorted(os.listdir(dirs))
                want = sorted(r["dir"].encode("utf-8") for r in mgs)
                if have == want:
                    self.ok("meta_graphs/ lists exactly %s" % [w.decode() for w in want])
                else:
                    self.fail("meta_graphs/", "lists %r, expected %r" % (have, want))
            if self.check_root:
                rec = mgs[exp.get("default_meta_graph", 0)]
                self.check_meta_graph(self.root, rec, b64msg(pb["MetaGraphDef"], rec["meta_graph"]))
            if kind == "saved_model":
                self.compare_msg(os.path.join(self.root, b"saved_model.pbtxt"), pb["SavedModel"],
                                 b64msg(pb["SavedModel"], exp["saved_model"]))
        return self.failed


# ----------------------------------------------------------------------------------------------
# Self-test
# ----------------------------------------------------------------------------------------------

class Collision(Exception):
    pass


def _write(path, data):
    d = os.path.dirname(path)
    try:
        os.makedirs(d, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        raise Collision("directory %s is also a file" % os.fsdecode(d))
    if os.path.isdir(path):
        raise Collision("file %s is also a directory" % os.fsdecode(path))
    if os.path.exists(path):
        raise Collision("two items map to %s" % os.fsdecode(path))
    with open(path, "wb") as f:
        f.write(data)


def render(root, exp, dir_suffixes=DEFAULT_DIR_SUFFIXES):
    """Lays out TF's messages as tfmount should. Returns the number of constants cross-checked."""
    pb = _pb()
    tf_text = pb["text_format"].MessageToString
    root = os.fsencode(root)
    checked = [0]

    def txt(m):
        return tf_text(m).encode("utf-8")

    def graph(base, gd, consts, fconsts):
        for nd in gd.node:
            _write(os.path.join(base, b"graph", key_to_path(nd.name, ".pbtxt", dir_suffixes)), txt(nd))
        for f in gd.library.function:
            fn = f.signature.name
            _write(os.path.join(base, b"functions", key_to_path(fn, ".pbtxt", dir_suffixes)), txt(function_header(f)))
            for nd in f.node_def:
                _write(os.path.join(base, b"functions", key_to_path(fn + "/" + nd.name, ".pbtxt", dir_suffixes)),
                       txt(nd))
        for f in gd.library.function:  # cross-check only: constants in function bodies are not rendered
            for nd in f.node_def:
                frec = fconsts.get(f.signature.name, {}).get(nd.name)
                if frec is not None:
                    dtname, shape, data = tensor_layout(nd.attr["value"].tensor)
                    if (dtname, shape, hashlib.sha256(data).hexdigest()) != (frec["dtype"], frec["shape"],
                                                                            frec["sha256"]):
                        raise AssertionError("independent decoder disagrees with the record for %r in %r"
                                             % (nd.name, f.signature.name))
                    checked[0] += 1
        byname = {nd.name: nd for nd in gd.node}
        for name, rec in consts.items():
            dtname, shape, data = tensor_layout(byname[name].attr["value"].tensor)
            if (dtname, shape, hashlib.sha256(data).hexdigest()) != (rec["dtype"], rec["shape"], rec["sha256"]):
                raise AssertionError("independent decoder disagrees with the record for constant %r: %s %s %s"
                                     % (name, dtname, shape, data.hex()[:80]))
            checked[0] += 1
            stem = os.path.join(base, b"constants", key_to_path(name, "", dir_suffixes))
            _write(stem + b".bin", data)
            _write(stem + b".shape", (" ".join(str(d) for d in shape) + "\n").encode())
            _write(stem + b".dtype", (dtname + "\n").encode())
            if rec["npy"]:
                arr = np.frombuffer(data, dtype=dtname).reshape(shape)
                with open(stem + b".npy", "xb") as f:
                    np.save(f, arr)

    if exp["kind"] == "graph_def":
        graph(root, b64msg(pb["GraphDef"], exp["graph_def"]), exp.get("constants", {}),
              exp.get("function_constants", {}))
        return checked[0]
    for rec in exp["meta_graphs"]:
        mg = b64msg(pb["MetaGraphDef"], rec["meta_graph"])
        base = os.path.join(root, b"meta_graphs", rec["dir"].encode("utf-8"))
        os.makedirs(base)
        graph(base, mg.graph_def, rec.get("constants", {}), rec.get("function_constants", {}))
        for k, sd in mg.signature_def.items():
            _write(os.path.join(base, b"signatures", key_to_path(k, ".pbtxt", dir_suffixes)), txt(sd))
        for k, cd in mg.collection_def.items():
            _write(os.path.join(base, b"collections", key_to_path(k, ".pbtxt", dir_suffixes)), txt(cd))
        for field, fn in (("meta_info_def", b"meta_info_def.pbtxt"), ("saver_def", b"saver_def.pbtxt"),
                          ("object_graph_def", b"object_graph.pbtxt")):
            if mg.HasField(field):
                _write(os.path.join(base, fn), txt(getattr(mg, field)))
        cands = signatures_txt_candidates(rec, exp.get("show_all_concrete_functions") or "")
        if cands:
            _write(os.path.join(base, b"signatures.txt"), cands[0][1].encode("utf-8"))
    d = exp["meta_graphs"][exp.get("default_meta_graph", 0)]["dir"].encode("utf-8")
    for nm in os.listdir(os.path.join(root, b"meta_graphs", d)):
        os.symlink(os.path.join(b"meta_graphs", d, nm), os.path.join(root, nm))
    if exp["kind"] == "saved_model":
        _write(os.path.join(root, b"saved_model.pbtxt"), txt(b64msg(pb["SavedModel"], exp["saved_model"])))
    return checked[0]


def _damage(root, exp):
    """Breaks three things; returns how many failures the checker must at least report."""
    root = os.fsencode(root)
    base = root if exp["kind"] == "graph_def" else os.path.join(
        root, b"meta_graphs", exp["meta_graphs"][0]["dir"].encode("utf-8"))
    n = 0
    gdir = os.path.join(base, b"graph")
    victim = None
    for dp, _dn, fns in sorted(os.walk(gdir)):
        for fn in sorted(fns):
            victim = os.path.join(dp, fn)
            break
        if victim:
            break
    text = open(victim, "rb").read()
    open(victim, "wb").write(text.replace(b'op: "', b'op: "X', 1))
    n += 1
    cdir = os.path.join(base, b"constants")
    bins = sorted(os.path.join(dp, fn) for dp, _dn, fns in os.walk(cdir) for fn in fns if fn.endswith(b".bin"))
    if bins:
        with open(bins[-1], "ab") as f:
            f.write(b"\x00")
        n += 1
        os.unlink(bins[0][:-4] + b".dtype")
        n += 1
    return n


def _spot_checks():
    """The escaping of the fixture's tricky names, spelled out."""
    want = {
        ("odd/name.bin/leaf", DEFAULT_DIR_SUFFIXES): b"odd/name%2Ebin/leaf.pbtxt",
        ("odd/name.pbtxt/leaf", DEFAULT_DIR_SUFFIXES): b"odd/name%2Epbtxt/leaf.pbtxt",
        ("odd/name.pbtxt/leaf", CKPT_SUFFIXES): b"odd/name.pbtxt/leaf.pbtxt",
        ("odd/name", DEFAULT_DIR_SUFFIXES): b"odd/name.pbtxt",
        ("odd/./dot", DEFAULT_DIR_SUFFIXES): b"odd/%2E/dot.pbtxt",
        ("odd/../up", DEFAULT_DIR_SUFFIXES): b"odd/%2E%2E/up.pbtxt",
        ("odd//dbl", DEFAULT_DIR_SUFFIXES): b"odd/%/dbl.pbtxt",
        (".hidden", DEFAULT_DIR_SUFFIXES): b".hidden.pbtxt",
        ("c/x/y", DEFAULT_DIR_SUFFIXES): b"c/x/y.pbtxt",
        ("100%", DEFAULT_DIR_SUFFIXES): b"100%25.pbtxt",
    }
    bad = []
    for (name, sfx), path in want.items():
        got = key_to_path(name, ".pbtxt", sfx)
        if got != path:
            bad.append("%r -> %r, expected %r" % (name, got, path))
    return bad


def selftest(paths):
    bad = _spot_checks()
    for b in bad:
        print("FAIL escaping: " + b)
    if not paths:
        ed = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures", "graphs", "expected")
        paths = sorted(os.path.join(ed, fn) for fn in os.listdir(ed)
                       if fn.endswith(".json") and not fn.endswith(".variables.json") and not fn.startswith("names_"))
    failures = len(bad)
    for p in paths:
        with open(p, encoding="utf-8") as f:
            exp = json.load(f)
        nm = os.path.basename(p)
        tmp = tempfile.mkdtemp(prefix="tfmount_selftest_")
        try:
            # 1. the checkpoint rule unchanged: does any name collide?
            try:
                render(os.path.join(tmp, "ckpt_rule"), exp, CKPT_SUFFIXES)
                note = "no collision with the checkpoint suffix set"
            except Collision as e:
                note = "COLLIDES with the checkpoint suffix set only (%s)" % e
            # 2. the default rule: render, check clean, damage, check again
            mnt = os.path.join(tmp, "mnt")
            nconst = render(mnt, exp)
            print("== %s: rendered (%d constants (graph and function bodies) cross-checked by the independent decoder; %s)" % (nm, nconst, note))
            c = Checker(mnt, exp)
            c.run()
            print("   clean render: %d passed, %d failed" % (c.passed, c.failed))
            if c.failed or c.passed == 0:
                failures += 1
            want = _damage(mnt, exp)
            c2 = Checker(mnt, exp, quiet=True)
            c2.run()
            print("   after damaging %d files (each also seen through the root links): %d passed, %d failed"
                  % (want, c2.passed, c2.failed))
            for line in c2.failures:
                print("      " + line)
            if c2.failed < want:
                print("FAIL selftest %s: the damage was not detected" % nm)
                failures += 1
        finally:
            shutil.rmtree(tmp)
    print("selftest: %s" % ("OK" if not failures else "%d problems" % failures))
    return 1 if failures else 0


def main(argv):
    args = [a for a in argv[1:] if not a.startswith("-")]
    flags = [a for a in argv[1:] if a.startswith("-")]
    sfx = DEFAULT_DIR_SUFFIXES
    opts = {"--no-root": False, "--strict-count": False, "-v": False, "--selftest": False}
    for fl in flags:
        if fl.startswith("--dir-suffixes="):
            sfx = tuple(s for s in fl.split("=", 1)[1].split(",") if s)
        elif fl in opts:
            opts[fl] = True
        else:
            sys.stderr.write(__doc__)
            return 2
    if opts["--selftest"]:
        return selftest(args)
    if len(args) != 2:
        sys.stderr.write(__doc__)
        return 2
    with open(args[1], encoding="utf-8") as f:
        exp = json.load(f)
    c = Checker(args[0], exp, dir_suffixes=sfx, check_root=not opts["--no-root"], strict_count=opts["--strict-count"],
                verbose=opts["-v"])
    c.run()
    print("%d passed, %d failed" % (c.passed, c.failed))
    return 1 if c.failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
