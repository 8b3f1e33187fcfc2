"""tilestream on a Dask cluster: jobs split by rows over the workers, each task running
tilestream's engine on its share under a strict memory budget, with results identical
to one process.

Needs ``distributed`` (``pip install distributed``) and a :class:`distributed.Client`
(the current one unless ``client=`` is given)::

    from distributed import Client, LocalCluster
    import tilestream.dask as tsd

    client = Client(LocalCluster(n_workers=2, threads_per_worker=1, memory_limit="1GiB"))
    mean = tsd.reduce("features.npy", "mean", axis=0)          # np.ndarray, as ts.reduce
    tsd.standardize("features.npy", "z.npy")                     # written by row ranges
    tsd.map_files(ts.stencil, scenes, "out/", filter="gaussian:sigma=2")

How the results stay the bytes of one run:

* **Reductions** are split on the engine's summation blocks (``row_step`` rows); each
  task returns the partial of every block it covers, and the client merges them in block
  order, the order one process uses. Over an inner axis each task returns its rows'
  results.
* **Quantiles, percentiles and medians** select each rank's value digit by digit over
  a few passes (as one process does): in each pass every task counts the digits of its
  rows, the client adds the counts (integers) and finds the next digit of every rank.
  Over an inner axis each task takes its own rows' quantiles.
* **Histograms** add the shares' counts (integers); an automatic range is the whole
  input's, its extremes taken first by a split reduction and given to every task.
* **Outputs** (``affine``, ``cast``, ``map``, ``matmul``, ``standardize``, ``stencil``)
  are ``.npy`` files made whole (as a temporary file beside the destination) before the
  tasks start; each task writes its rows in place; filters read their halo rows from
  the neighbouring shares. The file is renamed onto the destination when every task
  has succeeded, so nothing appears at the path before the end, and a failed job
  leaves nothing. A task Dask retries after its worker died rewrites exactly its rows.
* ``map_blocks`` and ``map_overlap`` run your function by shares of the image's rows:
  the function is measured once on the client, the output (a ``.npy``) made whole
  beforehand, and each task calls the function on the blocks of its rows (reading their
  halo from the rows around them) and writes them in place. The output equals one
  process's wherever the function's result depends on its halo alone.
* ``map_files`` runs one tilestream call per file (thousands of scenes): each output
  appears atomically, as with one process.

**Memory.** ``memory="auto"`` (the default) gives each task the worker's
``memory_limit``, less what the worker process already holds when the task starts
(Python, Dask, numpy: about 100 MiB), divided by the worker's ``nthreads`` (the tasks
it runs at once); each task computes on one thread, so the worker's threads are
tilestream's. Dask counts tilestream's memory as unmanaged: the budget is what keeps the
worker under its limit. ``memory="512MiB"`` sets it per task instead.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
import uuid
from typing import Any, Callable, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from . import _axes, _histogram_bins, _histogram_run, _keep, _nodata_spec, _with_nodata, _np_dtype, _opts, _source, _specs, _ts, _ts_dtype, open as _open

__all__ = [
    "affine",
    "cast",
    "map",
    "map_blocks",
    "map_files",
    "map_overlap",
    "matmul",
    "reduce",
    "standardize",
    "stencil",
]

#: Smallest budget "auto" gives a task.
_MIN_AUTO = 16 << 20
#: What a run holds beyond its budget (the README's "budget + 48 MiB").
_OVERHEAD = 48 << 20


def _fraction() -> float:
    """The fraction of its memory_limit a worker may reach: the first of Dask's pause and
    terminate thresholds that is set (0.8 and 0.95 by default)."""
    try:
        import dask

        for key in ("distributed.worker.memory.pause", "distributed.worker.memory.terminate"):
            f = dask.config.get(key, default=False)
            if f:
                return float(f)
    except ImportError:
        pass
    return 0.8


def _client(client: Any) -> Any:
    if client is not None:
        return client
    try:
        from distributed import get_client
    except ImportError:
        raise ImportError(
            "tilestream.dask needs the distributed package: pip install distributed"
        ) from None
    return get_client()


def _task_opts(memory: Any, threads: Optional[int], **extra: Any) -> str:
    """The engine options of a task, worked out on the worker that runs it."""
    worker = None
    try:
        from distributed import get_worker

        worker = get_worker()
    except (ImportError, ValueError):
        pass
    if memory == "auto":
        limit = getattr(getattr(worker, "memory_manager", None), "memory_limit", None)
        if not limit:
            raise ValueError(
                "tilestream.dask: memory='auto' needs workers with a memory_limit; "
                "give memory= (a budget per task) instead"
            )
        nthreads = max(1, getattr(getattr(worker, "state", None), "nthreads", 1))
        held = 0
        try:
            import psutil

            held = psutil.Process().memory_info().rss
        except ImportError:
            pass
        # stay under the fraction of the limit at which the worker pauses (or is
        # terminated), with each task's fixed overhead beyond its budget set aside
        memory = max(_MIN_AUTO, int(limit * _fraction() - held) // nthreads - _OVERHEAD)
    return _opts(memory, threads if threads is not None else 1, **extra)


def _shares(n: int, step: int, rows: Optional[int], client: Any) -> List[Tuple[int, int]]:
    """Row ranges of about ``rows`` rows (rounded up to ``step``), covering ``0..n``;
    by default four shares per worker thread."""
    step = max(1, int(step))
    if rows is None:
        threads = sum(client.nthreads().values()) or 1
        rows = -(-n // (4 * threads))
    rows = max(step, -(-int(rows) // step) * step)
    cuts = list(range(0, n, rows)) + [n]
    return [(a, b) for a, b in zip(cuts, cuts[1:]) if b > a] or [(0, n)]


def _submit(c: Any, kind: str, fn: Callable[..., Any], shares: List[Tuple[int, int]],
            args: Callable[[Tuple[int, int]], tuple]) -> List[Any]:
    """The futures of ``fn(*args(share))`` for every share, as the tasks of one job (their
    keys name the job, so a job's tasks are told apart from another's)."""
    job = uuid.uuid4().hex
    return [
        c.submit(fn, *args(s), key=f"tilestream-{kind}-{job}-{i}", pure=False)
        for i, s in enumerate(shares)
    ]


def _gather(c: Any, kind: str, fn: Callable[..., Any], shares: List[Tuple[int, int]],
            args: Callable[[Tuple[int, int]], tuple]) -> List[Any]:
    """``fn(*args(share))`` for every share, as tasks of one job; their results in share
    order. A failure cancels the job's other tasks."""
    futures = _submit(c, kind, fn, shares, args)
    try:
        return c.gather(futures)
    except BaseException:
        c.cancel(futures)
        raise


_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")


def _where(path: Any) -> str:
    """``path`` as every worker finds it: a URL (``s3://``, ``https://``) as it is, a
    local path made absolute (workers may run in another working directory)."""
    p = os.fspath(path)
    return p if _URL.match(p) else os.path.abspath(p)


def _src(x: Any) -> dict:
    """The source of ``x`` with a path every worker finds (:func:`_where`)."""
    s = dict(_source(x))
    s["path"] = _where(s["path"])
    return s


# ---------------------------------------------------------------------------------------
# reductions


def _reduce_task(src: dict, ops: List[Tuple[str, int]], axis: Optional[List[int]],
                 share: Tuple[int, int], memory: Any, threads: Optional[int],
                 hook: Optional[Callable[[], Any]]) -> List[bytes]:
    if hook is not None:
        hook()
    parts, _report = _ts.reduce_partials(
        json.dumps(src), ops, axis, share[0], share[1], _task_opts(memory, threads)
    )
    return parts


def _reduce_many(path: Any, ops: List[Tuple[str, int]], axis: Any, client: Any,
                 block_rows: Optional[int], memory: Any, threads: Optional[int],
                 hook: Optional[Callable[[], Any]], nodata: Any = None) -> List[np.ndarray]:
    """The reductions ``ops`` (``(name, ddof)``) of ``path`` over ``axis``, in one pass
    of tasks over its rows."""
    c = _client(client)
    src = _with_nodata(_src(path), nodata)
    info = json.loads(_ts.info(json.dumps(src)))
    ndim = len(info["shape"])
    if ndim == 0:
        raise ValueError("tilestream.dask: a 0-d array has no rows to split")
    axis = _axes(axis, ndim)
    for op, ddof in ops:
        if isinstance(ddof, bool) or not isinstance(ddof, int) or ddof < 0:
            raise ValueError(f"tilestream: ddof={ddof!r} is not a non-negative integer")
    step = _ts.row_step(info["shape"], axis)
    shares = _shares(int(info["shape"][0]), step, block_rows, c)
    per_share = _gather(c, "reduce", _reduce_task, shares,
                        lambda s: (src, ops, axis, s, memory, threads, hook))
    out = []
    for k in range(len(ops)):
        data, name, shape = _ts.merge_partials([parts[k] for parts in per_share])
        out.append(np.frombuffer(data, dtype=_np_dtype(name)).reshape(shape).copy())
    return out


#: The reductions that select by digits rather than merge partials.
_QUANTILES = ("quantile", "percentile", "median", "nanquantile", "nanpercentile",
              "nanmedian")


def reduce(
    path: Any,
    op: str = "sum",
    axis: Any = None,
    *,
    keepdims: bool = False,
    ddof: int = 0,
    q: Any = None,
    method: Optional[str] = None,
    nodata: Any = None,
    client: Any = None,
    block_rows: Optional[int] = None,
    memory: Any = "auto",
    threads: Optional[int] = None,
    _hook: Optional[Callable[[], Any]] = None,
) -> np.ndarray:
    """Reduces ``path`` (any input: a file, a URL, a ``Tensor`` or window of one, an
    ``np.memmap``; a compressed one is split into windows of its rows) over ``axis``
    on the cluster: the same np.ndarray, byte for byte, as
    :func:`tilestream.reduce` (``axis`` an int or a tuple of them, ``keepdims`` as
    there; ``nodata`` as there: the value the ``nan`` forms and ``count`` leave out).
    ``block_rows`` is the rows per task (rounded up to the reduction's step; default: four
    tasks per worker thread).

    ``quantile``, ``percentile``, ``median`` and their ``nan`` forms take ``q`` and
    ``method`` as :func:`tilestream.reduce` does, with the same result: over axis 0 (or
    every element) each pass of the selection is counted by the tasks and added on the
    client (one pass for 8- and 16-bit data, two for 32-bit, four for 64-bit, more when
    a task's budget holds only narrower digits); over inner axes each task takes its own
    rows' quantiles."""
    if isinstance(op, str) and op.strip().lower() in _QUANTILES:
        from ._dask_quantile import _quantile

        return _quantile(path, op, axis, q, method, keepdims, nodata, client, block_rows,
                         memory, threads, _hook)
    if q is not None or method is not None:
        raise ValueError(f"tilestream: q and method are for quantile, percentile and median "
                         f"(and their nan forms), not {op}")
    a = _reduce_many(path, [(op, ddof)], axis, client, block_rows, memory, threads, _hook,
                     nodata)[0]
    if keepdims:
        ndim = len(json.loads(_ts.info(json.dumps(_src(path))))["shape"])
        a = a.reshape(_keep(a.shape, _axes(axis, ndim), ndim))
    return a


# ---------------------------------------------------------------------------------------
# outputs written by row ranges


def _with_rows(src: dict, a: int, b: int) -> dict:
    s = dict(src)
    s["rows"] = [a, b]
    return s


def _rows_task(spec: dict, inputs: Sequence[str], share: Tuple[int, int], halo: Tuple[int, int],
               n: int, tmp: str, memory: Any, threads: Optional[int],
               hook: Optional[Callable[[], Any]], zarr: Optional[dict] = None) -> dict:
    """Runs ``spec`` on rows ``share`` (plus the halo) of its inputs named ``inputs``,
    writing its rows of ``tmp``."""
    if hook is not None:
        hook()
    a, b = share
    lo, hi = max(0, a - halo[0]), min(n, b + halo[1])
    spec = dict(spec)
    for key in inputs:
        if key == "inputs":
            spec["inputs"] = [[k, _with_rows(v, lo, hi)] for k, v in spec["inputs"]]
        else:
            spec[key] = _with_rows(spec[key], lo, hi)
    spec["output"] = tmp
    region = {"at_row": a, "skip_rows": a - lo, "rows": b - a}
    opts = _task_opts(memory, threads, out_region=region, **(zarr or {}))
    return json.loads(_ts.run_spec(json.dumps(spec), opts, None))


_ZARR_KW = {"zarr_compress", "zarr_chunks", "zarr_shard"}


def _zarr_kw(fn: str, kw: Mapping[str, Any]) -> dict:
    unknown = set(kw) - _ZARR_KW
    if unknown:
        raise TypeError(f"tilestream.dask.{fn}() got unexpected keyword argument(s) "
                        f"{sorted(unknown)}")
    return {k: v for k, v in kw.items() if v is not None}


def _run_rows(spec: dict, inputs: Sequence[str], out: Any, client: Any,
              block_rows: Optional[int], memory: Any, threads: Optional[int],
              hook: Optional[Callable[[], Any]], zarr: Optional[dict] = None) -> Any:
    """Makes the output (a ``.npy`` file, or a Zarr store for a name ending in ``.zarr``),
    runs ``spec`` by row ranges on the cluster, then puts the output in place (or
    removes it if a task failed for good)."""
    if _URL.match(os.fspath(spec["output"])):
        raise ValueError(
            f"tilestream.dask: {spec['output']}: a job split over a cluster writes its output in "
            "place, at a path every worker reaches (a shared file system), not to an object "
            "store; write it there and upload it, or run it in one process (tilestream.map ...)")
    c = _client(client)
    zarr = zarr or {}
    layout = json.loads(_ts.output_layout(json.dumps(spec)))
    shape, dtype = layout["shape"], layout["dtype"]
    halo = tuple(layout["halo_rows"])
    if not shape:
        raise ValueError("tilestream.dask: a 0-d output has no rows to split")
    n = int(shape[0])
    dest = spec["output"]
    is_zarr = dest.rstrip("/").lower().endswith(".zarr")
    if is_zarr:
        zopts = json.dumps(zarr)
        step = _ts.zarr_chunk_rows(shape, dtype, zopts)
        tmp = _ts.create_zarr_for_rows(dest, shape, dtype, zopts)
    else:
        if zarr:
            raise ValueError("tilestream.dask: zarr_* options need an output named *.zarr")
        step = 1
        tmp = _ts.create_npy_for_rows(dest, shape, dtype)
    return _fill(c, dest, tmp, is_zarr, (n, step, block_rows), spec["op"],
                 lambda s, key: c.submit(_rows_task, spec, inputs, s, halo, n, tmp, memory,
                                         threads, hook, zarr, key=key, pure=False))


def _fill(c: Any, dest: str, tmp: str, is_zarr: bool, rows: Tuple[int, int, Optional[int]],
          name: str, submit: Callable[[Tuple[int, int], str], Any]) -> Any:
    """Runs the tasks ``submit(share, key)`` starts, one per share of ``rows`` (the rows,
    the step and the ``block_rows`` of :func:`_shares`), each writing its rows of ``tmp``
    (the temporary ``.npy`` or Zarr store of ``dest``, locked for the job), then puts
    ``tmp`` in place, or removes it if anything failed."""
    lock_path = os.path.join(tmp, ".lock") if is_zarr else tmp
    # held for the job: `tilestream clean` leaves a locked temporary output alone
    held = os.open(lock_path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        n, step, block_rows = rows
        job = uuid.uuid4().hex
        futures = [submit(s, f"tilestream-{name}-{job}-{i}")
                   for i, s in enumerate(_shares(n, step, block_rows, c))]
        try:
            c.gather(futures)
        except BaseException:
            c.cancel(futures)
            raise
        if is_zarr:
            _ts.commit_zarr(tmp, dest)
        else:
            _ts.commit_npy(tmp, dest, True)
    except BaseException:
        if is_zarr:
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            try:
                os.unlink(tmp)
            except FileNotFoundError:
                pass
        raise
    finally:
        os.close(held)
    return _open(dest)


def affine(path: Any, out: Any, scale: float = 1.0, offset: float = 0.0, *, dtype: Any = None,
           nodata: Any = None, ignore_nodata: bool = False, client: Any = None, block_rows: Optional[int] = None, memory: Any = "auto",
           threads: Optional[int] = None, _hook: Optional[Callable[[], Any]] = None,
           **kw: Any) -> Any:
    """:func:`tilestream.affine` on the cluster, by row ranges of ``out`` (a ``.npy``, or a
    Zarr store written chunk rows by chunk rows for a name ending in ``.zarr``, with
    ``zarr_chunks=``, ``zarr_shard=``, ``zarr_compress=`` as in :func:`tilestream.affine`;
    ``nodata`` and ``ignore_nodata`` as there)."""
    spec = _specs.affine(_src(path), _where(out), scale, offset,
                         dtype=_ts_dtype(dtype), nodata=_nodata_spec(nodata, ignore_nodata))
    return _run_rows(spec, ["input"], out, client, block_rows, memory, threads, _hook,
                     _zarr_kw("affine", kw))


def cast(path: Any, out: Any, dtype: Any, *, client: Any = None,
         block_rows: Optional[int] = None, memory: Any = "auto",
         threads: Optional[int] = None, _hook: Optional[Callable[[], Any]] = None,
         **kw: Any) -> Any:
    """:func:`tilestream.cast` on the cluster, by row ranges of ``out`` (as :func:`affine`)."""
    spec = _specs.cast(_src(path), _where(out), _ts_dtype(dtype))
    return _run_rows(spec, ["input"], out, client, block_rows, memory, threads, _hook,
                     _zarr_kw("cast", kw))


def map(expr: str, out: Any, inputs: Mapping[str, Any], *, dtype: Any = None,
        nodata: Any = None, ignore_nodata: bool = False,
        input_nodata: Optional[Mapping[str, Any]] = None, client: Any = None, block_rows: Optional[int] = None, memory: Any = "auto",
        threads: Optional[int] = None, _hook: Optional[Callable[[], Any]] = None,
        **kw: Any) -> Any:
    """:func:`tilestream.map` on the cluster, by row ranges of ``out`` (as :func:`affine`);
    ``nodata``, ``ignore_nodata`` and ``input_nodata`` as in :func:`tilestream.map`."""
    spec = _specs.map(expr, [(k, _src(v)) for k, v in inputs.items()], _where(out),
                      dtype=_ts_dtype(dtype),
                      nodata=_nodata_spec(nodata, ignore_nodata, input_nodata))
    return _run_rows(spec, ["inputs"], out, client, block_rows, memory, threads, _hook,
                     _zarr_kw("map", kw))


def matmul(x: Any, w: Any, out: Any, *, dtype: Any = None, client: Any = None,
           block_rows: Optional[int] = None, memory: Any = "auto",
           threads: Optional[int] = None, _hook: Optional[Callable[[], Any]] = None,
           **kw: Any) -> Any:
    """:func:`tilestream.matmul` on the cluster: each task multiplies its rows of ``x``
    by the whole ``w`` (outputs as :func:`affine`)."""
    spec = _specs.matmul(_src(x), _src(w), _where(out), dtype=_ts_dtype(dtype))
    return _run_rows(spec, ["x"], out, client, block_rows, memory, threads, _hook,
                     _zarr_kw("matmul", kw))


def stencil(path: Any, out: Any, filter: str, *, boundary: str = "reflect", dtype: Any = None,
            client: Any = None, block_rows: Optional[int] = None, memory: Any = "auto",
            threads: Optional[int] = None, _hook: Optional[Callable[[], Any]] = None,
            **kw: Any) -> Any:
    """:func:`tilestream.stencil` on the cluster: a 2-D image by row ranges (each task
    reads the filter's halo rows of its neighbours' ranges), a 3-D one by bands (outputs
    as :func:`affine`)."""
    if filter.startswith("convolve:"):
        filter = "convolve:" + os.path.abspath(filter[len("convolve:"):])
    spec = _specs.stencil(_src(path), _where(out), filter, boundary=boundary,
                          dtype=_ts_dtype(dtype))
    return _run_rows(spec, ["input"], out, client, block_rows, memory, threads, _hook,
                     _zarr_kw("stencil", kw))


def standardize(path: Any, out: Any, *, ddof: int = 0, dtype: Any = None, axis: Any = None,
                client: Any = None, block_rows: Optional[int] = None, memory: Any = "auto",
                threads: Optional[int] = None,
                _hook: Optional[Callable[[], Any]] = None, **kw: Any) -> Any:
    """:func:`tilestream.standardize` on the cluster: the means and stds (per column, or
    over ``axis`` as there) by a split reduction (the bytes one process computes), then
    ``(x - mean) / std`` by row ranges. The statistics are kept beside ``out`` while the
    job runs."""
    src = _src(path)
    ax = None
    if axis is not None:
        ndim = len(json.loads(_ts.info(json.dumps(src)))["shape"])
        ax = _axes(axis, ndim)
        if 0 not in ax:
            # tasks are shares of rows: a statistic per row would be cut between them
            raise ValueError(f"tilestream.dask.standardize splits rows: axis={axis!r} must "
                             "include 0 (per channel of NCHW: (0, 2, 3)); run "
                             "tilestream.standardize for statistics per row")
        ax = ax[0] if len(ax) == 1 else ax
    c = _client(client)
    # both statistics in one pass, the bytes one process computes
    mean, std = _reduce_many(path, [("mean", 0), ("std", ddof)], 0 if ax is None else ax, c,
                             None, memory, threads, _hook)
    dest = _where(out)
    d, name = os.path.split(dest)
    # named as tilestream's temporary files, and locked while the job runs: `tilestream
    # clean` removes them if the client dies, and leaves them alone until then
    job = uuid.uuid4().hex[:12]
    paths = [os.path.join(d, f".{name}.{job}{k}.tilestream-tmp") for k in ("m", "s")]
    held = []
    try:
        for p, a in zip(paths, (mean, std)):
            f = open(p, "xb")
            held.append(f)
            fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            np.save(f, a)
            f.flush()
        spec = _specs.standardize(src, dest, ddof=ddof, dtype=_ts_dtype(dtype),
                                  given=({"path": paths[0]}, {"path": paths[1]}), axis=ax)
        return _run_rows(spec, ["input"], out, c, block_rows, memory, threads, _hook,
                         _zarr_kw("standardize", kw))
    finally:
        for f in held:
            f.close()
        for p in paths:
            try:
                os.unlink(p)
            except FileNotFoundError:
                pass




# ---------------------------------------------------------------------------------------
# histograms


def _histogram_task(spec: dict, share: Tuple[int, int], memory: Any, threads: Optional[int],
                    hook: Optional[Callable[[], Any]]) -> Tuple[np.ndarray, np.ndarray]:
    if hook is not None:
        hook()
    spec = {**spec, "input": _with_rows(spec["input"], share[0], share[1])}
    counts, edges, _ = _histogram_run(
        spec, lambda s: _ts.run_spec(json.dumps(s), _task_opts(memory, threads)))
    return counts, edges


def histogram(
    path: Any,
    bins: Any = 10,
    range: Any = None,
    axis: Any = None,
    *,
    nodata: Any = None,
    client: Any = None,
    block_rows: Optional[int] = None,
    memory: Any = "auto",
    threads: Optional[int] = None,
    _hook: Optional[Callable[[], Any]] = None,
) -> Tuple[np.ndarray, np.ndarray]:
    """:func:`tilestream.histogram` on the cluster: ``(counts, edges)``, the same arrays
    as one process (numpy's ``np.histogram`` per position of the kept axes, or over
    everything). Each task counts a share of the rows; where the rows are counted over
    (``axis`` None or including 0) the shares' counts are added (integers: exact), and an
    automatic range is the whole input's, its extremes taken first by a split reduction;
    where each row has its own histograms (``axis`` without 0) the shares' are stacked.
    ``block_rows`` is the rows per task (default: four tasks per worker thread)."""
    c = _client(client)
    src = _with_nodata(_src(path), nodata)
    info = json.loads(_ts.info(json.dumps(src)))
    shape = info["shape"]
    if len(shape) == 0:
        raise ValueError("tilestream.dask: a 0-d array has no rows to split")
    ax = _axes(axis, len(shape))
    b, rng = _histogram_bins(bins, range)
    spec: dict = _specs.histogram(src, "", b, range=rng, axis=ax)
    summed = ax is None or 0 in ax
    if summed and isinstance(b, int) and rng is None:
        # the whole input's extremes per output, as one process takes them
        ops = [("nanmin", 0), ("nanmax", 0), ("count", 0)] if info["masked"] else \
            [("min", 0), ("max", 0)]
        got = _reduce_many(path, ops, ax, c, None, memory, threads, _hook, nodata)
        lo, hi = got[0].ravel().tolist(), got[1].ravel().tolist()
        valid = got[2].ravel().tolist() if info["masked"] else [1] * len(lo)
        exact = int if np.dtype(got[0].dtype).kind in "biu" else float
        for a, z, n in zip(lo, hi, valid):
            if n and not (np.isfinite(a) and np.isfinite(z)):
                raise ValueError(
                    f"tilestream: autodetected range of [{a}, {z}] is not finite (numpy "
                    "raises too): give a range, which leaves NaN out")
        spec["extremes"] = [[exact(a), exact(z)] if n else None
                            for a, z, n in zip(lo, hi, valid)]
    shares = _shares(int(shape[0]), 1, block_rows, c)
    parts = _gather(c, "histogram", _histogram_task, shares,
                    lambda s: (spec, s, memory, threads, _hook))
    if summed:
        counts = parts[0][0].copy()
        for p, _ in parts[1:]:
            counts += p
        edges = parts[0][1]
    else:
        counts = np.concatenate([p for p, _ in parts])
        per_output = parts[0][1].ndim > 1
        edges = np.concatenate([e for _, e in parts]) if per_output else parts[0][1]
    if not isinstance(b, int):
        # numpy gives back the edges as given
        edges = np.asarray(bins)
    return counts, edges


from ._dask_blocks import map_blocks, map_files, map_overlap  # noqa: E402 (they use the helpers above)
