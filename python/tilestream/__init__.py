"""tilestream: arrays larger than memory, processed under a memory budget.

Open an on-disk array (``.npy``, raw, GeoTIFF, Zarr v3, or an ``np.memmap``) and run
an operation on it with ``memory=`` as the budget: the work is split into tiles that
fit, streamed through a fixed pool of buffers, and the result is exactly what it would
be at any budget::

    import tilestream as ts
    x = ts.open("features.npy")                       # 3075200 x 512 f32, 6.3 GB
    mean = ts.reduce(x, "mean", axis=0, memory="256MiB")  # an np.ndarray of 512 f64

Operations that write a file (``map``, ``cast``, ``affine``, ``standardize``,
``matmul``, ``stencil``, ``transpose``, ``convert``, ``gen``) return the output as a
:class:`Tensor` whose ``report`` is the :class:`RunReport` of the run. ``plan(f, ...)``
shows what ``f(...)`` would do without doing it. Outputs named ``.tif`` take
``tiff_compress=``, ``tiff_predictor=`` (``"auto"``, ``"none"``, ``"horizontal"``,
``"float"``) and ``cog=True`` (a Cloud-Optimized GeoTIFF, also ``format="cog"``,
with ``overviews="auto"`` or a count and ``overview_resampling="average"`` or
``"nearest"``); ``.zarr`` outputs take ``zarr_chunks=``, ``zarr_shard=``,
``zarr_compress=``.

Every call releases the GIL for the whole run; Ctrl-C raises ``KeyboardInterrupt``
within about a second, after the run stopped at the tile in flight (nothing appears at
the output, and ``resume=True`` continues it); ``progress=True`` shows a bar (tqdm when
installed), a callable receives the progress numbers (an exception it raises cancels
the run and reaches the caller). Errors are Python's own: :class:`BudgetError` (a
``MemoryError``) when the budget is too small, ``FileNotFoundError``,
``PermissionError`` and ``OSError`` for I/O, ``ValueError`` for bad arguments and
corrupt files, ``TypeError`` for dtypes tilestream or numpy cannot hold.
"""

from __future__ import annotations

import builtins
import json
import mmap
import os
import sys
import tempfile
from typing import Any, Callable, Dict, Mapping, Optional, Union

import numpy as np

from . import _specs
from . import _tilestream as _ts

__version__ = _ts.version()

# with the operations of _ops.py, added from its own list below
__all__ = [
    "Batches",
    "BudgetError",
    "Plan",
    "RunReport",
    "Tensor",
    "batches",
    "histogram",
    "iter_tiles",
    "map_blocks",
    "map_overlap",
    "open",
    "plan",
    "read",
    "reduce",
    "reduce_blocks",
    "run",
    "set_options",
]

#: The memory budget was too small for the operation (``MemoryError``). ``smallest`` is
#: the smallest budget in bytes that works, when the planner could work it out.
BudgetError = _ts.BudgetError
BudgetError.__str__ = lambda self: str(self.args[0]) if self.args else ""  # type: ignore[method-assign]
BudgetError.smallest = property(  # type: ignore[attr-defined]
    lambda self: self.args[1] if len(self.args) > 1 else None,
    doc="The smallest budget that works, in bytes (None if unknown).",
)

PathLike = Union[str, "os.PathLike[str]"]

# ---------------------------------------------------------------------------------------
# dtypes

_NUMPY_OF = {
    "bool": "bool",
    "u8": "uint8",
    "u16": "uint16",
    "u32": "uint32",
    "u64": "uint64",
    "i8": "int8",
    "i16": "int16",
    "i32": "int32",
    "i64": "int64",
    "f16": "float16",
    "f32": "float32",
    "f64": "float64",
    "c64": "complex64",
    "c128": "complex128",
}


def _np_dtype(name: str) -> np.dtype:
    """The numpy dtype of a tilestream dtype name (bf16 needs ml_dtypes)."""
    if name == "bf16":
        try:
            import ml_dtypes  # type: ignore[import-not-found]
        except ImportError:
            raise TypeError(
                "tilestream: bf16 data needs the ml_dtypes package for numpy "
                "(pip install ml_dtypes)"
            ) from None
        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(_NUMPY_OF[name]).newbyteorder("<")


def _ts_dtype(dtype: Any) -> Optional[str]:
    """A tilestream dtype name from a numpy dtype, a type or a name (None stays None)."""
    if dtype is None:
        return None
    if isinstance(dtype, str) and dtype in _NUMPY_OF or dtype == "bf16":
        return dtype
    try:
        d = np.dtype(dtype)
    except TypeError:
        raise TypeError(f"tilestream: {dtype!r} is not a dtype") from None
    if d.name == "bfloat16":
        return "bf16"
    if d.byteorder == ">" and d.itemsize > 1:
        raise TypeError(
            f"tilestream: big-endian {d} is not supported: convert with "
            "a.astype(a.dtype.newbyteorder('<'))"
        )
    for k, v in _NUMPY_OF.items():
        if np.dtype(v) == d.newbyteorder("="):
            return k
    raise TypeError(
        f"tilestream: dtype {d} is not one tilestream handles "
        "(bool, u8-u64, i8-i64, f16, bf16, f32, f64, c64, c128)"
    )


# ---------------------------------------------------------------------------------------
# options

_OPTIONS: dict = {"memory": "1GiB", "threads": None, "progress": None, "device": None}


class set_options:
    """Sets defaults for every call (``memory``, ``threads``, ``progress``, ``device``).

    Usable as a context manager, which restores the previous defaults on exit::

        with ts.set_options(memory="512MiB"):
            ts.reduce(x, "sum")
    """

    def __init__(self, **options: Any) -> None:
        unknown = set(options) - set(_OPTIONS)
        if unknown:
            raise ValueError(f"tilestream: unknown option(s) {sorted(unknown)}")
        self._previous = dict(_OPTIONS)
        _OPTIONS.update(options)

    def __enter__(self) -> "set_options":
        return self

    def __exit__(self, *exc: Any) -> None:
        _OPTIONS.clear()
        _OPTIONS.update(self._previous)


def _opts(memory: Any = None, threads: Any = None, device: Any = None, **extra: Any) -> str:
    o = {
        "memory": memory if memory is not None else _OPTIONS["memory"],
        "threads": threads if threads is not None else _OPTIONS["threads"],
        "device": device if device is not None else _OPTIONS["device"],
    }
    if isinstance(o["memory"], bool) or not isinstance(o["memory"], (str, int)):
        raise TypeError("tilestream: memory must be a size such as '512MiB' or a number of bytes")
    if isinstance(o["memory"], int) and o["memory"] <= 0:
        raise ValueError(f"tilestream: memory={o['memory']} is not a positive number of bytes")
    if isinstance(o["memory"], int) and o["memory"] >= 1 << 64:
        raise ValueError(f"tilestream: memory={o['memory']} is more bytes than any machine has")
    t = o["threads"]
    if t is not None and (isinstance(t, bool) or not isinstance(t, int)):
        raise TypeError(f"tilestream: threads must be a whole number of threads, not {t!r}")
    if t is not None and t < 1:
        raise ValueError(f"tilestream: threads={t} must be at least 1")
    o.update({k: v for k, v in extra.items() if v is not None})
    return json.dumps(o)


def _progress(progress: Any) -> Optional[Callable[[dict], None]]:
    """The callable that receives progress: None, a callable, or True for a bar."""
    if progress is None:
        progress = _OPTIONS["progress"]
    if progress is None or progress is False:
        return None
    if callable(progress):
        return progress
    try:
        from tqdm import tqdm  # type: ignore[import-not-found]
    except ImportError:
        tqdm = None
    state: dict = {}

    def bar(p: dict) -> None:
        if tqdm is not None:
            if "bar" not in state:
                state["bar"] = tqdm(total=p["tiles_total"], unit="tile")
            b = state["bar"]
            b.update(p["tiles_done"] - b.n)
            if p["tiles_done"] >= p["tiles_total"]:
                b.close()
        else:
            end = "\n" if p["tiles_done"] >= p["tiles_total"] else ""
            print(
                f"\rtilestream: {p['tiles_done']}/{p['tiles_total']} tiles, "
                f"{p['bytes_done'] / 1e9:.2f} GB in {p['elapsed']:.1f} s",
                end=end,
                file=sys.stderr,
                flush=True,
            )

    return bar


# ---------------------------------------------------------------------------------------
# reports and plans


class _Fields:
    """Named fields as attributes, and as a dict with ``as_dict()``."""

    def __init__(self, fields: dict) -> None:
        self._fields = fields

    def __getattr__(self, name: str) -> Any:
        try:
            return self._fields[name]
        except KeyError:
            raise AttributeError(name) from None

    def as_dict(self) -> dict:
        """Every field, as a dict."""
        return dict(self._fields)


class RunReport(_Fields):
    """What a run did: tiles, bytes, time, throughput, busy time of each stage, peak
    memory reserved against the budget. Fields are attributes (``r.tiles``,
    ``r.gb_per_s``, ``r.peak_reserved_bytes``...); ``r.as_dict()`` has them all."""

    def __repr__(self) -> str:
        f = self._fields
        return (
            f"RunReport({f.get('op')!r}, tiles={f.get('tiles')}, wall_s={f.get('wall_s', 0):.3f}, "
            f"gb_per_s={f.get('gb_per_s', 0):.2f}, peak_reserved_bytes={f.get('peak_reserved_bytes')}, "
            f"budget_bytes={f.get('budget_bytes')})"
        )


class Plan(_Fields):
    """What an operation would do under a budget, without doing it: ``tiles``,
    ``tile_shape``, ``peak`` (bytes reserved at the peak), ``budget``, ``fits`` (and,
    when it does not fit, ``smallest``, the smallest budget that works); ``str()`` is
    what ``tilestream plan`` prints (or why it does not fit)."""

    @property
    def peak(self) -> Optional[int]:
        """Bytes reserved from the budget at the peak of the run."""
        return self._fields.get("reserved_bytes")

    @property
    def budget(self) -> int:
        """The budget, in bytes."""
        return int(self._fields.get("budget_bytes", 0))

    def __str__(self) -> str:
        return str(self._fields.get("text", ""))

    def __repr__(self) -> str:
        return f"Plan({self._fields!r})"


# ---------------------------------------------------------------------------------------
# tensors


class Tensor:
    """An array on disk, never loaded whole: its ``shape``, ``dtype`` (a numpy dtype),
    ``nbytes``, ``format`` and ``georef`` (GeoTIFF georeferencing, or None). Pass it to
    any operation. ``np.asarray(t)`` reads it whole, and refuses (``BudgetError``) when
    it is larger than the memory budget of the current options."""

    def __init__(self, source: dict, info: dict, report: Optional[RunReport] = None) -> None:
        self._source = source
        self._info = info
        #: The report of the run that wrote this tensor (None for an opened one).
        self.report = report

    @property
    def path(self) -> str:
        """The file (or Zarr store)."""
        return str(self._source["path"])

    @property
    def shape(self) -> tuple:
        """The shape."""
        return tuple(self._info["shape"])

    @property
    def dtype(self) -> np.dtype:
        """The element type, as a numpy dtype."""
        return _np_dtype(self._info["dtype"])

    @property
    def ndim(self) -> int:
        """The number of dimensions."""
        return len(self._info["shape"])

    @property
    def nbytes(self) -> int:
        """Bytes of the data (decoded)."""
        return int(self._info["nbytes"])

    @property
    def format(self) -> str:
        """``npy``, ``raw``, ``geotiff``, ``zarr``, ``hdf5``, ``netcdf3`` or ``jp2``."""
        return str(self._info["format"])

    @property
    def georef(self) -> Optional[dict]:
        """GeoTIFF (or GeoJP2) georeferencing (``geotransform``, ``epsg``, ``nodata``),
        or None."""
        return self._info.get("georef")

    @property
    def window(self) -> Optional[tuple]:
        """Where this tensor lies in its file's when it is a window of it (``t[a:b, c:d]``):
        a ``(start, stop)`` pair for each axis the window narrows from the last; None for
        the whole tensor."""
        w = self._source.get("window")
        return None if w is None else tuple((int(a), int(b)) for a, b in w)

    def __len__(self) -> int:
        return self.shape[0] if self.shape else 0

    def __getitem__(self, key: Any) -> "Tensor":
        """A box of this tensor (``t[1000:3000, 2000:4000]``, ``t[..., 1000:3000, 2000:4000]``
        for rows and columns of every band) as a Tensor of its own: nothing is read, and
        the operations given it read only the box (a COG's tiles or a Zarr store's chunks
        it touches). Slices of step 1 only; a GeoTIFF's georeferencing moves to the box's
        first pixel. ``np.asarray(t[...])`` reads the box."""
        if self._source.get("rows") is not None:
            raise ValueError("tilestream: a Tensor of a task's rows cannot be sliced again")
        key = key if isinstance(key, tuple) else (key,)
        if sum(k is Ellipsis for k in key) > 1:
            raise IndexError("tilestream: an index can only have a single ellipsis ('...')")
        if Ellipsis in key:
            at = key.index(Ellipsis)
            fill = self.ndim - (len(key) - 1)
            key = key[:at] + (slice(None),) * max(fill, 0) + key[at + 1:]
        if len(key) > self.ndim:
            raise IndexError(
                f"tilestream: too many indices for a tensor of {self.ndim} dimensions")
        key = key + (slice(None),) * (self.ndim - len(key))
        old = self.window or ()
        # the file's axis offsets where this tensor is already a window of it
        shift = [0] * (self.ndim - len(old)) + [a for a, _ in old]
        ranges = []
        for axis, (k, n) in enumerate(zip(key, self.shape)):
            if not isinstance(k, slice):
                raise TypeError(
                    f"tilestream: a Tensor is sliced with start:stop ranges, not "
                    f"{type(k).__name__} (axis {axis}: to keep one index i, give i:i+1)")
            start, stop, step = k.indices(n)
            if step != 1:
                raise ValueError(
                    f"tilestream: slices of a Tensor have step 1 (axis {axis} has {step})")
            stop = max(stop, start)
            ranges.append((shift[axis] + start, shift[axis] + stop))
        # leading axes kept whole are left out of the window
        lead = 0
        while (lead < len(ranges) - len(old) and ranges[lead] == (0, self.shape[lead])):
            lead += 1
        source = {**self._source, "window": [list(r) for r in ranges[lead:]]}
        if not source["window"]:
            source.pop("window")
        return Tensor(source, json.loads(_ts.info(json.dumps(source))))

    def __repr__(self) -> str:
        w = f", window={self.window}" if self.window else ""
        return (f"Tensor({self.path!r}, shape={self.shape}, dtype={self.dtype}, "
                f"format={self.format!r}{w})")

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        budget = _budget_bytes(_OPTIONS["memory"])
        if self.nbytes > budget:
            raise BudgetError(
                f"tilestream: reading {self.path} whole needs {self.nbytes} bytes, more than "
                f"the memory budget of {budget} bytes; use ts.read(t, rows=...) or "
                "ts.iter_tiles(t), or raise it with ts.set_options(memory=...)",
                self.nbytes,
            )
        a = read(self)
        return a if dtype is None else a.astype(dtype, copy=False)


def _budget_bytes(memory: Any) -> int:
    return memory if isinstance(memory, int) else _ts.parse_size(str(memory))


def _mapped_file(addr: int) -> Optional[tuple]:
    """The (device, inode) of the file mapped at ``addr`` in this process, from
    ``/proc/self/maps``; None where that cannot be read (not Linux)."""
    try:
        with builtins.open("/proc/self/maps") as f:
            for line in f:
                parts = line.split(maxsplit=5)
                lo, hi = (int(v, 16) for v in parts[0].split("-"))
                if lo <= addr < hi:
                    major, minor = (int(v, 16) for v in parts[3].split(":"))
                    return (os.makedev(major, minor), int(parts[4]))
    except (OSError, ValueError, IndexError):
        return None
    return None


def _memmap_source(a: np.memmap) -> dict:
    """The file, offset, shape and dtype of an np.memmap (also a slice of one: its
    ``offset`` is its parent's, so the offset is worked out from the data pointer)."""
    if not a.flags["C_CONTIGUOUS"]:
        raise ValueError(
            "tilestream: this memmap is not C-contiguous (a strided slice); open the file "
            "itself, or pass a contiguous slice"
        )
    base = a
    while isinstance(getattr(base, "base", None), np.memmap):
        base = base.base
    m = getattr(base, "_mmap", None)
    if m is None or getattr(a, "filename", None) is None:
        raise ValueError("tilestream: this memmap has no file behind it")
    if getattr(base, "mode", None) == "c":
        raise ValueError(
            "tilestream: a copy-on-write memmap (mode='c') may hold changes its file does not, "
            "and tilestream reads the file: open it with mode='r' or 'r+', or np.save the array"
        )
    # np.memmap maps from the offset rounded down to the allocation granularity
    start = base.offset - base.offset % mmap.ALLOCATIONGRANULARITY
    mm_addr = np.frombuffer(m, dtype=np.uint8).ctypes.data
    mapped = _mapped_file(mm_addr)
    if mapped is not None:
        st = os.stat(a.filename)
        # on the same device, another inode is another file (where the devices differ,
        # as overlay file systems report them, this cannot be told and is not refused)
        if st.st_dev == mapped[0] and st.st_ino != mapped[1]:
            raise ValueError(
                f"tilestream: {a.filename} was replaced since this memmap was made: tilestream "
                "would read the new file, not the memmap's; make the memmap again"
            )
    offset = start + (a.ctypes.data - mm_addr)
    return {
        "path": os.fspath(a.filename),
        "raw": {"shape": list(a.shape), "dtype": _ts_dtype(a.dtype), "offset": int(offset)},
    }


def open(
    path: Union[PathLike, np.memmap],
    *,
    shape: Optional[tuple] = None,
    dtype: Any = None,
    offset: int = 0,
) -> Tensor:
    """Opens an on-disk array without reading it: a ``.npy`` file, a GeoTIFF, a Zarr v3
    store, an ``np.memmap`` (also a contiguous slice of one), or raw data when ``shape``
    and ``dtype`` are given (starting ``offset`` bytes into the file).

    Raises ``FileNotFoundError`` if it does not exist, ``ValueError`` if it is not a
    format tilestream reads exactly (with a message naming what)."""
    if isinstance(path, np.memmap):
        source = _memmap_source(path)
    elif shape is not None or dtype is not None:
        if shape is None or dtype is None:
            raise ValueError("tilestream: a raw file needs both shape= and dtype=")
        source = {
            "path": os.fspath(path),
            "raw": {"shape": [int(s) for s in shape], "dtype": _ts_dtype(dtype), "offset": int(offset)},
        }
    else:
        if isinstance(path, np.ndarray):
            raise TypeError(
                "tilestream: an in-memory array is already loaded; save it (np.save) or "
                "pass an np.memmap"
            )
        source = {"path": os.fspath(path)}
    if source.get("raw") and not source["raw"].get("offset"):
        source["raw"].pop("offset", None)
    return Tensor(source, json.loads(_ts.info(json.dumps(source))))


def _source(x: Any) -> dict:
    if isinstance(x, Tensor):
        return x._source
    if isinstance(x, np.memmap):
        return _memmap_source(x)
    if isinstance(x, (str, os.PathLike)):
        return {"path": os.fspath(x)}
    raise TypeError(
        f"tilestream: expected a Tensor, a path or an np.memmap, not {type(x).__name__}"
    )


# ---------------------------------------------------------------------------------------
# operations


def _execute(spec: dict, out: Optional[PathLike], kw: dict) -> Any:
    """Plans (``_plan=True``) or runs ``spec`` with the call's options."""
    plan_only = kw.pop("_plan", False)
    progress = kw.pop("progress", None)
    resume = kw.pop("resume", False)
    opts = _opts(resume=resume, **kw)
    if plan_only:
        try:
            fields = json.loads(_ts.plan_spec(json.dumps(spec), opts))
        except BudgetError as e:
            return Plan({"fits": False, "text": str(e), "smallest": e.smallest,
                         "budget_bytes": _budget_bytes(json.loads(opts)["memory"])})
        fields["fits"] = True
        return Plan(fields)
    report = RunReport(json.loads(_ts.run_spec(json.dumps(spec), opts, _progress(progress))))
    if out is None:
        return report
    t = open(out)
    t.report = report
    return t


_COMMON = {"memory", "threads", "device", "progress", "resume", "_plan", "format",
           "tiff_compress", "tiff_predictor", "cog", "overviews", "overview_resampling",
           "zarr_compress", "zarr_chunks", "zarr_shard"}


def _check_kw(fn: str, kw: dict) -> None:
    unknown = set(kw) - _COMMON
    if unknown:
        raise TypeError(f"tilestream.{fn}() got unexpected keyword argument(s) {sorted(unknown)}")


def _with_nodata(src: Dict[str, Any], nodata: Any) -> Dict[str, Any]:
    """``src`` with ``nodata`` (a number, ``"nan"``, ``"none"``) in place of its file's
    nodata value; unchanged for ``None``."""
    if nodata is None:
        return src
    return {**src, "nodata": _nodata_text(nodata, "nodata")}


def _nodata_text(nodata: Any, what: str) -> str:
    """A nodata value as the spec's text (``"nan"``, ``"-9999"``)."""
    if isinstance(nodata, bool) or not isinstance(nodata, (int, float, str, np.number)):
        raise TypeError(f"{what} must be a number or a string such as 'nan', not "
                        f"{type(nodata).__name__}")
    if isinstance(nodata, str):
        return nodata
    if isinstance(nodata, (float, np.floating)):
        return repr(float(nodata))
    return str(int(nodata))


def _nodata_spec(nodata: Any, ignore_nodata: Any,
                 input_nodata: Optional[Mapping[str, Any]] = None) -> Dict[str, Any]:
    """The nodata fields of a map or affine spec."""
    if not isinstance(ignore_nodata, (bool, np.bool_)):
        raise TypeError(f"ignore_nodata must be True or False, not {type(ignore_nodata).__name__}")
    out: Dict[str, Any] = {"ignore_nodata": bool(ignore_nodata)}
    if nodata is not None:
        out["nodata"] = _nodata_text(nodata, "nodata")
    if input_nodata:
        out["input_nodata"] = [
            [name, None if v is None else _nodata_text(v, f"input_nodata[{name!r}]")]
            for name, v in input_nodata.items()
        ]
    return out


def plan(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Plan:
    """What ``fn(*args, **kwargs)`` would do (tiles, tile shape, peak memory against the
    budget), without running it: ``ts.plan(ts.stencil, x, "g.npy", "gaussian:sigma=2",
    memory="64MiB")``."""
    if fn is reduce:
        t, op = args[0], (args[1] if len(args) > 1 else kwargs.pop("op", "sum"))
        axis = args[2] if len(args) > 2 else kwargs.pop("axis", None)
        ddof = kwargs.pop("ddof", 0)
        kwargs.pop("report", None)
        keepdims = kwargs.pop("keepdims", False)
        q, method = kwargs.pop("q", None), kwargs.pop("method", None)
        if q is not None and np.ndim(q) > 0:
            q = [float(v) for v in np.asarray(q, dtype=np.float64).ravel()]
        ndim = t.ndim if isinstance(t, Tensor) else open(_source(t)["path"]).ndim
        axes = _axes(axis, ndim)
        # the result is an array: the plan is made for a .npy that does not exist
        with tempfile.TemporaryDirectory() as d:
            spec = _specs.reduce(_source(t), os.path.join(d, "result.npy"), op, ddof=ddof,
                                 axis=axes, keepdims=keepdims, q=q, method=method)
            return _execute(spec, None, dict(kwargs, _plan=True))
    return fn(*args, _plan=True, **kwargs)


def run(pipeline: PathLike, *, dry_run: bool = False, memory: Any = None,
        threads: Optional[int] = None, device: Optional[str] = None,
        progress: Any = None, inputs: Optional[Mapping[str, PathLike]] = None,
        outputs: Optional[Mapping[str, PathLike]] = None) -> Any:
    """Runs a pipeline file (``tilestream run``): a list of RunReports, one per step; with
    ``dry_run=True``, the plan as text. The file's ``memory`` applies unless ``memory=``
    is given. ``inputs``/``outputs`` (name -> path) replace the files the pipeline names,
    to run the same steps on other data."""
    o = json.loads(_opts(memory, threads, device))
    if memory is None:
        o["memory"] = None
    ins = [(k, os.fspath(v)) for k, v in (inputs or {}).items()]
    outs = [(k, os.fspath(v)) for k, v in (outputs or {}).items()]
    out = _ts.run_pipeline(os.fspath(pipeline), json.dumps(o), dry_run, _progress(progress),
                           ins, outs)
    return out if dry_run else [RunReport(r) for r in json.loads(out)]


# ---------------------------------------------------------------------------------------
# reading and the operations (defined in _read.py, _reduce.py, _ops.py and _blocks.py,
# which use the helpers above)

from ._read import iter_tiles, read  # noqa: E402
from ._reduce import _axes, _histogram_bins, _histogram_run, _keep, histogram, reduce  # noqa: E402
from . import _ops  # noqa: E402
from ._ops import *  # noqa: E402,F401,F403 (the operations writing a file: _ops.__all__)
from ._blocks import map_blocks, map_overlap  # noqa: E402
from ._reduce_blocks import reduce_blocks  # noqa: E402

__all__ += _ops.__all__

# batches for a training loop (defined in _batches.py)

from ._batches import Batches, batches  # noqa: E402
