"""Your own reduction over arrays larger than memory: ``reduce_blocks`` (see
:mod:`tilestream._blocks` for the calls, the working memory and the pinned blocks it
shares with ``map_blocks``). Each block's partial is combined in groups fixed by the
array's shape, in block order, so the result is the same at every budget and thread
count."""

from __future__ import annotations

import json
import threading
from typing import Any, Callable, List, Optional

import numpy as np

from . import _tilestream as _ts
from ._blocks import (
    _GROUP,
    _LEAF_BYTES,
    _Inputs,
    _Over,
    _Watch,
    _budget_of,
    _call_block,
    _calls,
    _check_working,
    _measure,
    _name,
    _opts_of,
    _pinned,
    _working,
)


def _leaf(ins: _Inputs, axes: set, block: Any) -> List[int]:
    """The grid of ``reduce_blocks``: from the data's shape (and ``block=``) alone."""
    h, w = ins.grid
    rows_axis, cols_axis = (0, None) if ins.ndim == 1 else (ins.ndim - 2, ins.ndim - 1)
    cut_rows = rows_axis in axes
    cut_cols = cols_axis is not None and cols_axis in axes
    if block is not None:
        b = [int(x) for x in (block if not isinstance(block, int) else (block, block))]
        r, c = (b[0], 1) if ins.ndim == 1 else (b[-2], b[-1])
        if (not cut_rows and r < h) or (not cut_cols and c < w):
            raise ValueError(
                f"tilestream: block={tuple(b)} cuts an axis the reduction keeps: blocks are "
                f"whole along the axes not in axis="
            )
        return [max(1, r), max(1, c)]
    row = w * ins.pixel
    if not cut_rows:
        return [h, w if not cut_cols or row <= _LEAF_BYTES else max(1, _LEAF_BYTES // ins.pixel)]
    if row <= _LEAF_BYTES or not cut_cols:
        return [max(1, _LEAF_BYTES // max(row, 1)), w]
    return [1, max(1, _LEAF_BYTES // ins.pixel)]


class _Reducer:
    """The callback of ``reduce_blocks``: ``chunk`` on each block, the partials combined
    in groups of 16 consecutive ones, level by level: a tree fixed by the number of
    blocks, so by the data's shape. Partials of calls at once that end out of order wait
    for the ones before them."""

    def __init__(self, chunk: Callable[..., Any], combine: Callable[[list], Any], name: str,
                 working: dict, declared: Any, calls: int = 1) -> None:
        self.chunk, self.combine, self.name = chunk, combine, name
        self.working, self.declared = working, declared
        self.watch = _Watch(calls)
        self.over = _Over()
        self.levels: List[list] = [[]]
        self.lock = threading.Lock()
        self.next = 0
        self.early: dict = {}

    def __call__(self, index: int, count: int, tile: tuple, inner: tuple, inputs: list,
                 out_shape: Optional[tuple], out: Any = None) -> None:
        _, part, used, block_bytes = _call_block(self.watch, self.chunk, inputs, index, tile)
        _check_working(self.name, used, block_bytes, self.working, index, self.declared,
                       self.over, self.watch.calls)
        with self.lock:
            self.early[index] = part
            while self.next in self.early:
                self._push(0, self.early.pop(self.next))
                self.next += 1
        return None

    def _push(self, level: int, part: Any) -> None:
        while len(self.levels) <= level:
            self.levels.append([])
        self.levels[level].append(part)
        if len(self.levels[level]) == _GROUP:
            group, self.levels[level] = self.levels[level], []
            self._push(level + 1, self.combine(group))

    def result(self) -> Any:
        carried: list = []
        for level in self.levels:
            # what a lower level left holds later blocks than this level's
            group = level + carried
            carried = [self.combine(group)] if group else []
        if not carried:
            raise ValueError("tilestream: the inputs are empty: there is nothing to reduce")
        return carried[0]


def reduce_blocks(chunk: Callable[..., Any], combine: Callable[[list], Any], *inputs: Any,
                  axis: Any = None, block: Any = None, memory: Any = None,
                  threads: Optional[int] = None, progress: Any = None, working: Any = None,
                  pinned: Any = False, **kw: Any) -> Any:
    """Reduces ``inputs`` with your own functions: ``chunk(*blocks) -> partial`` on each
    block, ``combine(partials) -> partial`` on lists of consecutive partials (a tree of
    groups of 16, level by level), and returns the last ``combine``'s result. Blocks are
    whole along the axes not in ``axis`` (None: every axis is reduced, blocks are cut
    anyhow) and are cut by the data's shape alone (about 256 KiB of input each, or
    ``block=``), never by the budget or the threads: the result is the same at any
    ``memory=``::

        hist = ts.reduce_blocks(lambda b: np.histogram(b, 64, (0, 1))[0], sum, "x.npy")
    """
    from . import BudgetError

    plan_only = kw.pop("_plan", False)
    if not callable(chunk) or not callable(combine):
        raise TypeError("tilestream: chunk and combine must be callable")
    ins = _Inputs(inputs)
    if axis is None:
        axes = set(range(ins.ndim))
    else:
        raw = (axis,) if isinstance(axis, (int, np.integer)) else tuple(axis)
        axes = set()
        for a in raw:
            if not -ins.ndim <= int(a) < ins.ndim:
                raise ValueError(f"tilestream: axis {a} is out of range for {ins.ndim} dimensions")
            axes.add(int(a) % ins.ndim)
    name = _name(chunk)
    calls = _calls(threads)
    req = {"halo": [0, 0], "edges": "reflect", "cval": 0.0, "what": name,
           "block": _leaf(ins, axes, block), "first": False, "calls": calls,
           "pinned": _pinned(pinned)}
    opts = _opts_of(memory, threads, False, kw)
    declared = working
    work = _working(working)
    if work is None or not plan_only:
        _, measured, used, block_bytes, _ = _measure(chunk, name, ins, req, opts)
        if work is None:
            work = dict(measured, per_out=0.0)
        _check_working(name, used, block_bytes, work, 0, declared, _Over())
    req["working"] = work
    if plan_only:
        from . import Plan

        try:
            fields = json.loads(_ts.plan_blocks(ins.json(), json.dumps(req), "null", opts))
        except BudgetError as e:
            return Plan({"fits": False, "text": str(e), "smallest": e.smallest,
                         "budget_bytes": _budget_of(opts)})
        fields["fits"] = True
        return Plan(fields)
    from . import _progress

    reducer = _Reducer(chunk, combine, name, work, declared, calls)
    with reducer.watch:
        _ts.run_blocks(ins.json(), json.dumps(req), "null", reducer, opts, _progress(progress))
    return reducer.result()
