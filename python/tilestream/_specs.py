"""The operation vocabulary on the Python side: one ``TypedDict`` per operation mirroring
its spec in the Rust library (``src/spec/ops/<op>.rs``, serialised with an ``"op"`` tag),
and one builder per operation that the package's functions and :mod:`tilestream.dask`
both call, so a spec is written in one place (as pydantic-core's ``core_schema.py``
does). :data:`SPECS` lists them by the operation's name; ``python/tests/test_specs.py``
checks it against the library's own list and each builder's output against the
library's reading of it.
"""

from typing import Any, Dict, List, Literal, Optional, Tuple, Type, TypedDict, Union


class RawLayout(TypedDict, total=False):
    """Shape and dtype of a raw (headerless) input; ``offset`` where the data starts."""

    shape: List[int]
    dtype: str
    offset: int


class _SourceBase(TypedDict):
    path: str


class Source(_SourceBase, total=False):
    """Where an operation reads a tensor: a file, a raw file's layout, a box of it, the
    rows of a cluster task's share."""

    raw: RawLayout
    rows: Tuple[int, int]
    nodata: str  # in place of the file's nodata value: "-9999", "nan", "none"
    window: List[Tuple[int, int]]  # [start, stop) of each of the last axes, before rows


class _ReduceBase(TypedDict):
    op: Literal["reduce"]
    input: Source
    output: str
    reduce: str
    ddof: int
    axis: Union[None, int, List[int]]
    dtype: Optional[str]


class ReduceSpec(_ReduceBase, total=False):
    keepdims: bool  # the library writes it only when true
    q: Union[float, List[float]]  # quantile, percentile and their nan forms
    method: str  # linear, lower, higher, nearest, midpoint


class _AffineBase(TypedDict):
    op: Literal["affine"]
    input: Source
    output: str
    scale: float
    offset: float
    dtype: Optional[str]
    ignore_nodata: bool


class AffineSpec(_AffineBase, total=False):
    nodata: str


class CastSpec(TypedDict):
    op: Literal["cast"]
    input: Source
    output: str
    dtype: str


class ConvertSpec(TypedDict):
    op: Literal["convert"]
    input: Source
    output: str
    dtype: Optional[str]


class _MapBase(TypedDict):
    op: Literal["map"]
    expr: str
    inputs: List[Tuple[str, Source]]
    output: str
    dtype: Optional[str]
    ignore_nodata: bool


class MapSpec(_MapBase, total=False):
    nodata: str
    input_nodata: List[Tuple[str, Optional[str]]]


class MatmulSpec(TypedDict):
    op: Literal["matmul"]
    x: Source
    w: Source
    output: str
    dtype: Optional[str]


class _StandardizeBase(TypedDict):
    op: Literal["standardize"]
    input: Source
    output: str
    ddof: int
    dtype: Optional[str]
    stats: Optional[str]


class StandardizeSpec(_StandardizeBase, total=False):
    given: Tuple[Source, Source]
    axis: Union[int, List[int]]  # the statistics' axes (default 0); [0, 2, 3]: per channel


class _HistogramBase(TypedDict):
    op: Literal["histogram"]
    input: Source
    output: str  # an .npz of counts and edges
    bins: Union[int, List[float]]  # how many equal bins, or their edges


class HistogramSpec(_HistogramBase, total=False):
    range: Tuple[float, float]  # the equal bins' outer edges; default each output's own
    axis: Union[int, List[int]]  # counted over these (per band: [1, 2]); default all
    # with a count of bins and no range: each output's [min, max] (None: nothing to
    # count) to take the automatic range of, in place of the input's own (Dask's shares)
    extremes: List[Optional[Tuple[Union[int, float], Union[int, float]]]]


class StencilSpec(TypedDict):
    op: Literal["stencil"]
    input: Source
    output: str
    filter: str
    boundary: str
    dtype: Optional[str]


class TransposeSpec(TypedDict):
    op: Literal["transpose"]
    input: Source
    output: str


class TilesSpec(TypedDict):
    op: Literal["tiles"]
    input: Source
    outdir: str
    size: int
    overlap: int
    edge: str
    patch_format: str


class _GenerateBase(TypedDict):
    op: Literal["generate"]
    output: str
    shape: List[int]
    dtype: str
    seed: int
    dist: str


class GenerateSpec(_GenerateBase, total=False):
    mean: Optional[float]
    std: Optional[float]
    low: Optional[float]
    high: Optional[float]


class ClipSpec(TypedDict):
    op: Literal["clip"]
    input: Source
    output: str
    lo: float
    hi: float
    dtype: Optional[str]


class _FunctionBase(TypedDict):
    op: Literal["function"]
    input: List[Source]
    output: str
    function: str


class FunctionSpec(_FunctionBase, total=False):
    """A function of your own over blocks, named ``module:function`` (a pipeline's
    ``function`` step, which ``tilestream.run`` calls)."""

    halo: List[int]
    boundary: str
    cval: float
    dtype: Optional[str]
    shape: Optional[List[int]]
    block: Optional[List[int]]
    working: Optional[Union[float, str]]
    threads: Optional[int]


OpSpec = Union[ReduceSpec, AffineSpec, CastSpec, ConvertSpec, MapSpec, MatmulSpec,
               StandardizeSpec, StencilSpec, TransposeSpec, TilesSpec, GenerateSpec, ClipSpec,
               FunctionSpec]

#: Every operation's spec type, by its ``"op"`` name.
SPECS: Dict[str, Type] = {
    "reduce": ReduceSpec,
    "affine": AffineSpec,
    "cast": CastSpec,
    "convert": ConvertSpec,
    "map": MapSpec,
    "matmul": MatmulSpec,
    "standardize": StandardizeSpec,
    "histogram": HistogramSpec,
    "stencil": StencilSpec,
    "transpose": TransposeSpec,
    "tiles": TilesSpec,
    "generate": GenerateSpec,
    "clip": ClipSpec,
    "function": FunctionSpec,
}


def _with_nodata(spec: dict, nodata: Dict[str, object]) -> dict:
    spec.update(nodata)
    return spec


def reduce(input: Source, output: str, reduce: str, *, ddof: int = 0,
           axis: Union[None, int, List[int]] = None, keepdims: bool = False,
           dtype: Optional[str] = None, q: Union[None, float, List[float]] = None,
           method: Optional[str] = None) -> ReduceSpec:
    if isinstance(axis, (list, tuple)) and len(axis) == 1:
        axis = axis[0]
    spec: ReduceSpec = {"op": "reduce", "input": input, "output": output, "reduce": reduce,
                        "ddof": int(ddof),
                        "axis": list(axis) if isinstance(axis, tuple) else axis,
                        "keepdims": bool(keepdims), "dtype": dtype}
    if q is not None:
        spec["q"] = [float(v) for v in q] if isinstance(q, (list, tuple)) else float(q)
    if method is not None:
        spec["method"] = method
    return spec


def affine(input: Source, output: str, scale: float, offset: float, *,
           dtype: Optional[str] = None, nodata: Optional[Dict[str, object]] = None
           ) -> AffineSpec:
    """``nodata``: the ``nodata``/``ignore_nodata`` keys of the call's nodata rule."""
    spec = {"op": "affine", "input": input, "output": output, "scale": float(scale),
            "offset": float(offset), "dtype": dtype, "ignore_nodata": False}
    return _with_nodata(spec, nodata or {})  # type: ignore[return-value]


def cast(input: Source, output: str, dtype: str) -> CastSpec:
    return {"op": "cast", "input": input, "output": output, "dtype": dtype}


def convert(input: Source, output: str, *, dtype: Optional[str] = None) -> ConvertSpec:
    return {"op": "convert", "input": input, "output": output, "dtype": dtype}


def map(expr: str, inputs: List[Tuple[str, Source]], output: str, *,
        dtype: Optional[str] = None, nodata: Optional[Dict[str, object]] = None) -> MapSpec:
    """``nodata``: the ``nodata``/``ignore_nodata``/``input_nodata`` keys of the rule."""
    spec = {"op": "map", "expr": expr, "inputs": [[n, s] for n, s in inputs],
            "output": output, "dtype": dtype, "ignore_nodata": False}
    return _with_nodata(spec, nodata or {})  # type: ignore[return-value]


def matmul(x: Source, w: Source, output: str, *, dtype: Optional[str] = None) -> MatmulSpec:
    return {"op": "matmul", "x": x, "w": w, "output": output, "dtype": dtype}


def standardize(input: Source, output: str, *, ddof: int = 0, dtype: Optional[str] = None,
                stats: Optional[str] = None,
                given: Optional[Tuple[Source, Source]] = None,
                axis: Optional[Union[int, List[int]]] = None) -> StandardizeSpec:
    spec: dict = {"op": "standardize", "input": input, "output": output, "ddof": int(ddof),
                  "dtype": dtype, "stats": stats}
    if given is not None:
        spec["given"] = [given[0], given[1]]
    if axis is not None:
        spec["axis"] = axis
    return spec  # type: ignore[return-value]


def histogram(input: Source, output: str, bins: Union[int, List[float]] = 10, *,
              range: Optional[Tuple[float, float]] = None,
              axis: Union[None, int, List[int]] = None,
              extremes: Optional[List[Any]] = None) -> HistogramSpec:
    spec: HistogramSpec = {"op": "histogram", "input": input, "output": output,
                           "bins": bins if isinstance(bins, int) else [float(v) for v in bins]}
    if range is not None:
        spec["range"] = (float(range[0]), float(range[1]))
    if axis is not None:
        spec["axis"] = axis[0] if isinstance(axis, (list, tuple)) and len(axis) == 1 else \
            list(axis) if isinstance(axis, (list, tuple)) else axis
    if extremes is not None:
        spec["extremes"] = list(extremes)
    return spec


def stencil(input: Source, output: str, filter: str, *, boundary: str = "reflect",
            dtype: Optional[str] = None) -> StencilSpec:
    return {"op": "stencil", "input": input, "output": output, "filter": filter,
            "boundary": boundary, "dtype": dtype}


def transpose(input: Source, output: str) -> TransposeSpec:
    return {"op": "transpose", "input": input, "output": output}


def tiles(input: Source, outdir: str, size: int, *, overlap: int = 0, edge: str = "shift",
          patch_format: str = "npy") -> TilesSpec:
    return {"op": "tiles", "input": input, "outdir": outdir, "size": int(size),
            "overlap": int(overlap), "edge": edge, "patch_format": patch_format}


def generate(output: str, shape: List[int], dtype: str, *, seed: int = 0, dist: str = "demo",
             mean: Optional[float] = None, std: Optional[float] = None,
             low: Optional[float] = None, high: Optional[float] = None) -> GenerateSpec:
    spec: dict = {"op": "generate", "output": output, "shape": [int(s) for s in shape],
                  "dtype": dtype, "seed": int(seed), "dist": str(dist)}
    for name, value in (("mean", mean), ("std", std), ("low", low), ("high", high)):
        if value is not None:
            spec[name] = float(value)
    return spec  # type: ignore[return-value]


def clip(input: Source, output: str, lo: float, hi: float, *,
         dtype: Optional[str] = None) -> ClipSpec:
    return {"op": "clip", "input": input, "output": output, "lo": float(lo), "hi": float(hi),
            "dtype": dtype}


def function(inputs: List[Source], output: str, function: str, *,
             halo: Optional[List[int]] = None, boundary: str = "reflect", cval: float = 0.0,
             dtype: Optional[str] = None, shape: Optional[List[int]] = None,
             block: Optional[List[int]] = None, working: Optional[Union[float, str]] = None,
             threads: Optional[int] = None) -> FunctionSpec:
    return {"op": "function", "input": list(inputs), "output": output, "function": function,
            "halo": [int(h) for h in (halo or [])], "boundary": boundary, "cval": float(cval),
            "dtype": dtype, "shape": None if shape is None else [int(s) for s in shape],
            "block": None if block is None else [int(b) for b in block],
            "working": working, "threads": threads}
