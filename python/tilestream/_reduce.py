"""Reductions and histograms of arrays larger than memory: :func:`tilestream.reduce` and
:func:`tilestream.histogram` (re-exported by the package), and the axis helpers
:mod:`tilestream.dask` shares with them."""

from __future__ import annotations

import json
import os
from typing import Any, Callable, List, Optional, Tuple

import numpy as np

from . import (  # the package's helpers: this module is imported once they are defined
    RunReport,
    Tensor,
    _execute,
    _np_dtype,
    _opts,
    _progress,
    _source,
    _specs,
    _ts,
    _with_nodata,
    open,
)


def _axes(axis: Any, ndim: int) -> Optional[List[int]]:
    """``axis`` (None, an int or a tuple of them, negative counting from the end) as the
    library takes it: None, or a list of axes in ``0..ndim``."""
    if axis is None:
        return None
    many = isinstance(axis, (tuple, list))
    axes = list(axis) if many else [axis]
    out = []
    for a in axes:
        if isinstance(a, bool) or not isinstance(a, (int, np.integer)):
            raise TypeError(f"tilestream: axis {a!r} is not an integer")
        if not -ndim <= a < ndim:
            raise ValueError(f"tilestream: axis {a} is out of range for {ndim} dimensions")
        out.append(int(a) % ndim)
    if len(set(out)) != len(out):
        raise ValueError(f"tilestream: axis={axis!r} names an axis twice")
    if many and not out:
        raise ValueError("tilestream: axis=() reduces nothing: give axes, or None for all")
    return out


def _keep(shape: Any, axes: Optional[List[int]], ndim: int) -> Tuple[int, ...]:
    """The result's shape with the reduced axes kept as length 1 (``keepdims=True``)."""
    reduced = set(range(ndim)) if axes is None else set(axes)
    it = iter(shape)
    return tuple(1 if k in reduced else next(it) for k in range(ndim))


def reduce(
    t: Any,
    op: str = "sum",
    axis: Any = None,
    *,
    keepdims: bool = False,
    ddof: int = 0,
    q: Any = None,
    method: Optional[str] = None,
    nodata: Any = None,
    memory: Any = None,
    threads: Optional[int] = None,
    device: Optional[str] = None,
    progress: Any = None,
    report: bool = False,
) -> Any:
    """Reduces ``t`` (``sum``, ``mean``, ``min``, ``max``, ``var``, ``std``, numpy's
    ``nansum``, ``nanmean``, ``nanmin``, ``nanmax``, ``nanvar``, ``nanstd``, and
    ``count`` of the elements that are not NaN; ``argmin`` and ``argmax``, numpy's: where
    the extreme first occurs, the first NaN if any, along one axis or as a flat index;
    ``nanargmin`` and ``nanargmax`` are numpy's too: a NaN stands as the infinity that
    never wins, and a slice of NaN alone is refused as numpy raises) over
    ``axis`` (None: every element; an int, or a tuple of them as numpy's
    ``axis=(0, 2, 3)``) under the budget ``memory``; ``keepdims=True`` keeps the reduced
    axes as length 1. Returns an np.ndarray in the reduction's result dtype (f64 for
    sums, means, variances of any real input; complex128 for the sums and means of a
    complex one, whose variances are f64; the input's for min and max; int64 for count,
    argmin and argmax), exactly the bytes
    ``tilestream reduce`` writes; with ``report=True``, a pair (array, RunReport).

    ``quantile`` (``q`` in [0, 1]), ``percentile`` (``q`` in [0, 100]), ``median`` and
    their ``nan`` forms are numpy's, value for value and dtype for dtype: ``q`` a number
    or a list (the result then has a leading axis of them), ``method`` one of
    ``linear`` (default), ``lower``, ``higher``, ``nearest``, ``midpoint``. They are
    exact: each rank's value is selected by counting digits of the values over a few
    passes of the file (one for 8- and 16-bit data, two for 32-bit, four for 64-bit),
    never by sorting a copy:
    ``ts.reduce(scene, "percentile", axis=(1, 2), q=[2, 98])``. ``median`` and
    ``nanmedian`` also take complex inputs (numpy's order: real part, then imaginary part;
    four passes for complex64, eight for complex128), bit for bit as numpy; quantiles and
    percentiles of complex inputs are refused, as numpy refuses them.

    Nodata: the ``nan`` forms, ``count`` and the ``nan`` quantiles leave out the input's
    nodata pixels as they leave out NaN (GDAL's statistics skip them the same way); the
    plain forms take every element, as numpy does. The nodata value is a GeoTIFF's GDAL
    nodata tag, or ``nodata=`` (``-9999``, ``"nan"``; ``"none"`` for none) in place of
    what the file says. An integer input's ``nanmin``/``nanmax`` (and ``lower``,
    ``higher``, ``nearest`` quantiles) of a slice of nodata alone is the nodata value;
    float results are NaN there."""
    src = _with_nodata(_source(t), nodata)
    ndim = len(t.shape) if isinstance(t, (Tensor, np.ndarray)) else open(src["path"]).ndim
    axes = _axes(axis, ndim)
    if isinstance(ddof, bool) or not isinstance(ddof, int) or ddof < 0:
        raise ValueError(f"tilestream: ddof={ddof!r} is not a non-negative integer")
    qs, scalar = None, False
    if q is not None:
        scalar = np.ndim(q) == 0
        qs = [float(v) for v in np.atleast_1d(np.asarray(q, dtype=np.float64)).ravel()]
    data, name, shape, rep = _ts.reduce(
        json.dumps(src), op, axes, ddof, _opts(memory, threads, device), _progress(progress),
        qs, scalar, method,
    )
    a = np.frombuffer(data, dtype=_np_dtype(name)).reshape(shape).copy()
    if keepdims:
        lead = shape[:1] if qs is not None and not scalar else []
        a = a.reshape(tuple(lead) + _keep(shape[len(lead):], axes, ndim))
    return (a, RunReport(json.loads(rep))) if report else a


def histogram(
    t: Any,
    bins: Any = 10,
    range: Any = None,
    axis: Any = None,
    *,
    nodata: Any = None,
    memory: Any = None,
    threads: Optional[int] = None,
    progress: Any = None,
    report: bool = False,
) -> Any:
    """numpy's ``np.histogram(t, bins, range)`` of an array of any size, within the
    budget ``memory``: ``(counts, edges)``, the same values and dtypes as numpy's.
    ``bins`` is a count of equal bins or their edges; ``range`` the equal bins' outer
    edges (default: the data's minimum and maximum). ``axis`` (an int or a tuple, as the
    reductions take it) counts over those axes per position of the others:
    ``ts.histogram(scene, 256, axis=(1, 2))`` gives one histogram per band, counts of shape
    ``(bands, 256)``, and, with no ``range``, edges of shape ``(bands, 257)``, each band's
    over its own extremes (as ``np.histogram(scene[b], 256)`` band by band). NaN is never
    counted (an automatic range over NaN is refused, as numpy raises); the input's nodata
    pixels (a GeoTIFF's, or ``nodata=``) are left out (with a nodata value, NaN is left
    out of the automatic range too, as the nan reductions leave it out). ``range`` is
    taken as Python floats are (numpy scalars such as ``np.float32`` bounds, which numpy
    computes with in their own type, are taken as Python floats too). With
    ``report=True``, a pair ``((counts, edges), RunReport)``."""
    src = _with_nodata(_source(t), nodata)
    if axis is not None:
        ndim = len(t.shape) if isinstance(t, (Tensor, np.ndarray)) else open(src["path"]).ndim
        axis = _axes(axis, ndim)
    b, rng = _histogram_bins(bins, range)
    counts, edges, rep = _histogram_run(
        _specs.histogram(src, "", b, range=rng, axis=axis),
        lambda spec: _execute(spec, None, {"memory": memory, "threads": threads,
                                           "progress": progress}))
    if not isinstance(b, int):
        # numpy gives back the edges as given
        edges = np.asarray(bins)
    return ((counts, edges), rep) if report else (counts, edges)


def _histogram_bins(bins: Any, range: Any) -> Tuple[Any, Optional[Tuple[float, float]]]:
    """numpy's ``bins`` and ``range`` as the histogram spec takes them."""
    if isinstance(bins, (int, np.integer)) and not isinstance(bins, bool):
        b: Any = int(bins)
    else:
        b = [float(v) for v in np.asarray(bins, dtype=np.float64).ravel()]
    rng = None if range is None else (float(range[0]), float(range[1]))
    if rng is not None and not all(np.isfinite(rng)):
        # JSON holds no infinity: refused here as the library refuses it
        raise ValueError(f"tilestream: histogram range [{rng[0]}, {rng[1]}] is not finite")
    return b, rng


def _histogram_run(spec: Any, run: Callable[[Any], Any]) -> Tuple[np.ndarray, np.ndarray, Any]:
    """Runs the histogram ``spec`` (``run(spec)``) into a temporary ``.npz``: its counts,
    edges and what ``run`` returned."""
    import tempfile

    with tempfile.TemporaryDirectory(prefix="tilestream-hist-") as d:
        spec = {**spec, "output": os.path.join(d, "h.npz")}
        rep = run(spec)
        with np.load(spec["output"]) as z:
            return z["counts"], z["edges"], rep
