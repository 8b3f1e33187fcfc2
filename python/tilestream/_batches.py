"""Batches for a training loop from arrays larger than memory: ``tilestream.batches``.

Rows of the leading axis of one or more on-disk arrays (features and labels, aligned)
are handed out batch by batch. Each batch lives in one of a fixed ring of buffers drawn
from the budget (page-locked with ``pinned=True``), read ahead on tilestream's threads
with the GIL released while the loop trains on the batch before. A batch is a numpy
array over its buffer, without a copy (a tuple of them for several inputs); the buffer
goes back to the ring only when nothing points into it any more (the array, a view of
it, a ``torch.from_numpy`` tensor), so a batch you keep is never overwritten. Holding
every buffer of the ring at once is refused in one line rather than waited on.

**Shuffling without reading at random.** ``shuffle=True`` cuts the rows into blocks of
consecutive rows (``block=``, by default about 1 MiB of rows), takes the blocks in a
random order, groups them ``window=`` blocks at a time (default 64, about 64 MiB) and
shuffles the rows within each group. Reads are whole blocks, contiguous on disk; each
batch draws its rows from ``window`` blocks spread over the whole array. The order is a
function of ``seed``, the epoch and those two sizes alone: the same at any budget or
thread count. Three windows are held at once (two a batch is drawn from, one being read
ahead), so the budget must hold them.
"""

from __future__ import annotations

import json
from typing import Any, Iterator, Optional, Sequence

import numpy as np

from . import _tilestream as _ts


def _patches(patches: Any) -> Optional[dict]:
    """``patches=`` as the library reads it: ``(size, overlap)`` or ``(size, overlap,
    edge)``, or a bare size."""
    if patches is None:
        return None
    spec = list(patches) if isinstance(patches, (list, tuple)) else [patches]
    if not 1 <= len(spec) <= 3:
        raise ValueError(f"tilestream: patches={patches!r} is not (size, overlap) or "
                         "(size, overlap, edge)")
    size, overlap = spec[0], spec[1] if len(spec) > 1 else 0
    edge = spec[2] if len(spec) > 2 else "shift"
    for name, v in (("size", size), ("overlap", overlap)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 0:
            raise ValueError(f"tilestream: the patch {name} {v!r} is not a whole number")
    if edge not in ("shift", "pad"):
        raise ValueError(f"tilestream: the patch edge {edge!r} is not \"shift\" or \"pad\"")
    return {"size": int(size), "overlap": int(overlap), "edge": edge}


def _request(batch: Any, shuffle: bool, seed: int, drop_last: bool, epochs: int,
             first_epoch: int, ring: int, pinned: Any, part: Any, window: Any,
             block: Any, patches: Any = None) -> dict:
    from ._blocks import _pinned

    if isinstance(batch, bool) or not isinstance(batch, (int, np.integer)) or batch < 1:
        raise ValueError(f"tilestream: batch={batch!r} is not a number of rows (1 or more)")
    for name, v in (("epochs", epochs), ("ring", ring), ("seed", seed),
                    ("first_epoch", first_epoch)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 0:
            raise ValueError(f"tilestream: {name}={v!r} is not a whole number")
    req = {"batch": int(batch), "drop_last": bool(drop_last), "epochs": int(epochs),
           "first_epoch": int(first_epoch), "ring": int(ring), "pinned": _pinned(pinned),
           "part": list(part) if part is not None else [0, 1], "shuffle": None,
           "patches": _patches(patches)}
    if shuffle:
        # sizes left out are the library's defaults (Shuffle::for_inputs)
        block_rows = int(block) if block is not None else None
        window_blocks = int(window) if window is not None else None
        if (block_rows is not None and block_rows < 1) or \
                (window_blocks is not None and window_blocks < 1):
            raise ValueError("tilestream: block= and window= are at least 1")
        req["shuffle"] = {"seed": int(seed), "block_rows": block_rows,
                          "window_blocks": window_blocks}
    elif window is not None or block is not None:
        raise ValueError("tilestream: window= and block= shape the shuffle: give shuffle=True")
    return req


class Batches:
    """An iterator of batches (see :func:`batches`); also a context manager that stops
    its reader on exit. ``plan`` is what it holds; ``len()`` the batches it gives."""

    def __init__(self, stream: Any, single: bool, framework: Optional[str],
                 device: Any, epochs: int) -> None:
        self._stream = stream
        self._single = single
        self._framework = framework
        self._device = device
        self._pending: list = []  # (event, host arrays) of copies to the GPU in flight
        self._copy_stream = None
        fields = json.loads(stream.plan)
        self.plan = fields["text"]
        self._count = int(fields["batches_per_epoch"])
        self._epochs = epochs

    def __iter__(self) -> Iterator[Any]:
        return self

    def __len__(self) -> int:
        return self._count * self._epochs

    def __next__(self) -> Any:
        self._reap()
        got = self._stream.next()
        if got is None:
            self.close()
            raise StopIteration
        from . import _np_dtype

        _index, _epoch, parts = got
        arrays = [np.asarray(m).view(_np_dtype(d)).reshape(s) for m, d, s in parts]
        if self._framework == "torch":
            arrays = [self._torch(a) for a in arrays]
        return arrays[0] if self._single else tuple(arrays)

    def _torch(self, a: np.ndarray) -> Any:
        import torch

        t = torch.from_numpy(a)
        if self._device is None:
            return t
        # copied on a side stream, the loop's stream waiting for it; the host buffer is
        # held until the copy is done
        if self._copy_stream is None:
            self._copy_stream = torch.cuda.Stream(device=self._device)
        with torch.cuda.stream(self._copy_stream):
            g = t.to(self._device, non_blocking=True)
            done = torch.cuda.Event()
            done.record(self._copy_stream)
        current = torch.cuda.current_stream(self._device)
        current.wait_event(done)
        g.record_stream(current)
        self._pending.append((done, a))
        return g

    def _reap(self) -> None:
        self._pending = [(e, a) for e, a in self._pending if not e.query()]

    def close(self) -> None:
        """Stops the reader; batches still held stay valid."""
        for e, _ in self._pending:
            e.synchronize()
        self._pending = []
        self._stream.close()

    @property
    def held(self) -> int:
        """Batches of the ring held now (by the loop, or by copies to the GPU in flight)."""
        return int(self._stream.held)

    def __enter__(self) -> "Batches":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def batches(inputs: Any, batch: int, *, shuffle: bool = False, seed: int = 0,
            drop_last: bool = False, memory: Any = None, pinned: Any = False,
            device: Any = None, epochs: int = 1, first_epoch: int = 0, ring: int = 4,
            window: Optional[int] = None, block: Optional[int] = None,
            framework: Optional[str] = None, part: Optional[Sequence[int]] = None,
            threads: Optional[int] = None, patches: Any = None, _plan: bool = False) -> Any:
    """Batches of ``batch`` rows of ``inputs`` (an on-disk array, or a list of arrays with
    as many rows each: features and labels), for ``epochs`` passes: an iterator of numpy
    arrays (tuples of them for a list), each over a buffer of a ring of ``ring`` drawn
    from ``memory``, without a copy. ``shuffle=True`` shuffles windows of blocks (see
    the module's notes), ``seed`` and the epoch fixing the order; ``drop_last`` leaves
    out an epoch's short last batch. ``pinned=True`` page-locks the ring (for copies to a
    GPU); ``framework="torch"`` gives tensors, and ``device="cuda"`` copies each batch
    to that device on a side stream, the loop's stream waiting for it. ``part=(k, n)``
    gives worker ``k`` of ``n`` its share (``tilestream.torch`` does this for a
    ``DataLoader``'s workers)::

        for x, y in ts.batches(["features.npy", "labels.npy"], 4096, shuffle=True,
                               memory="512MiB"):
            train_step(x, y)

    ``patches=(size, overlap)`` (or ``(size, overlap, "pad")``) gives patches of images
    instead of rows: each input an image of shape ``(bands, rows, cols)`` or ``(rows,
    cols)``, all of the same rows and columns, a batch ``(batch, bands, size, size)``
    (``(batch, size, size)`` for a 2-D image) of the patches ``tilestream.tiles`` cuts,
    in the order of its grid (row by row) or shuffled; with patches, ``block=`` counts
    rows of the patch grid::

        for img, mask in ts.batches(["scene.tif", "labels.tif"], 32, patches=(256, 32),
                                    shuffle=True, memory="512MiB"):
            train_step(img, mask)
    """
    from . import _opts, _source, Plan, open as ts_open, Tensor

    single = not isinstance(inputs, (list, tuple))
    items = [inputs] if single else list(inputs)
    if not items:
        raise TypeError("tilestream: give at least one input array")
    tensors = [x if isinstance(x, Tensor) else ts_open(x) for x in items]
    if device is not None and framework is None:
        framework = "torch"
    if framework not in (None, "numpy", "torch"):
        raise ValueError(f"tilestream: framework={framework!r} is not \"numpy\" or \"torch\"")
    if framework == "torch" or device is not None:
        try:
            import torch  # noqa: F401
        except ImportError:
            raise ImportError(
                "tilestream: framework=\"torch\" and device= need PyTorch (pip install torch)"
            ) from None
    if device is not None and pinned is False:
        pinned = str(device) if str(device).startswith("cuda") else True
    req = _request(batch, shuffle, seed, drop_last, epochs, first_epoch, ring, pinned, part,
                   window, block, patches)
    sources = [json.dumps(_source(t)) for t in tensors]
    opts = _opts(memory, threads, None)
    if _plan:
        from . import BudgetError

        try:
            fields = json.loads(_ts.plan_batches(sources, json.dumps(req), opts))
        except ValueError as e:
            return Plan({"fits": False, "text": str(e)})
        except BudgetError as e:
            return Plan({"fits": False, "text": str(e), "smallest": e.smallest})
        fields["fits"] = True
        return Plan(fields)
    stream = _ts.open_batches(sources, json.dumps(req), opts)
    return Batches(stream, single, None if framework == "numpy" else framework, device,
                   int(epochs))
