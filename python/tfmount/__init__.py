"""tfmount as a Python module: the tree a ``tfmount`` mount shows, without a mount.

    import tfmount
    with tfmount.open("run/ckpt-42") as m:        # any SOURCE the CLI takes
        kernel = m["dense/kernel/.ATTRIBUTES/VARIABLE_VALUE"]   # a numpy array
        m.listdir("variables"), m.read("tensors.tsv")

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

__all__ = ["open", "diff", "export", "mount", "Model", "Error", "IntegrityError", "__version__"]
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


def open(source, *, mmap=True, verify=True, **options):
    """Opens SOURCE as ``tfmount SOURCE MOUNTPOINT`` would mount it.

    SOURCE: a checkpoint prefix, a checkpoint directory (its ``latest``), a SavedModel, a
    ``.keras``/``.h5``/``.weights.h5``, a ``.tflite``, a TF.js ``model.json``, a graph file, or
    any of these as an ``s3://``, ``gs://``, ``http(s)://`` URL. ``options`` are the mount's
    ``-o`` options (``cache_size="64M"``, ``anonymous=True``, ``views="visible"``...).
    ``mmap=False`` gives every array its own memory; ``verify=False`` skips the stored
    checksums (``-o nocrc``).
    """
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
