"""TensorFlow's side of tests/cli/export.rs: writes a TF2 training checkpoint (a tf.Module with
two sub-modules, `enc` and `dec`, and a Keras Adam optimizer after one step), then checks what
`tfmount export` made of it by restoring it with tf.train.Checkpoint: every object of the model
matched (`assert_existing_objects_matched`), the values equal to those written, the keys listed
by tf.train.list_variables, and the names of the root's children in the object graph.

    python scripts/export_check.py write PREFIX VALUES.json
    python scripts/export_check.py check VALUES.json PREFIX ENC_NAME [PREFIX ENC_NAME ...]
    python scripts/export_check.py read PREFIX...   # every tensor: dtype, shape, sha256 (or why not)
    python scripts/export_check.py safetensors FILE...   # the same, read by safetensors (numpy)
    python scripts/export_check.py restore WANTS.json   # {prefix: [[key_hex, dtype], ...]}: each
        # tensor restored by RestoreV2 (any key bytes, any dtype TF restores): sha256 of its
        # bytes (strings: each an 8-byte length and its bytes), the keys and dtypes TF lists
    python scripts/export_check.py smwrite DIR TRAIN_PREFIX MODEL.json TRAIN.json   # a
        # SavedModel and its values, then a training checkpoint one Adam step later and its values
    python scripts/export_check.py smcheck DIR VALUES.json [DIR VALUES.json ...]   # each DIR
        # served by TensorFlow with these values: its serving signature against numpy, its
        # variables read back; keyed "DIR VALUES.json"

Run with the test virtualenv's Python (scripts/test.sh --setup makes it); no GPU needed.
"""
import json, sys
import numpy as np
import tensorflow as tf

class Block(tf.Module):
    def __init__(self, n, m, seed):
        super().__init__()
        self.kernel = tf.Variable(tf.random.stateless_normal([n, m], seed=[seed, 1]))
        self.bias = tf.Variable(tf.zeros([m]))

class Net(tf.Module):
    """`enc_name` may be dotted: `blocks.enc` puts the encoder in a module `blocks`."""
    def __init__(self, enc_name="enc"):
        super().__init__()
        *outer, last = enc_name.split(".")
        at = self
        for name in outer:
            setattr(at, name, tf.Module())
            at = getattr(at, name)
        setattr(at, last, Block(4, 3, 1))
        self.dec = Block(3, 2, 2)
        self._enc_name = enc_name
    def __call__(self, x):
        h = enc_of(self, self._enc_name)
        return tf.matmul(tf.nn.relu(tf.matmul(x, h.kernel) + h.bias), self.dec.kernel) + self.dec.bias

def enc_of(net, enc_name):
    at = net
    for name in enc_name.split("."):
        at = getattr(at, name)
    return at

def values(net, enc_name):
    e = enc_of(net, enc_name)
    return {"enc/kernel": e.kernel.numpy().tolist(), "enc/bias": e.bias.numpy().tolist(),
            "dec/kernel": net.dec.kernel.numpy().tolist(), "dec/bias": net.dec.bias.numpy().tolist()}

def train_step(net):
    """One step of a Keras Adam on the net; the optimizer."""
    opt = tf.keras.optimizers.Adam(0.1)
    with tf.GradientTape() as t:
        loss = tf.reduce_sum(net(tf.ones([2, 4])) ** 2)
    vs = net.trainable_variables
    opt.apply_gradients(zip(t.gradient(loss, vs), vs))
    return opt

cmd = sys.argv[1]
if cmd == "write":
    net = Net()
    opt = train_step(net)
    tf.train.Checkpoint(model=net, optimizer=opt).write(sys.argv[2])
    json.dump(values(net, "enc"), open(sys.argv[3], "w"))
    json.dump({"written": sys.argv[2]}, sys.stdout)
elif cmd == "check":
    want = json.load(open(sys.argv[2]))
    out = {}
    for prefix, enc_name in zip(sys.argv[3::2], sys.argv[4::2]):
        net = Net(enc_name)
        st = tf.train.Checkpoint(model=net).read(prefix)
        st.assert_existing_objects_matched()
        got = values(net, enc_name)
        keys = sorted(k for k, _ in tf.train.list_variables(prefix))
        from tensorflow.core.protobuf import trackable_object_graph_pb2
        g = trackable_object_graph_pb2.TrackableObjectGraph()
        g.ParseFromString(tf.train.load_checkpoint(prefix).get_tensor("_CHECKPOINTABLE_OBJECT_GRAPH"))
        root = sorted(c.local_name for c in g.nodes[0].children)
        out[prefix] = {"equal": got == want, "keys": keys, "root": root}
    json.dump(out, sys.stdout)
elif cmd == "read":
    import hashlib
    out = {}
    for prefix in sys.argv[2:]:
        r = tf.train.load_checkpoint(prefix)
        got = {}
        for name, shape in r.get_variable_to_shape_map().items():
            dtype = r.get_variable_to_dtype_map()[name].name
            try:
                v = r.get_tensor(name)
            except Exception as e:  # TF's Python reader refuses some dtypes (half): said, not hidden
                got[name] = [dtype, list(shape), "unreadable: " + type(e).__name__]
                continue
            if isinstance(v, bytes):
                v = np.array([v], dtype=object)
            if v.dtype == object:
                data = b"".join(len(s).to_bytes(8, "little") + s for s in v.reshape(-1).tolist())
            else:
                data = np.ascontiguousarray(v).tobytes()
            got[name] = [dtype, list(shape), hashlib.sha256(data).hexdigest()]
        out[prefix] = got
    json.dump(out, sys.stdout, sort_keys=True)
elif cmd == "safetensors":
    import hashlib
    import ml_dtypes
    from safetensors import safe_open
    # safetensors' numpy loader names float8 and bfloat16 dtypes as numpy attributes, which
    # numpy itself does not have: ml_dtypes' (TensorFlow's own) are given under those names.
    for n in ("bfloat16", "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz"):
        if not hasattr(np, n):
            setattr(np, n, getattr(ml_dtypes, n))
    out = {}
    for path in sys.argv[2:]:
        got = {}
        with safe_open(path, "np") as f:
            meta = f.metadata()
            for name in f.keys():
                v = f.get_tensor(name)
                got[name] = [list(v.shape), hashlib.sha256(np.ascontiguousarray(v).tobytes()).hexdigest()]
        out[path] = {"tensors": got, "metadata": meta}
    json.dump(out, sys.stdout, sort_keys=True)
elif cmd == "castsrc":
    # Values where rounding shows: ties, the largest float16 and past it, subnormals, inf, NaN.
    specials = np.array([0.0, -0.0, 1 + 2**-8, 1 + 3 * 2**-8, 65504, 65520, 1e-8, 2**-24, 2**-25,
                         np.inf, -np.inf, np.nan, 3.0e38, -1.5, 1 + 2**-11], np.float32)
    rng = np.random.default_rng(1)
    a = np.concatenate([specials, rng.standard_normal(4000).astype(np.float32),
                        (rng.standard_normal(1000) * 1e-5).astype(np.float32)])
    b = a.astype(np.float64) * (1 + 1e-9)
    ck = tf.train.Checkpoint(a=tf.Variable(a), b=tf.Variable(b), i=tf.Variable(np.arange(5, dtype=np.int32)))
    ck.write(sys.argv[2])
    json.dump({"written": sys.argv[2]}, sys.stdout)
elif cmd == "castcheck":
    # SRC OUT DTYPE: every float tensor of OUT is tf.cast of SRC's, bit for bit; ints untouched.
    src, out, dtype = sys.argv[2], sys.argv[3], tf.as_dtype(sys.argv[4])
    r = tf.train.load_checkpoint(src)
    dts = r.get_variable_to_dtype_map()
    got = {}
    for k, d in dts.items():
        if k == "_CHECKPOINTABLE_OBJECT_GRAPH":
            continue
        restore = lambda p, t: tf.raw_ops.RestoreV2(prefix=p, tensor_names=[k], shape_and_slices=[""], dtypes=[t])[0]
        if d.is_floating:
            want = tf.cast(restore(src, d), dtype)
            have = restore(out, dtype)
        else:
            want, have = restore(src, d), restore(out, d)
        bits = lambda x: tf.bitcast(x, tf.uint16 if x.dtype.size == 2 else tf.uint32 if x.dtype.size == 4 else tf.uint64).numpy().tobytes()
        got[k] = {"equal": bits(want) == bits(have), "n": int(tf.size(have))}
    json.dump(got, sys.stdout)
elif cmd == "setnpy":
    # VALUES.json NPY OUT_VALUES.json: an .npy of new values for enc/kernel ([4, 3] float32),
    # and the values a restore should then give.
    want = json.load(open(sys.argv[2]))
    new = np.arange(12, dtype=np.float32).reshape(4, 3) / 7
    np.save(sys.argv[3], new)
    want["enc/kernel"] = new.tolist()
    json.dump(want, open(sys.argv[4], "w"))
    json.dump({"written": sys.argv[3]}, sys.stdout)
elif cmd == "smwrite":
    net = Net()
    net.serve = tf.function(lambda x: {"y": net(x)},
                            input_signature=[tf.TensorSpec([None, 4], tf.float32)])
    tf.saved_model.save(net, sys.argv[2], signatures={"serving_default": net.serve})
    at_save = values(net, "enc")
    opt = train_step(net)
    tf.train.Checkpoint(model=net, optimizer=opt).write(sys.argv[3])
    json.dump(at_save, open(sys.argv[4], "w"))
    json.dump(values(net, "enc"), open(sys.argv[5], "w"))
    json.dump({"written": sys.argv[2]}, sys.stdout)
elif cmd == "smcheck":
    out = {}
    for d, values in zip(sys.argv[2::2], sys.argv[3::2]):
        want = {k: np.array(v, np.float32) for k, v in json.load(open(values)).items()}
        m = tf.saved_model.load(d)
        x = np.arange(8, dtype=np.float32).reshape(2, 4) / 3 - 1
        y = m.signatures["serving_default"](x=tf.constant(x))["y"].numpy()
        h = np.maximum(x @ want["enc/kernel"] + want["enc/bias"], 0)
        expect = h @ want["dec/kernel"] + want["dec/bias"]
        r = tf.train.load_checkpoint(d + "/variables/variables")
        stored = {k: r.get_tensor(k + "/.ATTRIBUTES/VARIABLE_VALUE").tolist() for k in want}
        out[d + " " + values] = {"served": bool(np.allclose(y, expect, rtol=1e-5, atol=1e-6)),
                                 "stored": stored == {k: v.tolist() for k, v in want.items()},
                                 "y": y.tolist()}
    json.dump(out, sys.stdout)
elif cmd == "restore":
    import hashlib
    out = {}
    for prefix, wants in json.load(open(sys.argv[2])).items():
        got = {}
        try:
            r = tf.train.load_checkpoint(prefix)
            listed = {k: d.name for k, d in r.get_variable_to_dtype_map().items()}
        except Exception as e:  # keys that are not UTF-8: TF's Python reader cannot list them
            listed = "unlisted: " + type(e).__name__
        for key_hex, dtype in wants:
            key = bytes.fromhex(key_hex)
            try:
                t = tf.raw_ops.RestoreV2(prefix=prefix, tensor_names=[key], shape_and_slices=[""],
                                         dtypes=[tf.as_dtype(dtype)])[0]
                if t.dtype == tf.variant:  # restored (its checksums checked); no bytes to hash
                    got[key_hex] = "restored variant of shape %s" % list(t.shape)
                    continue
                v = t.numpy()
                if t.dtype == tf.string:
                    data = b"".join(len(x).to_bytes(8, "little") + x for x in np.asarray(v, dtype=object).reshape(-1).tolist())
                else:
                    data = np.ascontiguousarray(v).tobytes()
                got[key_hex] = hashlib.sha256(data).hexdigest()
            except Exception as e:
                got[key_hex] = "unrestorable: " + type(e).__name__ + ": " + str(e).splitlines()[0][:200]
        out[prefix] = {"listed": listed, "restored": got}
    json.dump(out, sys.stdout)
