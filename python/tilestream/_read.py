"""Reading a tensor, or its tiles, into memory: :func:`tilestream.read` and
:func:`tilestream.iter_tiles`."""

from __future__ import annotations

import json
from typing import Any, Iterator, Optional

import numpy as np

from . import _OPTIONS, Tensor, _budget_bytes, _source, _ts, open


def read(t: Any, rows: Optional[slice] = None, out: Optional[np.ndarray] = None) -> np.ndarray:
    """Reads rows ``rows`` (a slice of the first axis; all by default) of ``t`` into
    ``out`` (a C-contiguous array of the right size and dtype, such as a page-locked
    ``torch.empty(..., pin_memory=True).numpy()``), or into a new array."""
    t = t if isinstance(t, Tensor) else open(t)
    n = t.shape[0] if t.shape else 1
    start, stop, step = (rows or slice(None)).indices(n)
    if step != 1:
        raise ValueError("tilestream: rows must be a contiguous slice (step 1)")
    stop = max(stop, start)
    row_elems = int(np.prod(t.shape[1:], dtype=np.int64)) if t.ndim > 1 else 1
    shape = (stop - start,) + tuple(t.shape[1:])
    if out is None:
        out = np.empty(shape, dtype=t.dtype)
    elif out.dtype != t.dtype or out.size != (stop - start) * row_elems:
        raise ValueError(
            f"tilestream: out is {out.shape} {out.dtype}, the read is {shape} {t.dtype}"
        )
    if not out.flags["C_CONTIGUOUS"] or not out.flags["WRITEABLE"]:
        raise ValueError("tilestream: out must be a writable C-contiguous array")
    if stop > start:
        b = _ts.read_range(json.dumps(t._source), start * row_elems, (stop - start) * row_elems)
        np.copyto(out.reshape(-1), np.frombuffer(b, dtype=t.dtype))
    return out


def iter_tiles(t: Any, *, memory: Any = None) -> Iterator[tuple]:
    """Yields ``(index, rows, array)`` for consecutive blocks of rows of ``t``, each
    block as large as the budget ``memory`` allows (a quarter of it).

    For ``.npy`` and raw files each array is a read-only view straight over the file's
    pages (a memory map of that block alone, no copy), released when the next block is
    made, so resident memory stays at one block; for compressed files (GeoTIFF, Zarr) it
    is one decoded buffer reused from block to block. Either way it is valid until the
    next step: copy it to keep it."""
    t = t if isinstance(t, Tensor) else open(t)
    budget = _budget_bytes(memory if memory is not None else _OPTIONS["memory"])
    n = t.shape[0] if t.shape else 1
    row_bytes = max(1, t.nbytes // max(n, 1))
    per = max(1, (budget // 4) // row_bytes)
    if per * row_bytes > budget:
        raise BudgetError(
            f"tilestream: one row of {t.path} is {row_bytes} bytes, more than the budget of "
            f"{budget} bytes",
            row_bytes,
        )
    # mapped only where the file's bytes are the array as they are (a local .npy or raw
    # file of native C order): a Fortran-order or big-endian .npy, an object and a
    # window are read through tilestream
    mapped = bool(t._info.get("mappable")) and t.nbytes > 0
    buf = None if mapped else np.empty((min(per, n),) + tuple(t.shape[1:]), dtype=t.dtype)
    for i, start in enumerate(range(0, n, per)):
        stop = min(start + per, n)
        if mapped:
            view = np.memmap(t.path, dtype=t.dtype, mode="r",
                             offset=int(t._info["offset"]) + start * row_bytes,
                             shape=(stop - start,) + tuple(t.shape[1:]))
        else:
            view = buf[: stop - start]
            read(t, slice(start, stop), view)
        yield i, slice(start, stop), view
        del view
