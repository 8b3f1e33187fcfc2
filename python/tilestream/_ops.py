"""The operations that write an output file — :func:`tilestream.map`, ``cast``,
``affine``, ``clip``, ``convert``, ``standardize``, ``matmul``, ``stencil``,
``transpose``, ``tiles`` and ``gen`` (re-exported by the package): each builds its spec
through :mod:`tilestream._specs` and runs it with the package's common options."""

from __future__ import annotations

import os
from typing import Any, Mapping, Optional

import numpy as np

from . import (  # the package's helpers: this module is imported once they are defined
    PathLike,
    Tensor,
    _axes,
    _check_kw,
    _execute,
    _nodata_spec,
    _source,
    _specs,
    _ts_dtype,
    open,
)

#: The operations of this module, which the package re-exports as they are (a new
#: operation is a function here and its name in this list).
__all__ = [
    "affine",
    "cast",
    "clip",
    "convert",
    "gen",
    "map",
    "matmul",
    "standardize",
    "stencil",
    "tiles",
    "transpose",
]


def map(
    expr: str,
    out: PathLike,
    inputs: Mapping[str, Any],
    *,
    dtype: Any = None,
    nodata: Any = None,
    ignore_nodata: bool = False,
    input_nodata: Optional[Mapping[str, Any]] = None,
    **kw: Any,
) -> Any:
    """Evaluates the elementwise expression ``expr`` (``"(b4 - b3) / (b4 + b3)"``,
    ``"where(x > 0, sqrt(x), 0)"``; inputs by name, ``s[3]`` for band 3 of ``s``) into
    ``out``. Returns the output Tensor (its ``report`` is the run's).

    Complex inputs and values (``2j``, ``complex(re, im)``) take ``+ - * / **``,
    comparisons, ``abs isnan min max clip where round``, ``sqrt exp log log1p sin cos
    tanh`` and ``real imag conj angle`` (``"abs(s[0] * conj(s[1]))"``), computed bit for
    bit as numpy computes complex128 (numpy's ``z ** 2``, ``z ** -1`` and ``z ** 0.5``
    for a number exponent, ``np.power`` otherwise); ``floor ceil atan2 fma``, which numpy
    does not define on complex values, are refused. A complex value is written as
    complex64 or complex128 (numpy's dtypes).

    Where an input is nodata (a GeoTIFF pixel equal to its GDAL nodata value) the output
    is ``nodata`` (a number or ``"nan"``; by default NaN for a float output and the
    inputs' shared nodata value for an integer one), which a GeoTIFF output carries as
    its nodata. ``input_nodata={"x": -9999}`` gives an input's nodata value where its file
    cannot (``.npy``, raw, numpy arrays; ``None``: it has none). ``ignore_nodata=True``
    computes those pixels like any other: give it to fill them yourself
    (``where(isnan(x), 0, x)`` is masked again without it)."""
    _check_kw("map", kw)
    spec = _specs.map(expr, [(k, _source(v)) for k, v in inputs.items()], os.fspath(out),
                      dtype=_ts_dtype(dtype),
                      nodata=_nodata_spec(nodata, ignore_nodata, input_nodata))
    return _execute(spec, out, kw)


def cast(t: Any, out: PathLike, dtype: Any, **kw: Any) -> Any:
    """Casts ``t`` to ``dtype`` into ``out`` (round to nearest even; integers saturate)."""
    _check_kw("cast", kw)
    return _execute(_specs.cast(_source(t), os.fspath(out), _ts_dtype(dtype)), out, kw)


def affine(t: Any, out: PathLike, scale: float = 1.0, offset: float = 0.0, *, dtype: Any = None,
           nodata: Any = None, ignore_nodata: bool = False, **kw: Any) -> Any:
    """``scale * t + offset`` (rounded once) into ``out``. Pixels where ``t`` is nodata are
    masked as in :func:`map` (``nodata=``, ``ignore_nodata=``)."""
    _check_kw("affine", kw)
    spec = _specs.affine(_source(t), os.fspath(out), scale, offset, dtype=_ts_dtype(dtype),
                         nodata=_nodata_spec(nodata, ignore_nodata))
    return _execute(spec, out, kw)


def clip(t: Any, out: PathLike, lo: float, hi: float, *, dtype: Any = None, **kw: Any) -> Any:
    """Limits each element of ``t`` to ``[lo, hi]`` into ``out`` (``np.clip``), in ``t``'s
    dtype unless ``dtype=`` says otherwise. Pixels where ``t`` is nodata stay nodata."""
    _check_kw("clip", kw)
    spec = _specs.clip(_source(t), os.fspath(out), lo, hi, dtype=_ts_dtype(dtype))
    return _execute(spec, out, kw)


def convert(t: Any, out: PathLike, *, dtype: Any = None, **kw: Any) -> Any:
    """Converts ``t`` to the format of ``out``'s name (``.npy``, ``.tif``, ``.zarr``, raw)
    or ``format=``, optionally casting."""
    _check_kw("convert", kw)
    spec = _specs.convert(_source(t), os.fspath(out), dtype=_ts_dtype(dtype))
    return _execute(spec, out, kw)


def standardize(t: Any, out: PathLike, *, ddof: int = 0, dtype: Any = None,
                stats: Optional[PathLike] = None, axis: Any = None, **kw: Any) -> Any:
    """``(t - mean) / std`` into ``out`` (two passes), per column by default (the
    statistics over axis 0), or with the statistics over ``axis`` (numpy's
    ``x.mean(axis=axis, keepdims=True)``): ``axis=(0, 2, 3)`` of an NCHW batch is the
    per-channel normalisation, one mean and std per channel; the axes left must be
    adjacent. The statistics go to ``stats`` (``.npz``, in the kept axes' shape) if
    given."""
    _check_kw("standardize", kw)
    ax = None
    if axis is not None:
        shape = t.shape if isinstance(t, (Tensor, np.ndarray)) else open(_source(t)["path"]).shape
        ax = _axes(axis, len(shape))
        ax = ax[0] if len(ax) == 1 else ax
    spec = _specs.standardize(_source(t), os.fspath(out), ddof=ddof, dtype=_ts_dtype(dtype),
                              stats=None if stats is None else os.fspath(stats), axis=ax)
    return _execute(spec, out, kw)


def matmul(x: Any, w: Any, out: PathLike, *, dtype: Any = None, **kw: Any) -> Any:
    """``x @ w`` into ``out``, ``x`` streamed by rows and ``w`` held in memory."""
    _check_kw("matmul", kw)
    spec = _specs.matmul(_source(x), _source(w), os.fspath(out), dtype=_ts_dtype(dtype))
    return _execute(spec, out, kw)


def stencil(t: Any, out: PathLike, filter: str, *, boundary: str = "reflect",
            dtype: Any = None, **kw: Any) -> Any:
    """A neighbourhood filter (``gaussian:sigma=2``, ``box:size=5``, ``sobel``,
    ``median:size=3``, ``convolve:KERNEL.npy``) over the last two axes, with halo'd
    tiles, into ``out``."""
    _check_kw("stencil", kw)
    spec = _specs.stencil(_source(t), os.fspath(out), filter, boundary=boundary,
                          dtype=_ts_dtype(dtype))
    return _execute(spec, out, kw)


def transpose(t: Any, out: PathLike, **kw: Any) -> Any:
    """Swaps the last two axes of ``t`` into ``out``."""
    _check_kw("transpose", kw)
    return _execute(_specs.transpose(_source(t), os.fspath(out)), out, kw)


def tiles(t: Any, outdir: PathLike, size: int, *, overlap: int = 0, edge: str = "shift",
          patch_format: str = "npy", **kw: Any) -> Any:
    """Cuts an image into ``size`` x ``size`` patch files (and ``index.csv``) in
    ``outdir``. Returns the RunReport."""
    _check_kw("tiles", kw)
    spec = _specs.tiles(_source(t), os.fspath(outdir), size, overlap=overlap, edge=edge,
                        patch_format=patch_format)
    return _execute(spec, None, kw)


def gen(out: PathLike, shape: tuple, dtype: Any = "f32", *, seed: int = 0, dist: str = "demo",
        mean: Optional[float] = None, std: Optional[float] = None, low: Optional[float] = None,
        high: Optional[float] = None, **kw: Any) -> Any:
    """Writes reproducible random data of ``shape`` to ``out``: ``dist="demo"`` (the
    default) draws N(col/100, 1), so each column's mean is its index over 100;
    ``"normal"`` draws N(mean, std²) (defaults 0 and 1); ``"uniform"`` draws from
    [low, high) (defaults 0 and 1). The values depend only on ``seed`` and the
    distribution, never on the budget, the threads or the device (``device="cuda"``
    writes the same bytes). Returns the RunReport."""
    _check_kw("gen", kw)
    spec = _specs.generate(os.fspath(out), list(shape), _ts_dtype(dtype), seed=seed, dist=dist,
                           mean=mean, std=std, low=low, high=high)
    return _execute(spec, out, kw)
