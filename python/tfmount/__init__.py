"""tfmount as a Python module: the tree a ``tfmount`` mount shows, without a mount.

    import tfmount
    with tfmount.open("run/ckpt-42") as m:        # any SOURCE the CLI takes
        kernel = m["dense/kernel/.ATTRIBUTES/VARIABLE_VALUE"]   # a numpy array
        m.listdir("variables"), m.read("tensors.tsv")
    tfmount.save({"w": numpy.ones((2, 3), "float32")}, "out/ckpt")   # numpy -> a TF checkpoint

Arrays of tensors stored verbatim in a local file (V2 shards, contiguous ``.weights.h5``
datasets, stored ``.keras`` members, TFLite buffers, TF.js float32 shards) are read-only views
of a mapping of that file; everything else is decoded into an array of its own. docs/python.md
is the reference.
"""

from collections.abc import Mapping
import contextlib
import os
import shutil
import subprocess
import sys
import time

# numpy is imported when the first array is made, not here: the `tfmount` command imports this
# package too, and numpy's import would double its start-up.
from . import _tfmount
from ._tfmount import Error, IntegrityError

__all__ = ["open", "diff", "export", "save", "mount", "Model", "Error", "IntegrityError", "__version__"]
__version__ = _tfmount.version()

_builtin_open = open


def _options(options):
    """``-o`` items from keyword arguments: ``name=True`` is ``name``, ``name=value`` is
    ``name=value``; ``name=False`` and ``None`` leave an option out."""
    out = []
    for name, value in options.items():
        if value is None or value is False:
            continue
        if value is True:
            out.append(name)
        else:
            out.append(f"{name}={value}")
    return out


def _fspath(source):
    if isinstance(source, (str, bytes, os.PathLike)):
        return os.fsdecode(source)
    raise TypeError(f"SOURCE must be a path or a URL string, not {type(source).__name__}")


def open(source, *, mmap=True, verify=True, edits=None, **options):
    """Opens SOURCE as ``tfmount SOURCE MOUNTPOINT`` would mount it.

    SOURCE: a checkpoint prefix, a checkpoint directory (its ``latest``), a SavedModel, a
    ``.keras``/``.h5``/``.weights.h5``, a ``.tflite``, a TF.js ``model.json``, a graph file, or
    any of these as an ``s3://``, ``gs://``, ``http(s)://`` URL. ``options`` are the mount's
    ``-o`` options (``cache_size="64M"``, ``anonymous=True``, ``views="visible"``...).
    ``mmap=False`` gives every array its own memory; ``verify=False`` skips the stored
    checksums (``-o nocrc``). ``edits=DIR``: the model as the edits kept in DIR leave it (an
    editable mount's, ``tfmount -o edit=DIR``; docs/edit.md), read, never changed.
    """
    if edits is not None:
        options = dict(options, edit=_fspath(edits))
    return Model(_tfmount.open(_fspath(source), _options(options), mmap=mmap, verify=verify))


def _dtype(kind, name, key):
    import numpy

    if kind == "numpy":
        return numpy.dtype(name)
    if kind == "ml_dtypes":
        try:
            import ml_dtypes
        except ImportError:
            raise TypeError(
                f"tensor {key}: dtype {name} needs the ml_dtypes package (pip install ml_dtypes)"
            ) from None
        return numpy.dtype(getattr(ml_dtypes, name))
    raise TypeError(f"tensor {key}: no numpy dtype for {kind} {name}")


class Model(Mapping):
    """An opened SOURCE: a mapping of tensor keys to numpy arrays, and the mount's tree."""

    def __init__(self, core):
        self._m = core
        self._keys = None

    # The mapping ---------------------------------------------------------------------------

    def keys(self):
        """Tensor keys, in ``tensors.tsv``'s order (a list)."""
        if self._keys is None:
            self._keys = self._m.keys()
        return list(self._keys)

    def __iter__(self):
        return iter(self.keys())

    def __len__(self):
        if self._keys is None:
            self._keys = self._m.keys()
        return len(self._keys)

    def __contains__(self, key):
        return self._m.__contains__(key)

    def __getitem__(self, key):
        import numpy

        kind, name, shape, data = self._m.tensor(key)
        if kind == "string":
            arr = numpy.empty(len(data), dtype=object)
            arr[:] = data
            return arr.reshape(shape)
        dtype = _dtype(kind, name, key)
        if isinstance(data, bytearray):
            raw = numpy.frombuffer(data, dtype=numpy.uint8)  # decoded: writeable, its own
        else:
            raw = numpy.asarray(data)  # a view of the mapped file: read-only
        return raw.view(dtype).reshape(shape)

    def dtype(self, key):
        """The ``.dtype`` file's text: TensorFlow's name of the dtype."""
        return self._m.dtype(key)

    def shape(self, key):
        """The shape, a tuple of ints (the index only; no data read)."""
        return self._m.shape(key)

    def info(self, key):
        """The tensor files' extended attributes: key, dtype, shape, crc32c, shard, offset, and
        the format's own (quantization...)."""
        return self._m.info(key)

    # The tree ------------------------------------------------------------------------------

    def listdir(self, path=""):
        return self._m.listdir(path)

    def stat(self, path, follow_symlinks=True):
        return self._m.stat(path, follow_symlinks)

    def read(self, path, offset=0, size=-1):
        return self._m.read(path, offset, size)

    def readlink(self, path):
        return self._m.readlink(path)

    def verify(self, threads=None):
        """``tfmount verify SOURCE``: a list of ``(key, reason)``, empty when intact."""
        return self._m.verify(threads)

    # Lifetime ------------------------------------------------------------------------------

    def close(self):
        self._m.close()

    @property
    def closed(self):
        return self._m.closed

    @property
    def source(self):
        return self._m.source

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        state = "closed" if self.closed else "open"
        return f"<tfmount.Model {self._m.source!r} ({state})>"


def diff(a, b, *, exact=False, same=False, names=False):
    """``tfmount diff A B``: a list of ``(status, key)``, status ``A`` (added in B), ``D``
    (deleted), ``T`` (dtype or shape changed), ``M`` (modified), and ``=`` with ``same``.
    With ``names``, tensors are matched by the names ``names/`` shows (``tfmount diff
    --names``), and each line has the name in place of the key."""
    return _tfmount.diff(_fspath(a), _fspath(b), exact=exact, same=same, names=names)


_EDITS = ("keep", "drop", "weights_only", "rename", "cast", "set")


def export(source, out, *, to=None, shard_size=None, force=False, dry_run=False, no_object_graph=False,
           variables_from=None, names=False, **edits):
    """``tfmount export SOURCE OUT``: a new TF checkpoint (or, ``to="safetensors"`` or an OUT
    ending ``.safetensors``, a safetensors file; ``to="savedmodel"``, the default for a SavedModel
    SOURCE, a SavedModel with its variables rewritten) from SOURCE's tensors.
    ``variables_from=CKPT`` takes every variable's values from another checkpoint (by key, or
    with ``names=True`` by ``names/`` names), before the edits. The edits are keyword
    arguments applied in the order given, as on the command line: ``keep=``, ``drop=`` (globs),
    ``weights_only=True``, ``rename=`` (``"REGEX=REPLACEMENT"``), ``cast=`` (``"DTYPE[:GLOB]"``),
    ``set=`` (``"KEY=FILE.npy"`` or ``"KEY=SOURCE:KEY"``); each a string or a list of them.
    Returns a dict: ``to``, ``out``, ``tensors``, ``bytes``, ``dropped``, ``renamed``, ``files``,
    ``dry_run`` and ``plan`` (the ``D``/``R``/``C``/``S`` lines of ``--dry-run``). Raises
    ``tfmount.Error`` when the export is refused (nothing is then left at OUT)."""
    pairs = []
    for kind, value in edits.items():
        if kind not in _EDITS:
            raise TypeError(f"export() got an unexpected keyword argument {kind!r}")
        if kind == "weights_only":
            if value:
                pairs.append((kind, ""))
            continue
        for v in [value] if isinstance(value, (str, os.PathLike)) else value:
            pairs.append((kind, os.fspath(v)))
    return _tfmount.export(_fspath(source), _fspath(out), pairs, to=to, shard_size=shard_size, force=force,
                           dry_run=dry_run, no_object_graph=no_object_graph,
                           variables_from=None if variables_from is None else _fspath(variables_from),
                           names=names)


_SAVE_FORMATS = (None, "tf", "safetensors")


def _save_kind(key, a):
    """How numpy holds ``a``'s dtype, as the core maps it to TensorFlow's: ``("string", "")``,
    ``("ml_dtypes", name)`` or ``("numpy", descr)`` (little-endian; the core refuses what has
    no TensorFlow dtype)."""
    dt = a.dtype
    if dt.kind in "SU":
        return "string", ""
    if dt.kind == "O":
        for x in a.flat:
            if not isinstance(x, (bytes, str)):
                raise TypeError(
                    f"{key}: dtype object holds {type(x).__name__}: tfmount.save writes numbers and "
                    "strings (an object array of bytes or str)")
        return "string", ""
    if getattr(dt.type, "__module__", "").split(".")[0] == "ml_dtypes":
        return "ml_dtypes", dt.name
    if dt.fields is None and dt.subdtype is None and dt.str.startswith(">"):
        dt = dt.newbyteorder("<")
    return "numpy", dt.str


def _save_prepare(a):
    """What is written of one array, made when the core asks for it (one at a time): a
    string tensor's elements as ``bytes`` (``str`` encoded UTF-8), row-major; otherwise the
    array C-contiguous and little-endian (``a`` itself when it already is)."""
    import numpy

    if a.dtype.kind in "SUO":
        return [x.encode("utf-8") if isinstance(x, str) else bytes(x) for x in a.ravel(order="C").tolist()]
    if a.dtype.str.startswith(">"):
        return a.astype(a.dtype.newbyteorder("<"), order="C")
    return numpy.ascontiguousarray(a)


def save(mapping, out, *, format=None, shard_size=None, force=False):
    """Writes numpy arrays to a TF checkpoint (``OUT.index``, ``OUT.data-*``) or, with
    ``format="safetensors"`` or an OUT ending ``.safetensors``, a ``.safetensors`` file, through
    the writers of ``tfmount export`` (nothing at OUT until it is whole, every byte read back).

    ``mapping``: ``str`` keys to arrays (anything ``numpy.asarray`` takes): bool, int8..int64,
    uint8..uint64, float16/32/64, complex64/128, ml_dtypes' bfloat16, float8_*, int4/uint4,
    int2/uint2, float4_e2m1fn — each written as the TensorFlow dtype with the same bytes — and,
    in a TF checkpoint only, strings (``S``/``U`` arrays, object arrays of ``bytes``/``str``;
    ``str`` encoded UTF-8). Any shape, order or byte order: written row-major, little-endian.
    The TF checkpoint is name-keyed (TF1 style, no object graph; keys in sorted order):
    ``tf.train.load_checkpoint`` and ``tf.compat.v1.train.init_from_checkpoint`` read it.
    ``shard_size``: bytes per data file at most (TF only). OUT existing is refused unless
    ``force=True``.

    Arrays are written from their own memory with the GIL released (a converted copy is made
    for one array at a time when it is not C-contiguous little-endian): do not change them from
    another thread during the call (what is then written is undefined).

    Returns a dict: ``format`` (and ``to``, as ``export``'s), ``out``, ``tensors``, ``bytes``,
    ``files``. Raises ``TypeError`` for a key that is not ``str`` or a dtype with no TensorFlow
    equivalent, ``ValueError`` for a bad option, ``tfmount.Error`` when the output is refused
    (OUT exists, strings or a dtype safetensors cannot hold, ...): nothing is then left at OUT."""
    import numpy

    if format not in _SAVE_FORMATS:
        raise ValueError(f"save: format={format!r}: \"tf\" or \"safetensors\"")
    if shard_size is not None and (isinstance(shard_size, bool) or not isinstance(shard_size, int) or shard_size < 1):
        raise ValueError(f"save: shard_size={shard_size!r}: a number of bytes, at least 1")
    items_of = getattr(mapping, "items", None)
    if items_of is None:
        raise TypeError(f"save: mapping must be a dict-like of str keys to arrays, not {type(mapping).__name__}")
    items = []
    for key, value in items_of():
        if not isinstance(key, str):
            raise TypeError(f"save: keys must be str, not {type(key).__name__}: {key!r}")
        a = numpy.asarray(value)
        kind, name = _save_kind(key, a)
        items.append((key, kind, name, [int(d) for d in a.shape], a, str(a.dtype)))
    return _tfmount.save(items, _fspath(out), _save_prepare, format=format, shard_size=shard_size,
                         force=bool(force))


def _unmount(mountpoint):
    for cmd in (["fusermount3", "-u", mountpoint], ["fusermount", "-u", mountpoint], ["umount", mountpoint]):
        if shutil.which(cmd[0]) is None:
            continue
        if subprocess.run(cmd, stderr=subprocess.DEVNULL).returncode == 0:
            return True
    return False


@contextlib.contextmanager
def mount(source, mountpoint, **options):
    """Mounts SOURCE at MOUNTPOINT (``tfmount SOURCE MOUNTPOINT -o ...``) for the ``with``
    block; yields the mount point, unmounts at its end. Needs FUSE, as the command does."""
    source, mountpoint = _fspath(source), _fspath(mountpoint)
    cmd = [sys.executable, "-m", "tfmount"]
    opts = _options(options)
    if opts:
        cmd += ["-o", ",".join(opts)]
    cmd += [source, mountpoint]
    r = subprocess.run(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if r.returncode != 0:
        raise Error(r.stderr.strip() or f"tfmount {source} {mountpoint} exited {r.returncode}")
    try:
        yield mountpoint
    finally:
        # The daemon may still be answering the last reads: a busy mount is retried a while.
        deadline = time.monotonic() + 10
        while not _unmount(mountpoint) and os.path.ismount(mountpoint):
            if time.monotonic() > deadline:
                raise Error(f"{mountpoint}: could not unmount (busy?): fusermount3 -u {mountpoint}")
            time.sleep(0.1)
