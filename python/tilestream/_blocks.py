"""Your own function over arrays larger than memory: ``map_blocks``, ``map_overlap`` and
``reduce_blocks``.

The engine cuts the inputs' rows and columns into blocks that fit the budget with the
function's working memory counted, reads each block (with its halo) on its own threads
while the function runs on the one before, and writes what the function returns, under
the same guarantees as the built-in operations: atomic outputs, ``resume=True`` after a
crash, Ctrl-C, progress. The function is called with the GIL held; everything else runs
without it.

**Calls at once.** ``threads=None`` (the default) calls the function on one block at a
time, in plan order: right for a function that holds the GIL (pure Python, most of
scipy.ndimage), which gains nothing from more. ``threads=n`` runs ``n`` calls at once,
each on its own block, and as many engine threads: worth it for a function that spends
its time with the GIL released (numpy on large arrays, numba ``nogil``, PyTorch). The
plan then holds ``n`` padded blocks and ``n`` working memories, so the blocks are
smaller; results are written in plan order and partials of ``reduce_blocks`` combined in
block order, so the output is the same with any ``threads``.

**Working memory.** ``working=`` declares what the function allocates besides its
blocks: a number is a multiple of the bytes of the padded blocks it is given (all
inputs together), a size (``"64MiB"`` or an int) a fixed amount. Left out, the function
is first called on a small block while ``tracemalloc`` measures what it allocated
(numpy's arrays are counted; memory a library allocates outside Python's allocators,
such as PyTorch's, is not), and the run is planned with that multiple. Each call is
measured the same way during the run: a block that allocates more than the plan holds
for it stops the run after that block with a :class:`BudgetError` naming the figure to
declare, and nothing is written at the output.

**GPU functions.** ``pinned=True`` (or ``"cuda:N"``) gathers the blocks into page-locked
host memory of that device's driver, so that a function copying its block to the GPU
(``torch.from_numpy(b).to("cuda", non_blocking=True)``, ``cupy.asarray`` on a stream) makes
a real asynchronous copy at the bus's full rate. The memory is the padded blocks' the plan
holds anyway, allocated once when the run starts, visible to every CUDA context of the
process; tilestream allocates no device memory, so the framework's allocator has the GPU
to itself. The block's memory is reused when the function returns: a function must not
return before its copies from the block are done (returning a host array, as
``t.cpu().numpy()`` does, waits for them). Refused in one line where no CUDA device can be
used.
"""

from __future__ import annotations

import json
import math
import os
import threading
import tracemalloc
from typing import Any, Callable, List, Optional, Sequence, Tuple

import numpy as np

from . import _tilestream as _ts

#: The most a first, measured block holds along each axis.
_PROBE_SIDE = 256
#: The safety factor on a measured working memory.
_MARGIN = 1.25
#: Default bytes of input of one block of ``reduce_blocks`` (the grid depends on the
#: data's shape alone, never on the budget).
_LEAF_BYTES = 256 << 10
#: Partials combined at once by ``reduce_blocks``.
_GROUP = 16
#: Bytes a call may allocate besides what scales with its block (Python's own objects,
#: a library's small buffers): held in every plan, so a measurement's noise never stops a
#: run.
_SLACK = 64 << 10
#: The most a call may go past the plan once (see ``_Over``): what other threads of the
#: process allocate while it runs.
_NOISE = 1 << 20

_BOUNDARIES = ("reflect", "nearest", "constant", "wrap", "none")


def _name(fn: Any) -> str:
    mod = getattr(fn, "__module__", None) or ""
    qual = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or type(fn).__name__
    return f"{mod}.{qual}" if mod and mod != "builtins" else str(qual)


def _measured(fn: Callable[..., Any], args: Sequence[Any]) -> Tuple[Any, int]:
    """Calls ``fn(*args)``; returns its result and the peak bytes allocated through
    Python's allocators during the call (numpy's arrays included)."""
    was = tracemalloc.is_tracing()
    if was:
        base = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
    else:
        base = 0
        tracemalloc.start()
    try:
        res = fn(*args)
        peak = tracemalloc.get_traced_memory()[1] - base
    finally:
        if not was:
            tracemalloc.stop()
    return res, max(0, int(peak))


class _Watch:
    """Measures what the function allocates: on each call when calls run one at a time;
    when several run at once (tracemalloc counts the whole process), over each stretch
    of time in which any runs, against what the plan holds for all of them. A watch of
    several calls is entered around the whole run: tracemalloc is started before the
    first call and stopped after the last, never while a call may be freeing memory on
    another thread (CPython's tracemalloc is not safe against that)."""

    def __init__(self, calls: int) -> None:
        self.calls = calls
        self.lock = threading.Lock()
        self.active = 0
        self.base = 0
        self.started = False

    def __enter__(self) -> "_Watch":
        if self.calls > 1 and not tracemalloc.is_tracing():
            tracemalloc.start()
            self.started = True
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.started:
            tracemalloc.stop()
            self.started = False

    def run(self, fn: Callable[..., Any], args: Sequence[Any]) -> Tuple[Any, int]:
        if self.calls == 1:
            return _measured(fn, args)
        with self.lock:
            if self.active == 0:
                self.base = tracemalloc.get_traced_memory()[0]
                tracemalloc.reset_peak()
            self.active += 1
        try:
            res = fn(*args)
        finally:
            with self.lock:
                peak = tracemalloc.get_traced_memory()[1] - self.base
                self.active -= 1
        return res, max(0, int(peak))


def _calls(threads: Any) -> int:
    """The calls of the function at once ``threads=`` asks for (None: one)."""
    if threads is None:
        return 1
    if isinstance(threads, bool) or not isinstance(threads, (int, np.integer)) or threads < 1:
        raise ValueError(f"tilestream: threads={threads!r} is not a number of threads (1 or more)")
    return int(threads)


def _pinned(pinned: Any) -> Optional[int]:
    """The CUDA device whose driver page-locks the blocks ``pinned=`` asks for (None: plain
    memory)."""
    if pinned is None or pinned is False:
        return None
    if pinned is True:
        return 0
    if isinstance(pinned, (int, np.integer)) and not isinstance(pinned, bool) and pinned >= 0:
        return int(pinned)
    if isinstance(pinned, str):
        s = pinned.strip().lower()
        if s in ("cuda", "gpu"):
            return 0
        if s.startswith("cuda:") and s[5:].isdigit():
            return int(s[5:])
    raise ValueError(
        f"tilestream: pinned={pinned!r} is not True, False, a device number or \"cuda:N\""
    )


def _arrays(inputs: list) -> list:
    """The blocks as read-only numpy arrays over the engine's buffers (no copy). They are
    valid for the call only: a function that keeps one (or a view of one) past its call
    stops the run, and is told to keep a copy."""
    from . import _np_dtype

    return [np.asarray(m).view(_np_dtype(d)).reshape(s) for m, d, s in inputs]


def _note(e: BaseException, index: int, tile: tuple) -> None:
    (r0, r1), (c0, c1) = tile
    if hasattr(e, "add_note"):
        e.add_note(f"tilestream: raised on block {index} (rows {r0}:{r1}, columns {c0}:{c1})")


class _Inputs:
    """The inputs of a call: their sources, shapes, dtypes and the grid they share."""

    def __init__(self, inputs: Sequence[Any]) -> None:
        from . import Tensor, _source, open as ts_open

        if not inputs:
            raise TypeError("tilestream: give at least one input array")
        self.sources = [_source(x) for x in inputs]
        self.tensors = [x if isinstance(x, Tensor) else ts_open(x) for x in inputs]
        t0 = self.tensors[0]
        if not 1 <= t0.ndim <= 3:
            raise ValueError(
                f"tilestream: a function over blocks takes arrays of rank 1 to 3; {t0.path} "
                f"has shape {t0.shape}"
            )
        self.ndim = t0.ndim
        self.grid = (t0.shape[0], 1) if t0.ndim == 1 else tuple(t0.shape[-2:])
        # bytes of one position (one row of a 1-D array), every band of every input
        self.pixel = sum(
            (t.shape[0] if t.ndim == 3 else 1) * t.dtype.itemsize for t in self.tensors
        )

    def json(self) -> List[str]:
        return [json.dumps(s) for s in self.sources]

    def halo(self, halo: Any) -> Tuple[int, int]:
        """``halo=`` as (rows, columns): an int for every spatial axis, or one per axis."""
        if isinstance(halo, (int, np.integer)) and not isinstance(halo, bool):
            h = int(halo)
            hs = (h, 0) if self.ndim == 1 else (h, h)
        else:
            try:
                seq = [int(h) for h in halo]
            except TypeError:
                raise TypeError(
                    f"tilestream: halo must be an int or one int per axis, not {halo!r}"
                ) from None
            if len(seq) != self.ndim:
                raise ValueError(
                    f"tilestream: halo={tuple(seq)} gives {len(seq)} axes for arrays of "
                    f"{self.ndim}"
                )
            if self.ndim == 3 and seq[0] != 0:
                raise ValueError(
                    "tilestream: the leading (bands) axis is whole in every block: its halo "
                    "is 0"
                )
            hs = (seq[0], 0) if self.ndim == 1 else (seq[-2], seq[-1])
        if min(hs) < 0:
            raise ValueError(f"tilestream: halo={halo!r} is negative")
        return hs

    def probe_side(self, halo: Tuple[int, int], budget: int) -> Tuple[int, int]:
        """The first block to measure the function on: at most 256 x 256, small enough
        that eight times its padded bytes fit in the budget."""
        side = _PROBE_SIDE
        while side > 8 and (side + 2 * halo[0]) * (side + 2 * halo[1]) * self.pixel * 8 > budget:
            side //= 2
        rows = min(self.grid[0], side)
        cols = 1 if self.ndim == 1 else min(self.grid[1], side)
        return max(rows, 1), max(cols, 1)


def _working(working: Any) -> Optional[dict]:
    """``working=`` as the engine's figures, or None to measure it."""
    if working is None:
        return None
    if isinstance(working, bool):
        raise TypeError("tilestream: working must be a multiple of the block or a size")
    if isinstance(working, float):
        if not math.isfinite(working) or working < 0:
            raise ValueError(f"tilestream: working={working!r} is not a multiple of the block")
        return {"per_block": 1.0 + working, "per_out": 2.0, "bytes": _SLACK}
    if isinstance(working, (int, np.integer)):
        if working < 0:
            raise ValueError(f"tilestream: working={working!r} is negative")
        return {"per_block": 1.0, "per_out": 2.0, "bytes": int(working) + _SLACK}
    if isinstance(working, str):
        return {"per_block": 1.0, "per_out": 2.0, "bytes": _ts.parse_size(working) + _SLACK}
    raise TypeError(
        f"tilestream: working must be a multiple of the block (a float) or a size, not "
        f"{working!r}"
    )


def _allowed(working: dict, block_bytes: int) -> int:
    """What the plan holds for the function on a block of ``block_bytes`` (its padded
    inputs): the declared or measured multiple (less the copy the engine hands over,
    which the function does not allocate) and the fixed bytes."""
    return int((working["per_block"] - 1.0) * block_bytes) + working["bytes"]


class _Over:
    """Which calls went past what the plan holds for them. tracemalloc counts the whole
    process, so what other threads allocate while the function runs (a Dask client's,
    a notebook's) counts too: a call past the plan by at most ``_NOISE`` stops the run
    only when the call before it went past it as well; by more, at once."""

    def __init__(self) -> None:
        self.last = False

    def fits(self, excess: int) -> bool:
        if excess <= 0:
            self.last = False
            return True
        if excess <= _NOISE and not self.last:
            self.last = True
            return True
        return False


def _check_working(name: str, used: int, block_bytes: int, working: dict, index: Any,
                   declared: Any, over: _Over, calls: int = 1, out_bytes: int = 0) -> None:
    """Refuses a call that allocated more than the plan holds for its block (as ``over``
    rules), naming the ``working=`` to declare. With ``calls`` at once, ``used`` is what
    they allocated together (the blocks handed over and the results copied back
    included), held against ``calls`` times what the plan holds for one."""
    if calls > 1:
        one = _allowed(working, block_bytes) + block_bytes + int(working["per_out"] * out_bytes)
        if over.fits(used - calls * one):
            return
        used //= calls
    elif over.fits(used - _allowed(working, block_bytes)):
        return
    from . import BudgetError

    # the function's own part of a call: at once, less the block and result handed over
    own = used - block_bytes - working["per_out"] * out_bytes if calls > 1 else used
    need = own / max(block_bytes, 1)
    what = f"declares (working={declared!r})" if declared is not None else \
        "was measured at on the first block"
    raise BudgetError(
        f"tilestream: {name} allocated {used} bytes on block {index}"
        f"{f' (each of {calls} calls at once)' if calls > 1 else ''}, {need:.1f}x its padded "
        f"blocks of {block_bytes} bytes, more than the plan {what}: declare "
        f"working={math.ceil(need * _MARGIN * 10) / 10} (or a size in bytes)"
    )


def _call_block(watch: _Watch, fn: Callable[..., Any], inputs: list, index: int,
                tile: tuple) -> Tuple[list, Any, int, int]:
    """Calls ``fn`` on a block as the engine hands it over: the arrays, what ``fn``
    returned, the bytes it allocated (as ``watch`` measures) and the bytes it was given.
    An exception gets a note naming the block."""
    arrays = _arrays(inputs)
    try:
        res, used = watch.run(fn, arrays)
    except BaseException as e:
        _note(e, index, tile)
        raise
    return arrays, res, used, sum(a.nbytes for a in arrays)


def _result(a: np.ndarray, index: int, name: str, dtype: np.dtype, want: tuple,
            keep: tuple) -> np.ndarray:
    """The block's part (``keep``, the halo trimmed) of the function's result ``a``, ``a``
    being of shape ``want`` and of a dtype that casts to ``dtype`` as numpy calls
    same-kind; anything else is refused."""
    if a.shape != tuple(want):
        raise ValueError(
            f"tilestream: {name} returned shape {a.shape} for block {index}; the block needs "
            f"{tuple(want)}"
        )
    if a.dtype != dtype and not np.can_cast(a.dtype, dtype, "same_kind"):
        raise TypeError(
            f"tilestream: {name} returned {a.dtype} for block {index}, which does not "
            f"cast to the output's {dtype}: give dtype= or return {dtype}"
        )
    return a[(Ellipsis,) + keep]


class _Call:
    """The callback the engine calls for each block, for a map: runs the function under
    the memory watch, checks its result, trims the halo and writes it into the output
    slot's view."""

    def __init__(self, fn: Callable[..., Any], name: str, working: dict, declared: Any,
                 out_dtype: np.dtype, lead: tuple, probe: bool = False, calls: int = 1) -> None:
        self.fn, self.name, self.working, self.declared = fn, name, working, declared
        self.out_dtype, self.lead, self.probe = out_dtype, lead, probe
        self.watch = _Watch(calls)
        self.over = _Over()
        self.first: Optional[tuple] = None

    def __call__(self, index: int, count: int, tile: tuple, inner: tuple, inputs: list,
                 out_shape: Optional[tuple], out: Any = None) -> None:
        arrays, res, used, block_bytes = _call_block(self.watch, self.fn, inputs, index, tile)
        if self.probe:
            # what the result is, never the result: it may be a view of the block
            try:
                a = np.asarray(res)
                meta = (a.shape, a.dtype)
            except (ValueError, TypeError):  # a reduction's partial need not be an array
                meta = (None, None)
            self.first = (meta, used, block_bytes, arrays[0].shape)
            return None
        out_bytes = math.prod(out_shape or ()) * self.out_dtype.itemsize
        _check_working(self.name, used, block_bytes, self.working, index, self.declared,
                       self.over, self.watch.calls, out_bytes)
        (r0, r1), (c0, c1) = tile
        iy, ix = inner
        padded = arrays[0].shape[-1:] if len(arrays[0].shape) == 1 else arrays[0].shape[-2:]
        a = _result(np.asarray(res), index, self.name, self.out_dtype,
                    self.lead + tuple(padded),
                    (slice(iy, iy + (r1 - r0)),) if len(padded) == 1
                    else (slice(iy, iy + (r1 - r0)), slice(ix, ix + (c1 - c0))))
        dst = np.asarray(out).view(self.out_dtype).reshape(out_shape)
        try:
            np.copyto(dst, a, casting="unsafe")  # the cast was checked by _result
        finally:
            del dst  # the view ends with the call, even when the copy raised
        return None


def _opts_of(memory: Any, threads: Any, resume: bool, kw: dict) -> str:
    from . import _opts

    return _opts(memory, threads, None, resume=resume, **kw)


def _budget_of(opts: str) -> int:
    from . import _budget_bytes

    return _budget_bytes(json.loads(opts)["memory"])


def _probe(fn: Callable[..., Any], name: str, ins: _Inputs, req: dict, opts: str,
           side: Tuple[int, int]) -> tuple:
    """Calls ``fn`` on one block of ``side`` at the origin, through the engine (the same
    padding as the run): its result, the bytes it allocated, the padded bytes it was
    given and their shape."""
    probe = _Call(fn, name, {}, None, np.dtype("u1"), (), probe=True)
    # plain memory: a measurement needs no GPU (a Dask client measures for its workers)
    first = dict(req, block=list(side), first=True, calls=1, pinned=None,
                 working={"per_block": 0.0, "per_out": 0.0, "bytes": 0})
    _ts.run_blocks(ins.json(), json.dumps(first), "null", probe, opts)
    if probe.first is None:
        raise ValueError("tilestream: the inputs are empty: there is no block to run")
    return probe.first


def _measure(fn: Callable[..., Any], name: str, ins: _Inputs, req: dict,
             opts: str) -> Tuple[Any, dict, int, int, tuple]:
    """Measures ``fn`` on a first block and on one a quarter of its size: the shape and
    dtype of its result on the first, the working memory fitted to both (a multiple of the padded block and a
    fixed part, each with a margin), and what the first block used and was given."""
    side = ins.probe_side(tuple(req["halo"]), _budget_of(opts))
    opts = json.dumps(dict(json.loads(opts), resume=False))
    res, used, block_bytes, shape = _probe(fn, name, ins, req, opts, side)
    small = (max(1, side[0] // 2), max(1, side[1] // 2))
    per, fixed = used / max(block_bytes, 1), 0.0
    if small != side:
        _, used2, bytes2, _ = _probe(fn, name, ins, req, opts, small)
        if block_bytes > bytes2:
            per = max(0.0, (used - used2) / (block_bytes - bytes2))
            fixed = max(0.0, used - per * block_bytes, used2 - per * bytes2)
    work = {"per_block": 1.0 + per * _MARGIN, "per_out": 2.0,
            "bytes": int(fixed * _MARGIN) + _SLACK}
    return res, work, used, block_bytes, shape


class _Prepared:
    """A map ready to run: the inputs, the request to the engine (the working memory
    measured or declared), the output's JSON, and the callback's figures."""

    def __init__(self, ins: _Inputs, name: str, req: dict, opts: str, declared: Any,
                 out_dtype: np.dtype, lead: tuple, out: dict) -> None:
        self.ins, self.name, self.req, self.opts = ins, name, req, opts
        self.declared, self.out_dtype, self.lead, self.out = declared, out_dtype, lead, out

    def call(self, fn: Callable[..., Any], probe: bool = False) -> "_Call":
        return _Call(fn, self.name, self.req["working"], self.declared, self.out_dtype,
                     self.lead, probe=probe, calls=self.req["calls"])


def _prepare(fn: Callable[..., Any], inputs: Sequence[Any], out: Any, halo: Any,
             boundary: str, cval: float, dtype: Any, shape: Any, block: Any, working: Any,
             memory: Any, threads: Any, resume: bool, pinned: Any, kw: dict) -> _Prepared:
    """Checks a map's arguments, measures ``fn`` on a first block (unless ``working=``
    says), and works out the output's shape and dtype."""
    from . import _ts_dtype, _np_dtype

    if not callable(fn):
        raise TypeError(f"tilestream: fn must be callable, not {type(fn).__name__}")
    if out is None:
        raise TypeError("tilestream: give out=, the file the results are written to")
    if boundary not in _BOUNDARIES:
        raise ValueError(
            f"tilestream: boundary={boundary!r} is not one of {', '.join(map(repr, _BOUNDARIES))}"
        )
    ins = _Inputs(inputs)
    name = _name(fn)
    hr, hc = ins.halo(halo)
    calls = _calls(threads)
    req = {"halo": [hr, hc], "edges": boundary, "cval": float(cval), "what": name,
           "block": None, "first": False, "calls": calls, "pinned": _pinned(pinned)}
    if block is not None:
        b = [int(x) for x in (block if not isinstance(block, int) else (block, block))]
        b = b[-2:] if ins.ndim > 1 else [b[0], 1]
        req["block"] = b
    opts = _opts_of(memory, threads, resume, kw)
    declared = working
    work = _working(working)
    res, measured, used, block_bytes, in_shape = _measure(fn, name, ins, req, opts)
    if work is None:
        work = measured
    _check_working(name, used, block_bytes, work, 0, declared, _Over())
    # the output: the function's dtype and band count unless declared
    first_shape, first_dtype = res
    if first_shape is None:
        raise TypeError(f"tilestream: {name} returned what numpy cannot make an array of")
    padded = in_shape[-1:] if ins.ndim == 1 else in_shape[-2:]
    if first_shape[-len(padded):] != tuple(padded) or len(first_shape) > len(padded) + 1:
        raise ValueError(
            f"tilestream: {name} returned shape {first_shape} for a block of "
            f"{tuple(in_shape)}: a map keeps the blocks' "
            f"{'length' if ins.ndim == 1 else 'rows and columns'} (a leading axis of bands "
            f"may change)"
        )
    lead = tuple(first_shape[:-len(padded)])
    out_dtype = np.dtype(dtype) if dtype is not None else first_dtype
    grid = (ins.grid[0],) if ins.ndim == 1 else ins.grid
    out_shape = tuple(int(s) for s in shape) if shape is not None else lead + tuple(grid)
    if tuple(out_shape[-len(grid):]) != tuple(grid) or len(out_shape) > len(grid) + 1:
        raise ValueError(
            f"tilestream: shape={out_shape} must end with the inputs' "
            f"{'length' if ins.ndim == 1 else 'rows and columns'} {tuple(grid)}"
        )
    if shape is not None and tuple(out_shape[:-len(grid)]) != lead:
        raise ValueError(
            f"tilestream: shape={out_shape} but {name} returned {lead + tuple(padded)} for "
            f"a block of {tuple(in_shape)}"
        )
    ts_name = _ts_dtype(out_dtype)
    req["working"] = work
    o = {"path": os.fspath(out), "shape": list(out_shape), "dtype": ts_name}
    return _Prepared(ins, name, req, opts, declared, _np_dtype(ts_name), lead, o)


def _map(fn: Callable[..., Any], inputs: Sequence[Any], out: Any, halo: Any, boundary: str,
         cval: float, dtype: Any, shape: Any, block: Any, working: Any, memory: Any,
         threads: Any, resume: bool, progress: Any, pinned: Any, kw: dict) -> Any:
    from . import RunReport, _progress, Plan, BudgetError
    from . import open as ts_open

    plan_only = kw.pop("_plan", False)
    p = _prepare(fn, inputs, out, halo, boundary, cval, dtype, shape, block, working, memory,
                 threads, resume, pinned, kw)
    o = json.dumps(p.out)
    if plan_only:
        try:
            fields = json.loads(_ts.plan_blocks(p.ins.json(), json.dumps(p.req), o, p.opts))
        except BudgetError as e:
            return Plan({"fits": False, "text": str(e), "smallest": e.smallest,
                         "budget_bytes": _budget_of(p.opts)})
        fields["fits"] = True
        return Plan(fields)
    call = p.call(fn)
    key = json.dumps({"fn": p.name, "req": {k: v for k, v in p.req.items()
                                            if k not in ("working", "calls", "pinned")},
                      "out": p.out}, sort_keys=True)
    with call.watch:
        report = RunReport(json.loads(
            _ts.run_blocks(p.ins.json(), json.dumps(p.req), o, call, p.opts,
                           _progress(progress), key)
        ))
    t = ts_open(out)
    t.report = report
    return t


def map_blocks(fn: Callable[..., Any], *inputs: Any, out: Any = None, dtype: Any = None,
               shape: Optional[tuple] = None, block: Any = None, memory: Any = None,
               threads: Optional[int] = None, resume: bool = False, progress: Any = None,
               working: Any = None, pinned: Any = False, **kw: Any) -> Any:
    """Calls ``fn(*blocks)`` on aligned blocks of ``inputs`` (on-disk arrays of rank 1 to
    3 sharing their rows and columns; each block a read-only numpy array, every band of a
    ``(bands, rows, cols)`` input) and writes what it returns into ``out`` (any format
    tilestream writes). The output has the inputs' rows and columns, ``fn``'s dtype and
    leading axis unless ``dtype=``/``shape=`` say otherwise (a model mapping a
    ``(4, H, W)`` scene to ``(10, H, W)`` class scores). ``block=(rows, cols)`` fixes the
    block shape; otherwise the planner chooses from ``memory``. ``working=`` is the
    function's working memory (see the module's notes); ``pinned=True`` (or ``"cuda:N"``)
    gives the blocks in page-locked memory for a function that copies them to a GPU (see
    the module's notes). Returns the output Tensor."""
    return _map(fn, inputs, out, 0, "reflect", 0.0, dtype, shape, block, working, memory,
                threads, resume, progress, pinned, kw)


def map_overlap(fn: Callable[..., Any], *inputs: Any, out: Any = None, halo: Any = 1,
                boundary: str = "reflect", cval: float = 0.0, dtype: Any = None,
                shape: Optional[tuple] = None, block: Any = None, memory: Any = None,
                threads: Optional[int] = None, resume: bool = False, progress: Any = None,
                working: Any = None, pinned: Any = False, **kw: Any) -> Any:
    """:func:`map_blocks` with ``halo`` rows and columns read around each block (an int,
    or one per axis) and trimmed from what ``fn`` returns, so that the output equals
    ``fn`` on the whole array wherever ``fn`` looks at most ``halo`` positions away.
    Past the edges the halo is made up as ``scipy.ndimage`` names it (``"reflect"``,
    ``"nearest"``, ``"constant"`` with ``cval``, ``"wrap"``), or left out (``"none"``:
    blocks at the edges are smaller)::

        ts.map_overlap(lambda b: scipy.ndimage.gaussian_filter(b, 2), "scene.tif",
                       out="smooth.tif", halo=8, memory="256MiB")
    """
    return _map(fn, inputs, out, halo, boundary, cval, dtype, shape, block, working, memory,
                threads, resume, progress, pinned, kw)


# ---------------------------------------------------------------------------------------
# a pipeline's `function` steps


def _resolve(name: str) -> Callable[..., Any]:
    """The function ``module:function`` names (``function`` may be dotted:
    ``module:Class.method``)."""
    import importlib

    module, sep, attr = name.partition(":")
    if not sep or not module or not attr:
        raise ValueError(
            f"tilestream: function = {name!r} is not module:function (say \"filters:smooth\")"
        )
    fn: Any = importlib.import_module(module)
    for part in attr.split("."):
        try:
            fn = getattr(fn, part)
        except AttributeError:
            raise ValueError(
                f"tilestream: function = {name!r}: module {module} has no {attr}"
            ) from None
    if not callable(fn):
        raise TypeError(f"tilestream: function = {name!r} is not callable")
    return fn


def _step(step_json: str, budget: int, cache: dict) -> Tuple[str, str, Any]:
    """A pipeline's ``function`` step (its spec's JSON, inputs bound to files) made ready
    as ``map_overlap`` makes a call: the function resolved and measured (unless the step
    declares ``working``) on the engine's budget; returns the blocks request and the
    output (JSON) and the callback. Kept in ``cache`` (one pipeline call's) by the step,
    so the pipeline's plan and its run measure once."""
    from . import _np_dtype, Tensor

    if step_json in cache:
        return cache[step_json]
    step = json.loads(step_json)
    fn = _resolve(step["function"])
    # each input as its spec gives it (raw layout, window, nodata)
    inputs = [Tensor(s, json.loads(_ts.info(json.dumps(s)))) for s in step["input"]]
    halo = step.get("halo") or [0]
    halo = halo[0] if len(halo) == 1 else halo
    dtype = _np_dtype(step["dtype"]) if step.get("dtype") else None
    w = step.get("working")
    p = _prepare(fn, inputs, step["output"], halo, step.get("boundary", "reflect"),
                 float(step.get("cval", 0.0)), dtype, step.get("shape"), step.get("block"),
                 w, int(budget), step.get("threads"), False, None, {})
    # what the run is known by in reports and errors: the name the step gives
    p.req["what"] = step["function"]
    got = (json.dumps(p.req), json.dumps(p.out), p.call(fn))
    cache[step_json] = got
    return got
