"""Your own function over blocks on a Dask cluster (:func:`tilestream.dask.map_blocks`,
:func:`~tilestream.dask.map_overlap`, :func:`~tilestream.dask.map_files`): each task runs
the function over its own rows' blocks, or its own files, within its share of the
worker's memory, and writes them in place in the output the client made."""

from __future__ import annotations

import json
import os
import uuid
from typing import Any, Callable, Iterable, List, Optional, Sequence, Tuple

from . import _ts
from .dask import _client, _fill, _src, _task_opts, _where


def _blocks_task(fn: Callable[..., Any], p: Any, sources: List[str], tmp: str,
                 share: Tuple[int, int], memory: Any, threads: Optional[int],
                 hook: Optional[Callable[[], Any]]) -> dict:
    """Calls ``fn`` on the blocks of rows ``share`` and writes them into ``tmp``."""
    if hook is not None:
        hook()
    # a function's first call in a process allocates what stays (imports, caches), which
    # is not its working memory: it is made here, on a small block, before the run's
    # memory watch
    warm = dict(p.req, block=[16, 16], first=True, calls=1,
                working={"per_block": 0.0, "per_out": 0.0, "bytes": 0})
    _ts.run_blocks(sources, json.dumps(warm), "null", p.call(fn, probe=True),
                   _task_opts(memory, threads))
    req = dict(p.req, rows=list(share))
    out = dict(p.out, path=tmp)
    opts = _task_opts(memory, threads,
                      out_region={"at_row": 0, "skip_rows": 0, "rows": None})
    call = p.call(fn)
    with call.watch:
        return json.loads(_ts.run_blocks(sources, json.dumps(req), json.dumps(out), call,
                                         opts))


def _map_rows(fn: Callable[..., Any], inputs: Sequence[Any], out: Any, halo: Any,
              boundary: str, cval: float, dtype: Any, shape: Any, block: Any, working: Any,
              client: Any, block_rows: Optional[int], memory: Any, threads: Optional[int],
              pinned: Any, hook: Optional[Callable[[], Any]]) -> Any:
    from ._blocks import _prepare

    c = _client(client)
    if out is None:
        raise TypeError("tilestream: give out=, the file the results are written to")
    dest = _where(out)
    if not dest.lower().endswith(".npy"):
        raise ValueError(
            f"tilestream.dask: map_blocks and map_overlap write a .npy output, not {out}: "
            "convert it afterwards (tilestream.convert) for another format"
        )
    sources = [json.dumps(_src(x)) for x in inputs]
    # measured once, here: every task plans with the same working memory
    probe_memory = "256MiB" if memory == "auto" else memory
    p = _prepare(fn, inputs, dest, halo, boundary, cval, dtype, shape, block, working,
                 probe_memory, threads, False, pinned, {})
    rows = p.ins.grid[0]
    p.ins = None  # the tasks take the sources' JSON, not the opened inputs
    tmp = _ts.create_npy_for_rows(dest, p.out["shape"], p.out["dtype"])
    return _fill(c, dest, tmp, False, (rows, 1, block_rows), "blocks",
                 lambda s, key: c.submit(_blocks_task, fn, p, sources, tmp, s, memory,
                                         threads, hook, key=key, pure=False))


def map_blocks(fn: Callable[..., Any], *inputs: Any, out: Any = None, dtype: Any = None,
               shape: Optional[tuple] = None, block: Any = None, working: Any = None,
               client: Any = None, block_rows: Optional[int] = None, memory: Any = "auto",
               threads: Optional[int] = None, pinned: Any = False,
               _hook: Optional[Callable[[], Any]] = None) -> Any:
    """:func:`tilestream.map_blocks` on the cluster, by shares of the inputs' rows
    (``block_rows`` rows each; default: four tasks per worker thread), each task under
    its own budget (``memory``, as for every function here); ``out`` is a ``.npy``,
    made whole beforehand and put in place when every task has succeeded. ``fn`` is
    measured once on the client (unless ``working=``) and sent to the workers, so it must
    pickle (cloudpickle takes lambdas and closures). ``pinned=`` page-locks the blocks on
    the workers (their GPUs), as :func:`tilestream.map_blocks` does; the client measures
    ``fn`` on plain memory, so it needs no GPU."""
    return _map_rows(fn, inputs, out, 0, "reflect", 0.0, dtype, shape, block, working,
                     client, block_rows, memory, threads, pinned, _hook)


def map_overlap(fn: Callable[..., Any], *inputs: Any, out: Any = None, halo: Any = 1,
                boundary: str = "reflect", cval: float = 0.0, dtype: Any = None,
                shape: Optional[tuple] = None, block: Any = None, working: Any = None,
                client: Any = None, block_rows: Optional[int] = None, memory: Any = "auto",
                threads: Optional[int] = None, pinned: Any = False,
                _hook: Optional[Callable[[], Any]] = None) -> Any:
    """:func:`tilestream.map_overlap` on the cluster, as :func:`map_blocks`: each task
    reads the halo of its blocks from the rows around its share, so the output equals
    one process's wherever ``fn`` looks at most ``halo`` positions away."""
    return _map_rows(fn, inputs, out, halo, boundary, cval, dtype, shape, block, working,
                     client, block_rows, memory, threads, pinned, _hook)


# ---------------------------------------------------------------------------------------
# many files


def _file_task(fn: Any, path: str, out: str, memory: Any,
               threads: Optional[int], kwargs: dict) -> dict:
    opts = json.loads(_task_opts(memory, threads))
    if isinstance(fn, tuple):
        # a pipeline file: (file, input name, output name)
        from . import run

        pipeline, i, o = fn
        reports = run(pipeline, inputs={i: path}, outputs={o: out}, memory=opts["memory"],
                      threads=opts["threads"], **kwargs)
        return reports[-1].as_dict() if reports else {}
    r = fn(path, out, memory=opts["memory"], threads=opts["threads"], **kwargs)
    report = getattr(r, "report", None)
    return report.as_dict() if report is not None else {}


def map_files(fn: Any, paths: Iterable[Any], out_dir: Any, *,
              suffix: Optional[str] = None, client: Any = None, memory: Any = "auto",
              threads: Optional[int] = None, **kwargs: Any) -> List[str]:
    """Runs ``fn(path, out, **kwargs)`` (a tilestream function: ``tilestream.stencil``,
    ``tilestream.convert``, ``tilestream.cast``...) on every file of ``paths``, one task
    each, writing ``out_dir/<name>`` (with its extension replaced by ``suffix`` if
    given). ``fn`` may also be a pipeline file (``.toml``) with one input and one output:
    each task runs its steps with the file as the input and ``out_dir/<name>`` as the
    output. Returns the output paths in the order of ``paths``. Each output appears
    atomically; a task retried after its worker died writes it again whole."""
    c = _client(client)
    if isinstance(fn, (str, os.PathLike)):
        pipeline = os.path.abspath(fn)
        ins, outs_ = _ts.pipeline_names(pipeline)
        if len(ins) != 1 or len(outs_) != 1:
            raise ValueError(
                f"tilestream.dask.map_files: {fn} has inputs {ins} and outputs {outs_}; "
                "a pipeline run per file needs exactly one of each"
            )
        fn = (pipeline, ins[0], outs_[0])
    out_dir = os.path.abspath(out_dir)
    os.makedirs(out_dir, exist_ok=True)
    jobs = []
    for p in paths:
        p = _where(p)
        name = os.path.basename(p.rstrip("/"))
        if suffix is not None:
            name = os.path.splitext(name)[0] + suffix
        jobs.append((p, os.path.join(out_dir, name)))
    outs = [o for _, o in jobs]
    if len(set(outs)) != len(outs):
        raise ValueError("tilestream.dask.map_files: two inputs have the same output name")
    job = uuid.uuid4().hex
    futures = [
        c.submit(_file_task, fn, p, o, memory, threads, kwargs,
                 key=f"tilestream-file-{job}-{i}", pure=False)
        for i, (p, o) in enumerate(jobs)
    ]
    try:
        c.gather(futures)
    except BaseException:
        c.cancel(futures)
        raise
    return outs
