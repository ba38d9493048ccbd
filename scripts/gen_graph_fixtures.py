#!/usr/bin/env python3
"""Generate tfmount's GRAPH test fixtures (SavedModels, frozen GraphDefs, .meta files) with REAL TensorFlow.

How to run
----------
Same virtualenv as ``scripts/gen_fixtures.py`` (kept OUTSIDE the repository)::

    ~/tfvenv/bin/python scripts/gen_graph_fixtures.py tests/fixtures/graphs

``~/tfvenv/bin/saved_model_cli`` must be next to that python (it is run as a subprocess to record its exact
output). The output directory is deleted and regenerated. Everything is seeded; a re-run gives byte-identical
files (see ``DETERMINISM`` below for the few things that are pinned by hand). The Rust tests only read the
committed outputs; TensorFlow is not needed to run them. ``scripts/check_pbtxt.py`` checks a mount against
the expected records written here (it needs TensorFlow's protobuf classes).

What is written (directory names are part of the test contract)
-----------------------------------------------------------------
* ``tf1_two_tags/``        TF1 ``tf.compat.v1.saved_model.Builder`` (graph mode), ``saved_model.pb``, two meta
  graphs: tags ``["serve"]`` (signatures ``serving_default``, ``lookup``) and ``["train", "gpu"]`` (signature
  ``train``; same graph plus a GradientDescent train op and a second Saver ``save_1/...``). ``assets/vocab.txt``
  registered through ``ASSET_FILEPATHS`` by a ``TextFileInitializer`` (collections ``asset_filepaths``,
  ``saved_model_assets``, ``saved_model_main_op``, ``table_initializer``), resource and ref variables,
  user collections of every CollectionDef kind (``custom/ints``, ``custom/floats``, ``custom/strings``,
  ``custom/nodes``: keys with ``/``), and many Const nodes under ``consts/`` (every TensorProto form; see
  ``CONST_DOC``) and ``odd/...``/``c/...`` (node-name edge cases: ``c/x`` beside ``c/x/y``, ``odd/name``
  beside ``odd/name.bin/leaf`` and ``odd/name.pbtxt/leaf``, ``odd/./dot``, ``odd/../up``, ``odd//dbl``,
  ``.hidden``).
* ``tf1_two_tags_pbtxt/``  the same SavedModel as ``saved_model.pbtxt`` only (``text_format.MessageToString``
  of the parsed ``saved_model.pb``, which is exactly what ``Builder.save(as_text=True)`` writes), with copies
  of ``variables/`` and ``assets/``.
* ``tf2_module/``          ``tf.saved_model.save`` of a ``tf.Module`` (variables ``dense/kernel``,
  ``dense/bias``, ``scale`` float32, ``label`` string, plus two UNNAMED variables that both get the
  SavedVariable name ``Variable``); signatures ``serving_default`` and ``describe``; ``fingerprint.pb`` uuid
  pinned.
* ``frozen/graph.pb``, ``frozen/graph.pbtxt``  ``convert_variables_to_constants_v2(lower_control_flow=False)``
  of a tf.function with a ``tf.cond`` (so the GraphDef keeps a function library: the two branch functions),
  written by ``tf.io.write_graph`` (binary and text).
* ``tf1_meta/``            TF1 ``Saver`` checkpoint directory: ``checkpoint`` state file, ``model.ckpt.index``,
  ``model.ckpt.data-00000-of-00001`` and ``model.ckpt.meta`` (the bare ``.meta`` is also a SOURCE).
* ``expected/<name>.json`` TensorFlow's view of each fixture (see ``SCHEMA_DOC``), ``expected/<name>.variables.json``
  the checkpoint tensors (same format as ``tests/fixtures/expected/*.json``, written by
  ``gen_fixtures.tf_view``), ``expected/names_tf2_keras.json`` / ``names_tf2_slots.json`` the TF2 object-path
  names of the checkpoint fixtures ``../tf2_keras/ckpt-1`` and ``../tf2_slots/ckpt-1``.
* ``manifest.json``        the mounts: source path (relative to this directory), kind, expected files.

DETERMINISM
-----------
* ``fingerprint.pb`` of ``tf2_module`` carries a random uuid: re-serialised with a pinned one (as gen_fixtures).
* The asset's path Const is the relative path ``vocab.txt`` (the builder runs with the cwd in a temp dir), so no
  temp path leaks into the graph.
* ``saved_model_cli show --all`` prints the set of ops of each meta graph as a Python ``set`` (hash order):
  it is run with ``PYTHONHASHSEED=0``; the order is not meaningful.
* Function names (``__inference_predict_123``) depend on TF's global uid counter, i.e. on the order of
  everything built in this process; keep the order of the generators.
"""

import base64
import hashlib
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from google.protobuf import text_format  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from check_npy import NUMPY_NATIVE, key_to_npy_path, escape_component  # noqa: E402
from gen_fixtures import layout_bytes, sha, write_json, tf_view, file_sha, err_text  # noqa: E402

SEED = 20240611 + 100

SCHEMA_DOC = (
    "expected/<name>.json: source = path of the SOURCE relative to tests/fixtures/graphs; kind = saved_model | "
    "graph_def | meta_graph; messages are base64 of SerializeToString(deterministic=True) of the TensorFlow "
    "message: saved_model (SavedModel, saved_model kinds only), graph_def (GraphDef, graph_def kind), and per "
    "meta graph meta_graph (MetaGraphDef). meta_graphs[i]: tags (stored order), dir = the meta graph's directory "
    "name under meta_graphs/ (tags joined by ',' and escaped as ONE component), nodes = graph_def.node names in "
    "order, functions = {FunctionDef name: [node_def names in order]} (library order), signatures / collections "
    "= sorted keys, has = which optional MetaGraphDef fields are set, constants = {Const node name: record} for "
    "graph_def.node, function_constants = {function: {node: record}} for Const nodes in function bodies, "
    "signatures_txt = exact stdout of signatures_txt_command, signature_show = {key: exact stdout of "
    "'saved_model_cli show --dir D --tag_set T --signature_def KEY'}, show_all_section = this meta graph's part "
    "of show_all.stdout (from its 'MetaGraphDef with tag-set' line to its ops line inclusive). default_meta_graph "
    "= index of the meta graph the root symlinks point to (the one whose tag set is exactly {serve}, else 0; "
    "a guess at tfmount's rule). Constant record: dtype (tf name), dtype_enum, shape, nbytes/sha256/hex(<=64 "
    "bytes) of the .bin bytes in the checkpoint tensor layout, npy = whether a .npy exists (numpy-native "
    "dtype), path = file stem relative to constants/ (escaped; append .bin/.shape/.dtype/.npy), form = "
    "tensor_content | <typed>_val | none (no values stored), values_stored (number of typed values; complex "
    "counts re+im as 2), num_elements, repeated_last (typed list shorter than num_elements: last value "
    "repeated), zero_filled, handcrafted (TensorProto written by hand, not by tf.constant's make_tensor_proto), "
    "value_from = tf.make_ndarray | session (make_ndarray cannot decode it; value from running the Const in a "
    "tf.compat.v1.Session), session_check = equal | <problem> (the Const run in a Session vs make_ndarray).")

CONST_DOC = (
    "consts/*: tf.constant in graph mode (make_tensor_proto: tensor_content for arrays with > 1 element of "
    "float16/32/64, bfloat16, int8/16/32/64, uint8/32/64; typed *_val lists otherwise, e.g. bool, complex, "
    "uint16, int4, strings and every scalar; a single value for a splat tf.constant(v, shape=...)), plus "
    "handcrafted TensorProtos (handcrafted: true) for forms Python never writes: partial typed lists (last value "
    "repeated), an empty typed list (zero fill), tensor_content for bool/complex64 and a DT_STRING tensor_content "
    "(varint lengths + bytes; tf.make_ndarray cannot decode it, C++ can).")


def b64(msg):
    return base64.b64encode(msg.SerializeToString(deterministic=True)).decode("ascii")


def stem_path(name):
    """Escaped path (str) of `name` without suffix, per the checkpoint escaping contract."""
    p = key_to_npy_path(name.encode("utf-8"))
    assert p.endswith(b".npy")
    return p[:-4].decode("utf-8")


def tags_dir(tags):
    """The meta graph's directory under meta_graphs/ (README: untagged meta graphs are
    `untagged`)."""
    if not tags:
        return "untagged"
    return escape_component(",".join(tags).encode("utf-8"), is_dir=True).decode("utf-8")


# ----------------------------------------------------------------------------------------------
# Constants
# ----------------------------------------------------------------------------------------------

_TYPED_FIELDS = ("half_val", "float_val", "double_val", "int_val", "string_val", "scomplex_val", "int64_val",
                 "bool_val", "dcomplex_val", "resource_handle_val", "variant_val", "uint32_val", "uint64_val")


def tensor_form(tp, n):
    if tp.tensor_content:
        return {"form": "tensor_content", "content_bytes": len(tp.tensor_content)}
    for f in _TYPED_FIELDS:
        vals = getattr(tp, f)
        if len(vals):
            per = 2 if f in ("scomplex_val", "dcomplex_val") else 1
            return {"form": f, "values_stored": len(vals), "num_elements": n,
                    "repeated_last": len(vals) // per < n, "zero_filled": False}
    if tp.float8_val:
        return {"form": "float8_val", "values_stored": len(tp.float8_val), "num_elements": n,
                "repeated_last": len(tp.float8_val) < n, "zero_filled": False}
    return {"form": "none", "values_stored": 0, "num_elements": n, "repeated_last": False, "zero_filled": n > 0}


def const_nodes(nodes):
    return [nd for nd in nodes if nd.op == "Const" and "value" in nd.attr and nd.attr["value"].HasField("tensor")]


def const_record(name, tp, session_value=None, session_error=None, handcrafted=False):
    dt = tf.as_dtype(tp.dtype)
    shape = [d.size for d in tp.tensor_shape.dim]
    n = int(np.prod(shape)) if shape else 1
    rec = {"dtype": dt.name, "dtype_enum": int(tp.dtype), "shape": shape}
    try:
        arr = tf.make_ndarray(tp)
        rec["value_from"] = "tf.make_ndarray"
    except Exception as e:
        if session_value is None:
            raise AssertionError("%s: make_ndarray fails (%s) and no session value" % (name, err_text(e)))
        arr = session_value
        rec["value_from"] = "session"
        rec["make_ndarray_error"] = err_text(e)
    if dt == tf.string:
        arr = np.asarray(arr, dtype=object).reshape(shape)
        if any(isinstance(v, str) for v in arr.flat):
            # tf.make_ndarray fills an EMPTY string_val with the str "" (not bytes)
            rec["make_ndarray_note"] = "tf.make_ndarray returned str elements; encoded as UTF-8"
            arr = np.array([v.encode("utf-8") if isinstance(v, str) else v for v in arr.flat],
                           dtype=object).reshape(shape)
    else:
        arr = np.asarray(arr)
        assert arr.dtype == np.dtype(dt.as_numpy_dtype), (name, arr.dtype, dt)
    assert list(arr.shape) == shape, (name, arr.shape, shape)
    lb = layout_bytes(arr, dt)
    rec["nbytes"] = len(lb)
    rec["sha256"] = sha(lb)
    if len(lb) <= 64:
        rec["hex"] = lb.hex()
    rec["npy"] = dt.name in NUMPY_NATIVE
    rec["path"] = stem_path(name)
    rec.update(tensor_form(tp, n))
    if handcrafted:
        rec["handcrafted"] = True
    if session_error is not None:
        rec["session_check"] = "session failed: " + session_error
    elif session_value is not None:
        sv = np.asarray(session_value, dtype=object).reshape(shape) if dt == tf.string else np.asarray(session_value)
        sb = layout_bytes(sv, dt)
        if sb == lb:
            rec["session_check"] = "equal"
        elif dt != tf.string and sv.shape == arr.shape and np.array_equal(sv.astype(np.float64), arr.astype(np.float64)):
            # int4/uint4/int2/uint2: the C++ Const kernel sign-extends into the whole byte; ml_dtypes (and TF's
            # checkpoint writer, see ../expected/all_dtypes.json) keep the value in the low bits only
            rec["session_check"] = "equal values, different bytes: session gives %s" % sb.hex()[:200]
        else:
            rec["session_check"] = "DIFFERS: session gives %s" % sb.hex()[:200]
    return rec


def run_consts(graph_def, names):
    """Runs Const nodes of graph_def in a TF1 Session; returns {name: (value, error)}."""
    out = {}
    gd = type(graph_def)()
    gd.CopyFrom(graph_def)  # import_graph_def adds default attrs to the GraphDef IN PLACE
    g = tf.Graph()
    with g.as_default():
        tf.graph_util.import_graph_def(gd, name="")
    with tf.compat.v1.Session(graph=g) as sess:
        for nm in names:
            try:
                out[nm] = (sess.run(g.get_tensor_by_name(nm + ":0")), None)
            except Exception as e:
                out[nm] = (None, err_text(e))
    return out


def graph_records(graph_def, handcrafted=(), run_session=True):
    """nodes / functions / constants / function_constants of a GraphDef."""
    consts = const_nodes(graph_def.node)
    sess_vals = run_consts(graph_def, [nd.name for nd in consts]) if run_session else {}
    constants = {}
    for nd in consts:
        v, e = sess_vals.get(nd.name, (None, None))
        constants[nd.name] = const_record(nd.name, nd.attr["value"].tensor, v, e, nd.name in handcrafted)
    functions = {}
    fconsts = {}
    for f in graph_def.library.function:
        fname = f.signature.name
        functions[fname] = [nd.name for nd in f.node_def]
        recs = {}
        for nd in const_nodes(f.node_def):
            rec = const_record(nd.name, nd.attr["value"].tensor)
            rec["path"] = stem_path(nd.name)  # relative to functions/<fname>/ ... see check_pbtxt
            recs[nd.name] = rec
        if recs:
            fconsts[fname] = recs
    names = [nd.name for nd in graph_def.node]
    assert len(set(names)) == len(names)
    return {"nodes": names, "functions": functions, "constants": constants, "function_constants": fconsts}


# ----------------------------------------------------------------------------------------------
# saved_model_cli
# ----------------------------------------------------------------------------------------------

SMCLI = os.path.join(os.path.dirname(sys.executable), "saved_model_cli")


def smcli(cwd, *args):
    env = dict(os.environ, PYTHONHASHSEED="0", TF_CPP_MIN_LOG_LEVEL="2")
    proc = subprocess.run([SMCLI, "show"] + list(args), cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=600)
    if proc.returncode != 0:
        raise RuntimeError("saved_model_cli %s failed: %s" % (args, proc.stderr[-2000:]))
    return {"command": "saved_model_cli show " + " ".join(args), "stdout": proc.stdout}


SECTION_CODE_DOC = (
    "saved_model_cli cannot read a bare .meta file: show_all_section was printed by the loop body of "
    "saved_model_cli._show_all (same print calls, _show_inputs_outputs_mgd(indent=1), _show_ops_in_metagraph_mgd) "
    "applied to the parsed MetaGraphDef, in a python subprocess with PYTHONHASHSEED=0")

_SECTION_CODE = r"""
import os, sys
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"
from tensorflow.core.protobuf import meta_graph_pb2
from tensorflow.python.tools import saved_model_cli as smc
mg = meta_graph_pb2.MetaGraphDef.FromString(open(sys.argv[1], "rb").read())
tag_set = mg.meta_info_def.tags
print("\nMetaGraphDef with tag-set: '%s' contains the following SignatureDefs:" % ', '.join(tag_set))
for k in sorted(mg.signature_def.keys()):
    print("\nsignature_def['" + k + "']:")
    smc._show_inputs_outputs_mgd(mg, k, indent=1)
smc._show_ops_in_metagraph_mgd(mg)
"""


def show_all_section_of_meta(path):
    env = dict(os.environ, PYTHONHASHSEED="0", TF_CPP_MIN_LOG_LEVEL="2")
    proc = subprocess.run([sys.executable, "-c", _SECTION_CODE, path], env=env, capture_output=True, text=True,
                          timeout=600)
    if proc.returncode != 0:
        raise RuntimeError("show_all section of %s failed: %s" % (path, proc.stderr[-2000:]))
    return proc.stdout


_ALL_HEADER = re.compile(r"\nMetaGraphDef with tag-set: '([^']*)' contains the following SignatureDefs:\n")


def split_show_all(stdout):
    """{', '.join(tags): section}, rest (the Concrete Functions part)."""
    parts = {}
    heads = list(_ALL_HEADER.finditer(stdout))
    tail = ""
    for i, m in enumerate(heads):
        end = heads[i + 1].start() if i + 1 < len(heads) else len(stdout)
        sec = stdout[m.start():end]
        j = sec.find("\nConcrete Functions:")
        if j >= 0:
            tail = sec[j:]
            sec = sec[:j]
        parts[m.group(1)] = sec
    return parts, tail


# ----------------------------------------------------------------------------------------------
# Object-graph names (TF2)
# ----------------------------------------------------------------------------------------------

VV = "VARIABLE_VALUE"
VV_SUFFIX = "/.ATTRIBUTES/VARIABLE_VALUE"


def bfs_paths(nodes):
    """{node id: tuple of child local names from the root}, shortest (BFS, children in stored order)."""
    paths = {0: ()}
    queue = [0]
    while queue:
        nid = queue.pop(0)
        for ch in nodes[nid].children:
            if ch.node_id not in paths:
                paths[ch.node_id] = paths[nid] + (ch.local_name,)
                queue.append(ch.node_id)
    return paths


def walk(tog, path):
    nid = 0
    for nm in path:
        for ch in tog.nodes[nid].children:
            if ch.local_name == nm:
                nid = ch.node_id
                break
        else:
            return None
    return nid


def read_object_graph(prefix):
    from tensorflow.core.protobuf import trackable_object_graph_pb2

    reader = tf.train.load_checkpoint(prefix)
    return trackable_object_graph_pb2.TrackableObjectGraph.FromString(reader.get_tensor("_CHECKPOINTABLE_OBJECT_GRAPH"))


def checkpoint_object_names(prefix, source):
    """TF2 object-path names of a checkpoint (from _CHECKPOINTABLE_OBJECT_GRAPH)."""
    tog = read_object_graph(prefix)
    reader = tf.train.load_checkpoint(prefix)
    keys = set(reader.get_variable_to_shape_map())
    names = {}
    entries = []
    other = []
    vv_key = {}
    for nid, node in enumerate(tog.nodes):
        for a in node.attributes:
            assert a.checkpoint_key in keys, a.checkpoint_key
            if a.name == VV:
                vv_key[nid] = a.checkpoint_key
            else:
                other.append({"node_id": nid, "attribute": a.name, "checkpoint_key": a.checkpoint_key,
                              "full_name": a.full_name})
    slot_of = {}
    for nid, node in enumerate(tog.nodes):
        for s in node.slot_variables:
            slot_of[s.slot_variable_node_id] = (nid, s.original_variable_node_id, s.slot_name)
    for nid in sorted(vv_key):
        key = vv_key[nid]
        assert key.endswith(VV_SUFFIX), key
        e = {"node_id": nid, "checkpoint_key": key, "object_path": key[:-len(VV_SUFFIX)]}
        if nid in slot_of:
            opt, var, slot = slot_of[nid]
            var_key = vv_key[var]
            e.update({"slot_of_node": var, "optimizer_node": opt, "slot_name": slot,
                      "name": var_key[:-len(VV_SUFFIX)] + "/" + slot})
        else:
            e["name"] = e["object_path"]
        entries.append(e)
    dup = {}
    for e in entries:
        dup.setdefault(e["name"], []).append(e["checkpoint_key"])
    for nm, ks in dup.items():
        if len(ks) == 1:
            names[nm] = ks[0]
    return {
        "tf_version": tf.__version__,
        "source": source,
        "doc": ("names = {name: checkpoint key}: name = checkpoint key without '/.ATTRIBUTES/VARIABLE_VALUE' "
                "(the escaped object path, '.'->'..', '/'->'.S' inside local names), and for optimizer slot variables "
                "(TrackableObject.slot_variables) <name of the original variable>/<slot_name>. entries = every "
                "VARIABLE_VALUE attribute with its node id and, for slots, slot_of_node/optimizer_node/slot_name. "
                "duplicates = names that more than one key would get (left out of names). other_attributes = "
                "attributes not named VARIABLE_VALUE. Keys not reached from the object graph: unlisted_keys."),
        "names": names,
        "duplicates": {nm: ks for nm, ks in dup.items() if len(ks) > 1},
        "entries": entries,
        "other_attributes": other,
        "unlisted_keys": sorted(keys - {e["checkpoint_key"] for e in entries}
                                - {o["checkpoint_key"] for o in other}),
    }


def saved_model_variable_names(mg, prefix):
    """SavedVariable.name -> checkpoint key, matching SavedObjectGraph nodes to the checkpoint's object graph by
    child local-name paths from the root."""
    sog = mg.object_graph_def
    tog = read_object_graph(prefix)
    paths = bfs_paths(sog.nodes)
    out = []
    for nid, node in enumerate(sog.nodes):
        if node.WhichOneof("kind") != "variable":
            continue
        path = paths.get(nid)
        rec = {"node_id": nid, "name": node.variable.name, "dtype": tf.as_dtype(node.variable.dtype).name,
               "object_path": "/".join(path) if path is not None else None}
        tid = walk(tog, path) if path is not None else None
        keys = [a.checkpoint_key for a in tog.nodes[tid].attributes if a.name == VV] if tid is not None else []
        rec["checkpoint_key"] = keys[0] if keys else None
        rec["checkpoint_node_id"] = tid
        out.append(rec)
    by_name = {}
    for r in out:
        by_name.setdefault(r["name"], []).append(r["checkpoint_key"])
    return out, by_name


# ----------------------------------------------------------------------------------------------
# Fixture builders
# ----------------------------------------------------------------------------------------------

def _tp(dtype, shape, **fields):
    tp = tf.make_tensor_proto(np.zeros([0], np.float32))  # a TensorProto; overwritten below
    tp.Clear()
    tp.dtype = tf.as_dtype(dtype).as_datatype_enum
    for d in shape:
        tp.tensor_shape.dim.add().size = d
    for k, v in fields.items():
        if k == "tensor_content":
            tp.tensor_content = v
        else:
            getattr(tp, k).extend(v)
    return tp


def _varint(n):
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


ODD_STRINGS = [b"plain", b"", b"nul\x00in\x00middle", b"\xff\xfe\x80 not utf-8", b'"double" and \'single\' quotes',
               b"new\nline\r\ttab", b"back\\slash", "\u00fcnic\u00f6de \u2713".encode("utf-8"), bytes(range(32))]


def build_consts(rng):
    """Const nodes under consts/, c/ and odd/ in the default graph. Returns the names of handcrafted ones."""
    hand = []

    def hc(name, tp):
        tf.constant(tp, name=name)
        hand.append(name)

    bf16 = tf.as_dtype("bfloat16").as_numpy_dtype
    i4 = tf.as_dtype("int4").as_numpy_dtype
    # forms tf.constant writes
    tf.constant(1.5, shape=[3, 4], name="consts/splat_f32")
    tf.constant(-7, shape=[2, 2], dtype=tf.int64, name="consts/splat_i64")
    tf.constant(b"same", shape=[3], name="consts/splat_str")
    tf.constant(rng.normal(size=(2, 3)).astype(np.float32), name="consts/f32")
    tf.constant((rng.normal(size=(2, 2)) * 4).astype(np.float16), name="consts/f16")
    tf.constant(np.array([1.5, -0.0, 3.0e38, np.inf], np.float32).astype(bf16), name="consts/bf16")
    tf.constant(np.array([-128, -1, 0, 127], np.int8), name="consts/i8")
    tf.constant(np.array([[-(2 ** 63), -1], [2 ** 40 + 3, 2 ** 63 - 1]], np.int64), name="consts/i64")
    tf.constant(np.array([1.0, np.nan, -np.inf, 2.5e-308], np.float64), name="consts/f64_nonfinite")
    tf.constant(np.array([0, 1, 65535], np.uint16), name="consts/u16")
    tf.constant(np.array([0, 4294967295], np.uint32), name="consts/u32")
    tf.constant(np.array([[True, False, True], [False, False, True]]), name="consts/bool")
    tf.constant(np.array([1 + 2j, -3.5 - 0.25j], np.complex64), name="consts/c64")
    tf.constant(np.array([1e300 - 1j], np.complex128), name="consts/c128")
    tf.constant(np.array([[-8, -1, 0], [1, 5, 7]], dtype=i4), name="consts/int4")
    tf.constant(np.array(ODD_STRINGS, dtype=object), name="consts/str")
    tf.constant(np.array([[b"a", b"\x00"], [b"\xff", b'"']], dtype=object), name="consts/str_2d")
    tf.constant(b"scalar \x00\xff\n\"bytes\"", name="consts/scalar_str")
    tf.constant(7, name="consts/scalar_i32")
    tf.constant(np.uint64(2 ** 64 - 1), name="consts/scalar_u64")
    tf.constant(np.float16(0.1), name="consts/scalar_f16")
    tf.constant(np.float32("nan"), name="consts/scalar_nan")
    tf.constant(np.float32(-0.0), name="consts/scalar_negzero")
    tf.constant(True, name="consts/scalar_bool")
    tf.constant(np.zeros([0, 3], np.float32), name="consts/empty_f32")
    tf.constant(np.array([], dtype=object).astype(bytes), dtype=tf.string, name="consts/empty_str")
    tf.constant(np.zeros([2, 0], np.int64), name="consts/empty_i64")
    # handcrafted forms Python never writes
    hc("consts/partial_f32", _tp("float32", [2, 3], float_val=[1.0, 2.0, 3.0]))
    hc("consts/partial_i32", _tp("int32", [5], int_val=[5, -1]))
    hc("consts/partial_str", _tp("string", [2, 2], string_val=[b"first", b"\x00last\xff"]))
    hc("consts/partial_c64", _tp("complex64", [3], scomplex_val=[1.0, -1.0, 0.5, 2.0]))
    hc("consts/splat_f16_halfval", _tp("float16", [2, 2], half_val=[int(np.float16(0.5).view(np.uint16))]))
    hc("consts/splat_bf16_halfval", _tp("bfloat16", [3],
                                        half_val=[int(np.array(-2.0, np.float32).astype(bf16).view(np.uint16))]))
    hc("consts/zero_fill_i64", _tp("int64", [2, 2]))
    hc("consts/zero_fill_str", _tp("string", [2]))
    hc("consts/content_bool", _tp("bool", [4], tensor_content=bytes([1, 0, 0, 1])))
    hc("consts/content_c64", _tp("complex64", [2], tensor_content=np.array([1 - 1j, 2.5 + 0j], np.complex64).tobytes()))
    hc("consts/content_i32_scalar", _tp("int32", [], tensor_content=struct.pack("<i", -123456)))
    strs = [b"ab", b"", b"\x00\xff\n"]
    hc("consts/content_str", _tp("string", [3],
                                 tensor_content=b"".join(_varint(len(s)) for s in strs) + b"".join(strs)))
    # node-name edge cases
    tf.constant(1.0, name="c/x")
    tf.constant(2.0, name="c/x/y")
    tf.constant(np.arange(3, dtype=np.int32), name="odd/name")
    tf.constant(4.0, name="odd/name.bin/leaf")
    tf.constant(5.0, name="odd/name.pbtxt/leaf")
    tf.constant(6.0, name="odd/./dot")
    tf.constant(7.0, name="odd/../up")
    tf.constant(8.0, name="odd//dbl")
    tf.constant(9.0, name=".hidden")
    return hand


def meta_graph_record(mg, idx, d_rel, cwd, hand, run_session=True):
    tags = list(mg.meta_info_def.tags)
    rec = {"index": idx, "tags": tags, "dir": tags_dir(tags), "meta_graph": b64(mg)}
    gr = graph_records(mg.graph_def, hand, run_session)
    rec["nodes"], rec["functions"] = gr["nodes"], gr["functions"]
    rec["signatures"] = sorted(mg.signature_def.keys())
    rec["collections"] = sorted(mg.collection_def.keys())
    rec["has"] = {f: mg.HasField(f) for f in ("meta_info_def", "graph_def", "saver_def", "object_graph_def")}
    rec["asset_file_def"] = [a.filename for a in mg.asset_file_def]
    if d_rel is not None:
        ts = ",".join(tags)
        r = smcli(cwd, "--dir", d_rel, "--tag_set", ts)
        rec["signatures_txt"], rec["signatures_txt_command"] = r["stdout"], r["command"]
        rec["signature_show"] = {}
        for k in rec["signatures"]:
            rec["signature_show"][k] = smcli(cwd, "--dir", d_rel, "--tag_set", ts, "--signature_def", k)["stdout"]
        rec["signature_show_command"] = "saved_model_cli show --dir %s --tag_set %s --signature_def KEY" % (d_rel, ts)
    rec["constants"] = gr["constants"]
    rec["function_constants"] = gr["function_constants"]
    return rec


def default_index(metas):
    for i, mg in enumerate(metas):
        if set(mg.meta_info_def.tags) == {"serve"}:
            return i
    return 0


def saved_model_expected(out, name, hand, notes, file_name="saved_model.pb"):
    from tensorflow.python.saved_model import loader_impl

    d = os.path.join(out, name)
    sm = loader_impl.parse_saved_model(d)
    exp = {"tf_version": tf.__version__, "source": name, "kind": "saved_model", "file": file_name,
           "schema": SCHEMA_DOC, "saved_model": b64(sm),
           "saved_model_schema_version": sm.saved_model_schema_version,
           "default_meta_graph": default_index(sm.meta_graphs)}
    exp["show_tag_sets"] = smcli(out, "--dir", name)
    show_all = smcli(out, "--dir", name, "--all")
    show_all["env"] = {"PYTHONHASHSEED": "0"}
    exp["show_all"] = show_all
    sections, tail = split_show_all(show_all["stdout"])
    exp["show_all_concrete_functions"] = tail
    exp["meta_graphs"] = []
    for i, mg in enumerate(sm.meta_graphs):
        rec = meta_graph_record(mg, i, name, out, hand)
        rec["show_all_section"] = sections[", ".join(mg.meta_info_def.tags)]
        exp["meta_graphs"].append(rec)
    dirs = [m["dir"] for m in exp["meta_graphs"]]
    assert len(set(dirs)) == len(dirs), dirs
    exp["notes"] = list(notes)
    return exp, sm


def gen_tf1_two_tags(out):
    name = "tf1_two_tags"
    d = os.path.join(out, name)
    rng = np.random.default_rng(SEED + 1)
    tmp = tempfile.mkdtemp(prefix="tfmount_graph_asset_")
    cwd = os.getcwd()
    g = tf.Graph()
    try:
        os.chdir(tmp)
        with open("vocab.txt", "w") as f:
            f.write("<unk>\nhello\nworld\ntensor\nflow\n")
        with g.as_default():
            tf.compat.v1.set_random_seed(SEED)
            x = tf.compat.v1.placeholder(tf.float32, [None, 3], name="x")
            labels = tf.compat.v1.placeholder(tf.float32, [None, 2], name="labels")
            words = tf.compat.v1.placeholder(tf.string, [None], name="words")
            with tf.compat.v1.variable_scope("dense"):
                kernel = tf.compat.v1.get_variable(
                    "kernel", [3, 2], initializer=tf.compat.v1.glorot_uniform_initializer(seed=1), use_resource=True)
                bias = tf.compat.v1.get_variable("bias", [2], initializer=tf.compat.v1.constant_initializer(0.25),
                                                 use_resource=True)
            counter = tf.compat.v1.Variable(np.int64(42), name="counter", use_resource=False)  # VariableV2 (ref)
            y = tf.identity(tf.matmul(x, kernel) + bias, name="y")
            table = tf.compat.v1.lookup.StaticHashTable(
                tf.compat.v1.lookup.TextFileInitializer(
                    tf.constant("vocab.txt", name="asset_path"), tf.string,
                    tf.compat.v1.lookup.TextFileIndex.WHOLE_LINE, tf.int64,
                    tf.compat.v1.lookup.TextFileIndex.LINE_NUMBER), default_value=-1, name="vocab_table")
            ids = tf.identity(table.lookup(words), name="ids")
            hand = build_consts(rng)
            for v in (1, -2, 3):
                tf.compat.v1.add_to_collection("custom/ints", v)
            for v in (0.5, -1.25):
                tf.compat.v1.add_to_collection("custom/floats", v)
            for v in (b"a\x00b", "c\u2713"):
                tf.compat.v1.add_to_collection("custom/strings", v)
            tf.compat.v1.add_to_collection("custom/nodes", y)
            tf.compat.v1.add_to_collection("custom/nodes", ids)
            main_op = tf.compat.v1.tables_initializer(name="init_tables")
            sig = tf.compat.v1.saved_model.signature_def_utils
            u = tf.compat.v1.saved_model.utils
            serve_sigs = {
                "serving_default": sig.predict_signature_def(inputs={"x": x}, outputs={"y": y}),
                "lookup": sig.build_signature_def(inputs={"words": u.build_tensor_info(words)},
                                                  outputs={"ids": u.build_tensor_info(ids)},
                                                  method_name="tensorflow/serving/predict"),
            }
            builder = tf.compat.v1.saved_model.Builder(d)
            assets = tf.compat.v1.get_collection(tf.compat.v1.GraphKeys.ASSET_FILEPATHS)
            with tf.compat.v1.Session(graph=g) as sess:
                sess.run(tf.compat.v1.global_variables_initializer())
                sess.run(main_op)
                builder.add_meta_graph_and_variables(sess, ["serve"], signature_def_map=serve_sigs,
                                                     assets_collection=assets, main_op=main_op,
                                                     strip_default_attrs=True)
                loss = tf.reduce_mean(tf.square(y - labels), name="loss")
                train_op = tf.compat.v1.train.GradientDescentOptimizer(0.1).minimize(loss, name="train_step")
                tf.compat.v1.add_to_collection("custom/nodes", train_op)
                train_sigs = {"train": sig.build_signature_def(
                    inputs={"x": u.build_tensor_info(x), "labels": u.build_tensor_info(labels)},
                    outputs={"loss": u.build_tensor_info(loss)}, method_name="tensorflow/supervised/training")}
                builder.add_meta_graph(["train", "gpu"], signature_def_map=train_sigs, assets_collection=assets,
                                       strip_default_attrs=True)
            builder.save(as_text=False)
            del counter
    finally:
        os.chdir(cwd)
        shutil.rmtree(tmp)
    assert open(os.path.join(d, "assets", "vocab.txt")).read().startswith("<unk>")
    # sanity: TF1 loader loads both meta graphs and the lookup works
    for tags in (["serve"], ["train", "gpu"]):
        with tf.Graph().as_default() as lg, tf.compat.v1.Session(graph=lg) as sess:
            tf.compat.v1.saved_model.loader.load(sess, tags, d)
            got = sess.run("ids:0", {"words:0": [b"world", b"nope"]})
            assert list(got) == [2, -1], got
    notes = ["asset path Const asset_path holds the relative path 'vocab.txt' (the builder ran with its cwd in a "
             "temp dir holding vocab.txt)", CONST_DOC,
             "the second meta graph (train,gpu) is the same graph with a GradientDescent train op and a second "
             "Saver (save_1/...) added"]
    exp, sm = saved_model_expected(out, name, hand, notes)
    write_json(os.path.join(out, "expected", name + ".json"), exp)
    write_json(os.path.join(out, "expected", name + ".variables.json"), tf_view(out, name + "/variables/variables"))
    man = [{"name": name, "source": name, "kind": "saved_model", "expected": "expected/%s.json" % name,
            "variables": "expected/%s.variables.json" % name}]

    # the same SavedModel as text only
    pname = name + "_pbtxt"
    pd = os.path.join(out, pname)
    os.makedirs(pd)
    with open(os.path.join(pd, "saved_model.pbtxt"), "w", encoding="utf-8") as f:
        f.write(text_format.MessageToString(sm))
    shutil.copytree(os.path.join(d, "variables"), os.path.join(pd, "variables"))
    shutil.copytree(os.path.join(d, "assets"), os.path.join(pd, "assets"))
    from tensorflow.core.protobuf import saved_model_pb2

    back = text_format.Parse(open(os.path.join(pd, "saved_model.pbtxt"), encoding="utf-8").read(),
                             saved_model_pb2.SavedModel())
    assert back.SerializeToString(deterministic=True) == sm.SerializeToString(deterministic=True)
    with tf.Graph().as_default() as lg, tf.compat.v1.Session(graph=lg) as sess:
        tf.compat.v1.saved_model.loader.load(sess, ["serve"], pd)
    pexp, _ = saved_model_expected(out, pname, hand, notes + [
        "saved_model.pbtxt = text_format.MessageToString(SavedModel parsed from tf1_two_tags/saved_model.pb) -- "
        "what Builder.save(as_text=True) writes (str(proto)); variables/ and assets/ are copies"],
        file_name="saved_model.pbtxt")
    for a, b in zip(pexp["meta_graphs"], exp["meta_graphs"]):
        for k in ("meta_graph", "signatures_txt", "signature_show", "show_all_section"):
            assert a[k] == b[k], "tf1_two_tags_pbtxt differs from tf1_two_tags in " + k
    assert pexp["saved_model"] == exp["saved_model"]
    write_json(os.path.join(out, "expected", pname + ".json"), pexp)
    write_json(os.path.join(out, "expected", pname + ".variables.json"), tf_view(out, pname + "/variables/variables"))
    man.append({"name": pname, "source": pname, "kind": "saved_model", "expected": "expected/%s.json" % pname,
                "variables": "expected/%s.variables.json" % pname})
    return man


def pin_fingerprint(d, tag):
    from tensorflow.core.protobuf import fingerprint_pb2

    fp_path = os.path.join(d, "fingerprint.pb")
    if not os.path.exists(fp_path):
        return None
    fp = fingerprint_pb2.FingerprintDef.FromString(open(fp_path, "rb").read())
    if fp.uuid:
        fp.uuid = str(int.from_bytes(hashlib.sha256(tag.encode()).digest()[:16], "big"))
        with open(fp_path, "wb") as f:
            f.write(fp.SerializeToString(deterministic=True))
    return fp.uuid


def gen_tf2_module(out):
    name = "tf2_module"
    d = os.path.join(out, name)
    tf.random.set_seed(SEED)
    rng = np.random.default_rng(SEED + 2)

    class Dense(tf.Module):
        def __init__(self, i, o, name):
            super().__init__(name=name)
            with self.name_scope:
                self.kernel = tf.Variable(rng.normal(size=(i, o)).astype(np.float32), name="kernel")
                self.bias = tf.Variable(np.full([o], 0.125, np.float32), name="bias")

        def __call__(self, x):
            return tf.matmul(x, self.kernel) + self.bias

    class Model(tf.Module):
        def __init__(self):
            super().__init__(name="model")
            self.dense = Dense(3, 2, "dense")
            self.scale = tf.Variable(2.5, name="scale")
            self.label = tf.Variable(b"tfmount \x00 tf2 module", dtype=tf.string, name="label")
            self.extra = [tf.Variable(np.arange(3, dtype=np.int32)), tf.Variable(np.float64(0.5))]  # both "Variable"

        @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32, name="x")])
        def predict(self, x):
            offs = tf.constant([[0.5, -0.5]], tf.float32)
            splat = tf.constant(1.0, shape=[1, 2])
            y = tf.nn.relu(self.dense(x) + offs) * self.scale * splat
            return {"y": y, "n": tf.shape(x, out_type=tf.int64)[0] + tf.cast(tf.reduce_sum(self.extra[0]), tf.int64)}

        @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="words")])
        def describe(self, words):
            joined = tf.strings.join([tf.fill(tf.shape(words), self.label.read_value()), words], separator=" | ")
            return {"joined": joined, "lengths": tf.strings.length(words)}

    m = Model()
    tf.saved_model.save(m, d, signatures={"serving_default": m.predict, "describe": m.describe})
    uuid = pin_fingerprint(d, "tfmount-graphs-tf2-%d" % SEED)
    loaded = tf.saved_model.load(d)
    r = loaded.signatures["serving_default"](x=tf.ones([2, 3]))
    assert r["y"].shape == (2, 2), r
    r = loaded.signatures["describe"](words=tf.constant([b"a", b"bc"]))
    assert r["lengths"].numpy().tolist() == [1, 2], r
    exp, sm = saved_model_expected(out, name, (), [
        "fingerprint.pb: TF writes a random uuid; re-serialised with the pinned uuid %s" % uuid,
        "show_all.stdout ends with the 'Concrete Functions' section, which saved_model_cli prints by LOADING the "
        "model with Python (tf.saved_model.load); it is also in show_all_concrete_functions",
        "all computation is in functions; graph_def.node holds only placeholders, VarHandleOps, "
        "StatefulPartitionedCall nodes and the saver nodes"])
    prefix = os.path.join(d, "variables", "variables")
    mg = sm.meta_graphs[0]
    varlist, by_name = saved_model_variable_names(mg, prefix)
    exp["variables"] = varlist
    exp["variable_names"] = {k: v[0] for k, v in by_name.items() if len(v) == 1}
    exp["variable_names_duplicates"] = {k: v for k, v in by_name.items() if len(v) > 1}
    exp["variable_names_doc"] = (
        "variables = every SavedObjectGraph node of kind variable: its SavedVariable.name, the child local-name "
        "path from the root (BFS, first path found), and the checkpoint key found by walking the same path in the "
        "variables/ checkpoint's _CHECKPOINTABLE_OBJECT_GRAPH (attribute VARIABLE_VALUE). variable_names = "
        "{SavedVariable.name: checkpoint key} for names held by one variable; variable_names_duplicates = names "
        "held by several (unnamed tf.Variables are all 'Variable').")
    exp["checkpoint_names"] = checkpoint_object_names(prefix, name + "/variables/variables")
    write_json(os.path.join(out, "expected", name + ".json"), exp)
    write_json(os.path.join(out, "expected", name + ".variables.json"), tf_view(out, name + "/variables/variables"))
    return [{"name": name, "source": name, "kind": "saved_model", "expected": "expected/%s.json" % name,
             "variables": "expected/%s.variables.json" % name}]


def gen_frozen(out):
    from tensorflow.python.framework.convert_to_constants import convert_variables_to_constants_v2

    d = os.path.join(out, "frozen")
    rng = np.random.default_rng(SEED + 3)
    w = tf.Variable(rng.normal(size=(4, 3)).astype(np.float32), name="w")
    b = tf.Variable(np.array([0.5, -0.5, 0.0], np.float32), name="b")
    thr = tf.Variable(0.25, name="threshold")
    steps = tf.Variable(np.int64(3), name="steps")

    @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32, name="inp")])
    def net(inp):
        h = tf.matmul(inp, w) + b
        s = tf.reduce_mean(h)
        out_ = tf.cond(s > thr, lambda: tf.nn.relu(h) * 2.0, lambda: tf.nn.sigmoid(h) - tf.constant(1.0, shape=[3]))
        return tf.identity(out_, name="out"), tf.identity(steps + 1, name="next_step")

    cf = net.get_concrete_function()
    frozen = convert_variables_to_constants_v2(cf, lower_control_flow=False)
    gd = frozen.graph.as_graph_def()
    tf.io.write_graph(gd, d, "graph.pb", as_text=False)
    tf.io.write_graph(gd, d, "graph.pbtxt", as_text=True)
    from tensorflow.core.framework import graph_pb2

    gd_pb = graph_pb2.GraphDef.FromString(open(os.path.join(d, "graph.pb"), "rb").read())
    gd_txt = text_format.Parse(open(os.path.join(d, "graph.pbtxt"), encoding="utf-8").read(), graph_pb2.GraphDef())
    assert gd_pb == gd_txt
    assert len(gd_pb.library.function) >= 2, [f.signature.name for f in gd_pb.library.function]
    assert not any(nd.op in ("VarHandleOp", "ReadVariableOp", "VariableV2") for nd in gd_pb.node)
    man = []
    for fn, fmt in (("graph.pb", "binary"), ("graph.pbtxt", "text")):
        exp = {"tf_version": tf.__version__, "source": "frozen/" + fn, "kind": "graph_def", "format": fmt,
               "schema": SCHEMA_DOC, "graph_def": b64(gd_pb)}
        exp.update(graph_records(gd_pb))
        exp["notes"] = ["convert_variables_to_constants_v2(lower_control_flow=False) of a tf.function with a tf.cond; "
                        "written by tf.io.write_graph (as_text=False / True); graph.pb and graph.pbtxt hold the "
                        "same GraphDef"]
        nm = "frozen_" + fn.split(".")[1]
        write_json(os.path.join(out, "expected", nm + ".json"), exp)
        man.append({"name": nm, "source": "frozen/" + fn, "kind": "graph_def", "expected": "expected/%s.json" % nm})
    return man


def gen_tf1_meta(out):
    name = "tf1_meta"
    d = os.path.join(out, name)
    os.makedirs(d)
    rng = np.random.default_rng(SEED + 4)
    g = tf.Graph()
    with g.as_default():
        tf.compat.v1.set_random_seed(SEED)
        x = tf.compat.v1.placeholder(tf.float32, [None, 2], name="x")
        with tf.compat.v1.variable_scope("layer"):
            w = tf.compat.v1.get_variable("w", initializer=rng.normal(size=(2, 2)).astype(np.float32))
            b = tf.compat.v1.get_variable("b", initializer=np.zeros(2, np.float32))
        tf.identity(tf.matmul(x, w) + b, name="y")
        tf.constant(np.arange(6, dtype=np.float32).reshape(2, 3), name="table/values")
        tf.constant(3.0, shape=[2, 2], name="table/fill")
        gs = tf.compat.v1.train.get_or_create_global_step()
        tf.compat.v1.assign_add(gs, 1, name="bump")
        saver = tf.compat.v1.train.Saver()
        with tf.compat.v1.Session(graph=g) as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            p = saver.save(sess, os.path.join(d, "model.ckpt"))
    assert p.endswith("model.ckpt"), p
    with open(os.path.join(d, "checkpoint"), "w") as f:
        f.write('model_checkpoint_path: "model.ckpt"\nall_model_checkpoint_paths: "model.ckpt"\n')
    from tensorflow.core.protobuf import meta_graph_pb2

    mg = meta_graph_pb2.MetaGraphDef.FromString(open(os.path.join(d, "model.ckpt.meta"), "rb").read())
    rec = meta_graph_record(mg, 0, None, None, ())
    rec["show_all_section"] = show_all_section_of_meta(os.path.join(d, "model.ckpt.meta"))
    rec["show_all_section_command"] = SECTION_CODE_DOC
    exp = {"tf_version": tf.__version__, "source": name + "/model.ckpt.meta", "kind": "meta_graph",
           "also_sources": [name, name + "/model.ckpt"], "schema": SCHEMA_DOC, "default_meta_graph": 0,
           "meta_graphs": [rec]}
    exp["notes"] = ["TF1 Saver.save(write_meta_graph=True): the .meta is a binary MetaGraphDef with NO tags "
                    "(meta_info_def.tags is empty), so its dir under meta_graphs/ is the escaped empty string '%'",
                    "the checkpoint state file was rewritten with relative paths (TF writes absolute ones here)"]
    write_json(os.path.join(out, "expected", name + ".json"), exp)
    write_json(os.path.join(out, "expected", name + ".variables.json"), tf_view(out, name + "/model.ckpt"))
    return [{"name": name + "_meta", "source": name + "/model.ckpt.meta", "kind": "meta_graph",
             "expected": "expected/%s.json" % name},
            {"name": name + "_prefix", "source": name + "/model.ckpt", "kind": "prefix_with_meta",
             "expected": "expected/%s.json" % name, "variables": "expected/%s.variables.json" % name},
            {"name": name + "_dir", "source": name, "kind": "ckpt_dir_with_meta", "checkpoints": ["model.ckpt"],
             "expected": "expected/%s.json" % name, "variables": "expected/%s.variables.json" % name}]


def gen_checkpoint_names(out):
    fixtures = os.path.dirname(out)
    man = []
    for nm in ("tf2_keras", "tf2_slots"):
        prefix = os.path.join(fixtures, nm, "ckpt-1")
        if not os.path.exists(prefix + ".index"):
            print("  (skipping names_%s: %s.index not found; run gen_fixtures.py first)" % (nm, prefix))
            continue
        rec = checkpoint_object_names(prefix, "../%s/ckpt-1" % nm)
        write_json(os.path.join(out, "expected", "names_%s.json" % nm), rec)
        man.append({"name": "names_" + nm, "source": "../%s/ckpt-1" % nm, "kind": "prefix",
                    "names": "expected/names_%s.json" % nm})
    return man


def main(argv):
    if len(argv) != 2:
        print(__doc__)
        print("usage: gen_graph_fixtures.py OUTPUT_DIR   (normally tests/fixtures/graphs)")
        return 2
    out = os.path.abspath(argv[1])
    if not os.path.exists(SMCLI):
        print("saved_model_cli not found next to %s" % sys.executable)
        return 2
    # Kept across a regeneration (other scripts write them; re-run scripts/record_saved_model_cli.py
    # afterwards, since it records saved_model_cli on the fixtures written here).
    kept = ("tf2_signatures", os.path.join("expected", "saved_model_cli"))  # gen_signatures_fixture.py
    # gen_tfhub_module.py (an older TensorFlow): its files and its manifest entry.
    hub = "tfhub_tf1_module"
    kept += (hub,) + tuple(os.path.join("expected", hub + s) for s in (".json", ".variables.json", ".module.json"))
    old_manifest = os.path.join(out, "manifest.json")
    kept_entries = [e for e in json.load(open(old_manifest)) if e.get("name") == hub] \
        if os.path.exists(old_manifest) else []
    aside = tempfile.mkdtemp(prefix="tfmount_graph_keep_")
    for k in kept:
        if os.path.exists(os.path.join(out, k)):
            shutil.move(os.path.join(out, k), os.path.join(aside, k.replace(os.sep, "_")))
    if os.path.exists(out):
        shutil.rmtree(out)
    os.makedirs(os.path.join(out, "expected"))
    for k in kept:
        if os.path.exists(os.path.join(aside, k.replace(os.sep, "_"))):
            shutil.move(os.path.join(aside, k.replace(os.sep, "_")), os.path.join(out, k))
    shutil.rmtree(aside, ignore_errors=True)
    tf.random.set_seed(SEED)
    tf.config.experimental.enable_op_determinism()
    manifest = []
    for gen in (gen_tf1_two_tags, gen_tf2_module, gen_frozen, gen_tf1_meta, gen_checkpoint_names):
        print("generating", gen.__name__[4:], flush=True)
        manifest.extend(gen(out))
    manifest.extend(kept_entries)
    write_json(os.path.join(out, "manifest.json"), manifest)
    with open(os.path.join(out, "README.md"), "w") as f:
        f.write("Generated by `scripts/gen_graph_fixtures.py` with TensorFlow %s -- do not edit by hand.\n"
                "See the docstring of that script for what each fixture is, `manifest.json` for the mounts, and\n"
                "`scripts/check_pbtxt.py` for checking a mount against `expected/*.json`.\n" % tf.__version__)
    total = 0
    for dp, _dn, fns in os.walk(out):
        total += sum(os.path.getsize(os.path.join(dp, fn)) for fn in fns)
    print("done: %d bytes in %s" % (total, out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
