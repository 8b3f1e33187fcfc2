"""Quantiles, percentiles and medians on a Dask cluster (:func:`tilestream.dask.reduce`
with a quantile name): over the leading axis the tasks count each pass of the digit
selection and the client adds their counts as they finish; over inner axes each task
takes its own rows' quantiles."""

from __future__ import annotations

import json
from typing import Any, Callable, List, Optional, Tuple

import numpy as np

from . import _axes, _keep, _np_dtype, _ts, _with_nodata
from .dask import _client, _gather, _shares, _src, _submit, _task_opts, _with_rows


def _gather_counts(c: Any, kind: str, fn: Callable[..., Any],
                   shares: List[Tuple[int, int]],
                   args: Callable[[Tuple[int, int]], tuple],
                   fold: Callable[[bytes, bytes], bytes]) -> bytes:
    """The counts of ``fn(*args(share))`` over every share, each a share's counts as
    bytes, folded by ``fold`` as the tasks finish, so the client holds the counts so far
    and one share's, not every share's. A failure cancels the job's other tasks."""
    from distributed import as_completed

    futures = _submit(c, kind, fn, shares, args)
    total: Optional[bytes] = None
    try:
        for fut in as_completed(futures):
            got = fut.result()
            fut.release()
            total = got if total is None else fold(total, got)
    except BaseException:
        c.cancel(futures)
        raise
    assert total is not None
    return total


def _quantile_start_task(src: dict, op: str, axis: Optional[List[int]], qs: Any,
                         scalar: bool, method: Optional[str], memory: Any,
                         threads: Optional[int]) -> bytes:
    # on a worker: the digits a task's budget holds
    return _ts.quantile_start(json.dumps(src), op, axis, _task_opts(memory, threads), qs,
                              scalar, method)


def _quantile_count_task(src: dict, state: bytes, share: Tuple[int, int], memory: Any,
                         threads: Optional[int], hook: Optional[Callable[[], Any]]) -> bytes:
    if hook is not None:
        hook()
    counts, _report = _ts.quantile_counts(json.dumps(src), state, share[0], share[1],
                                          _task_opts(memory, threads))
    return counts


def _quantile_rows_task(src: dict, op: str, axis: Optional[List[int]], qs: Any,
                        scalar: bool, method: Optional[str], share: Tuple[int, int],
                        memory: Any, threads: Optional[int],
                        hook: Optional[Callable[[], Any]]) -> np.ndarray:
    if hook is not None:
        hook()
    data, name, shape, _ = _ts.reduce(json.dumps(_with_rows(src, share[0], share[1])), op,
                                      axis, 0, _task_opts(memory, threads), None, qs, scalar,
                                      method)
    return np.frombuffer(data, dtype=_np_dtype(name)).reshape(shape).copy()


def _quantile(path: Any, op: str, axis: Any, q: Any, method: Optional[str], keepdims: bool,
              nodata: Any, client: Any, block_rows: Optional[int], memory: Any,
              threads: Optional[int], hook: Optional[Callable[[], Any]]) -> np.ndarray:
    c = _client(client)
    src = _with_nodata(_src(path), nodata)
    shape = json.loads(_ts.info(json.dumps(src)))["shape"]
    ndim = len(shape)
    if ndim == 0:
        raise ValueError("tilestream.dask: a 0-d array has no rows to split")
    axes = _axes(axis, ndim)
    qs, scalar = None, False
    if q is not None:
        scalar = np.ndim(q) == 0
        qs = [float(v) for v in np.atleast_1d(np.asarray(q, dtype=np.float64)).ravel()]
    shares = _shares(int(shape[0]), 1, block_rows, c)
    if axes is not None and 0 not in axes:
        # each share's rows are outputs of their own
        parts = _gather(c, "quantile", _quantile_rows_task, shares,
                        lambda s: (src, op, axes, qs, scalar, method, s, memory, threads,
                                   hook))
        lead = 1 if qs is not None and not scalar else 0
        a = np.concatenate(parts, axis=lead)
    else:
        state = c.submit(_quantile_start_task, src, op, axes, qs, scalar, method, memory,
                         threads, pure=False).result()
        done = _ts.quantile_done(state)
        while not done:
            # each output's NaN words hold an element's bits, not a count: folded in Rust
            counts = _gather_counts(c, "quantile", _quantile_count_task, shares,
                                    lambda s: (src, state, s, memory, threads, hook),
                                    lambda a, b, st=state: _ts.quantile_fold(st, a, b))
            state, done = _ts.quantile_next(state, [counts])
        data, name, out_shape = _ts.quantile_finish(state)
        a = np.frombuffer(data, dtype=_np_dtype(name)).reshape(out_shape).copy()
    if keepdims:
        lead_shape = a.shape[:1] if qs is not None and not scalar else ()
        a = a.reshape(tuple(lead_shape) + _keep(a.shape[len(lead_shape):], axes, ndim))
    return a
