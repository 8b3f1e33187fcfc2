"""PyTorch over on-disk arrays: :class:`BatchDataset`, an ``IterableDataset`` of batches
from :func:`tilestream.batches`, and :func:`loader`, the drop-in for
``DataLoader(dataset, batch_size, shuffle, pin_memory)`` over an array larger than
memory. PyTorch is an optional dependency: importing this module needs it.

Each ``DataLoader`` worker reads only its share (``part=(worker, workers)``: the windows
``k, k + n, ...`` of each shuffled epoch, or the batches ``k, k + n, ...`` in order),
under its share of ``memory``; together they deliver every row once an epoch. Call
``loader.dataset.set_epoch(e)`` before each epoch (as with ``DistributedSampler``) for a
new shuffle each epoch; the order is a function of the seed and the epoch alone.
"""

from __future__ import annotations

from typing import Any, Iterator, Optional, Sequence

import torch
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

from . import _OPTIONS, _budget_bytes
from ._batches import batches


class BatchDataset(IterableDataset):
    """Batches of ``batch_size`` rows (or ``patches=(size, overlap)``) of ``inputs``
    (one array or aligned arrays) as tensors; the arguments are :func:`tilestream.batches`'s. ``memory`` is shared between
    the workers of a ``DataLoader``."""

    def __init__(self, inputs: Any, batch_size: int, *, shuffle: bool = False, seed: int = 0,
                 drop_last: bool = False, memory: Any = None, window: Optional[int] = None,
                 block: Optional[int] = None, ring: int = 4, patches: Any = None) -> None:
        super().__init__()
        self.inputs = [str(p) for p in inputs] if isinstance(inputs, (list, tuple)) else str(inputs)
        self.batch_size = int(batch_size)
        self.shuffle, self.seed, self.drop_last = bool(shuffle), int(seed), bool(drop_last)
        self.memory, self.window, self.block, self.ring = memory, window, block, int(ring)
        self.patches = patches
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        """The epoch the next pass is (its shuffle)."""
        self.epoch = int(epoch)

    def __iter__(self) -> Iterator[Any]:
        info = get_worker_info()
        k, n = (info.id, info.num_workers) if info is not None else (0, 1)
        budget = _budget_bytes(self.memory if self.memory is not None else _OPTIONS["memory"])
        kw = dict(window=self.window, block=self.block) if self.shuffle else {}
        with batches(self.inputs, self.batch_size, shuffle=self.shuffle, seed=self.seed,
                     drop_last=self.drop_last, memory=max(1, budget // n), first_epoch=self.epoch,
                     part=(k, n), ring=self.ring, framework="torch", threads=1 if n > 1 else None,
                     patches=self.patches, **kw) as it:
            for b in it:
                yield b


def loader(inputs: Any, batch_size: int, *, shuffle: bool = False, seed: int = 0,
           drop_last: bool = False, memory: Any = None, num_workers: int = 0,
           pin_memory: bool = False, window: Optional[int] = None, block: Optional[int] = None,
           patches: Any = None, **dataloader_kw: Any) -> DataLoader:
    """``DataLoader(BatchDataset(...), batch_size=None, ...)``: batches already made by
    tilestream, ``num_workers`` processes each reading its share under its share of
    ``memory``; ``pin_memory`` as ``DataLoader`` does it."""
    ds = BatchDataset(inputs, batch_size, shuffle=shuffle, seed=seed, drop_last=drop_last,
                      memory=memory, window=window, block=block, patches=patches)
    return DataLoader(ds, batch_size=None, num_workers=num_workers, pin_memory=pin_memory,
                      **dataloader_kw)


__all__ = ["BatchDataset", "loader"]
