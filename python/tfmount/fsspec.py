"""An fsspec filesystem over ``tfmount.open``: protocol ``tfmount``.

    fs = fsspec.filesystem("tfmount", source="run/ckpt-42")
    fs.ls("variables"), fs.cat("variables/dense/kernel.npy")
    fsspec.open("tfmount://variables/dense/kernel.npy::s3://bucket/run/ckpt-42")

Names, sizes and bytes are the mount's. SOURCE is a local path or an ``s3://``, ``gs://``,
``http(s)://`` URL, which tfmount reads itself (chained after ``::``, or as ``source=``).
"""

from fsspec.spec import AbstractBufferedFile, AbstractFileSystem

import tfmount

# Protocols of a chained target that tfmount reads itself, and the scheme it knows them by.
_LOCAL = {None, "file", "local"}
_REMOTE = {"s3": "s3", "s3a": "s3", "gs": "gs", "gcs": "gs", "http": "http", "https": "https"}


def _source_of(source, fo, target_protocol):
    if source is not None:
        return source
    if fo is None:
        raise ValueError("tfmount filesystem: give source=SOURCE, or chain it: tfmount://PATH::SOURCE")
    fo = str(fo)
    if target_protocol in _LOCAL or "://" in fo:
        return fo
    if target_protocol in _REMOTE:
        return f"{_REMOTE[target_protocol]}://{fo}"
    raise ValueError(
        f"tfmount filesystem: SOURCE {target_protocol}://{fo}: tfmount reads local paths and "
        "s3://, gs://, http(s):// URLs, not fsspec's other protocols"
    )


class TfmountFileSystem(AbstractFileSystem):
    """The tree ``tfmount SOURCE MOUNTPOINT`` shows, read-only, as an fsspec filesystem."""

    protocol = "tfmount"
    root_marker = ""
    cachable = True

    def __init__(self, source=None, fo=None, target_protocol=None, target_options=None, **options):
        mmap = options.pop("mmap", True)
        verify = options.pop("verify", True)
        super().__init__(**{k: options.pop(k) for k in list(options) if k in ("use_listings_cache", "listings_expiry_time", "max_paths", "skip_instance_cache")})
        self.source = _source_of(source, fo, target_protocol)
        self.model = tfmount.open(self.source, mmap=mmap, verify=verify, **options)

    @classmethod
    def _strip_protocol(cls, path):
        path = str(path)
        if path.startswith("tfmount://"):
            path = path[len("tfmount://"):]
        elif path.startswith("tfmount::"):
            path = path[len("tfmount::"):]
        path = path.split("::", 1)[0]
        return path.strip("/")

    def _entry(self, path, st):
        kind = st["type"]
        if kind == "link":
            kind = "other"
        return {"name": path, "size": st["size"], "type": kind, "mode": st["mode"], "mtime": st["mtime"]}

    def info(self, path, **kwargs):
        path = self._strip_protocol(path)
        return self._entry(path, self.model.stat(path))

    def ls(self, path, detail=True, **kwargs):
        path = self._strip_protocol(path)
        st = self.model.stat(path)
        if st["type"] != "directory":
            return [self._entry(path, st)] if detail else [path]
        names = self.model.listdir(path)
        full = [f"{path}/{n}" if path else n for n in names]
        if not detail:
            return full
        return [self._entry(p, self.model.stat(p)) for p in full]

    def cat_file(self, path, start=None, end=None, **kwargs):
        path = self._strip_protocol(path)
        size = self.model.stat(path)["size"]
        start = 0 if start is None else (start + size if start < 0 else start)
        end = size if end is None else (end + size if end < 0 else end)
        if end <= start:
            return b""
        return self.model.read(path, start, end - start)

    def _open(self, path, mode="rb", block_size=None, autocommit=True, cache_options=None, **kwargs):
        if mode != "rb":
            raise PermissionError(f"tfmount filesystem is read-only (mode {mode!r})")
        return TfmountFile(self, self._strip_protocol(path), mode, block_size=block_size or "default", cache_options=cache_options, **kwargs)

    def ukey(self, path):
        st = self.model.stat(self._strip_protocol(path))
        return f"{self.source}:{st['ino']}:{st['size']}:{st['mtime']}"


class TfmountFile(AbstractBufferedFile):
    def _fetch_range(self, start, end):
        return self.fs.model.read(self.path, start, end - start)
