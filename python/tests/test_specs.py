"""The typed specs of ``tilestream._specs`` against the library's vocabulary: the same
operations, and every builder's output read by the library as it is (no key unknown to
it, none it needs missing) with exactly the keys its TypedDict declares."""

import json
import typing

import pytest

from tilestream import _specs, _tilestream as _ts

SRC = {"path": "x.npy"}

#: One call of each builder, as the package's functions make them.
BUILT = {
    "reduce": _specs.reduce(SRC, "o.npy", "mean", axis=0),
    "affine": _specs.affine(SRC, "o.npy", 2.0, 1.0, nodata={"nodata": "nan",
                                                          "ignore_nodata": True}),
    "cast": _specs.cast(SRC, "o.npy", "f16"),
    "convert": _specs.convert(SRC, "o.tif"),
    "map": _specs.map("x * 2", [("x", SRC)], "o.npy",
                      nodata={"ignore_nodata": False, "input_nodata": [["x", "-9999"]]}),
    "matmul": _specs.matmul(SRC, {"path": "w.npy"}, "o.npy"),
    "standardize": _specs.standardize(SRC, "o.npy", given=({"path": "m.npy"},
                                                           {"path": "s.npy"})),
    "stencil": _specs.stencil(SRC, "o.npy", "gaussian:sigma=2"),
    "histogram": _specs.histogram(SRC, "h.npz", 16, range=(0.0, 1.0), axis=[1, 2]),
    "transpose": _specs.transpose(SRC, "o.npy"),
    "tiles": _specs.tiles(SRC, "patches", 256, overlap=16),
    "generate": _specs.generate("o.npy", [4, 5], "f32", dist="normal", mean=1.0),
    "clip": _specs.clip(SRC, "o.npy", 0.0, 1.0),
    "function": _specs.function([SRC, {"path": "m.npy"}], "o.npy", "filters:smooth",
                                halo=[8, 8], boundary="wrap", working="64MiB"),
}


def test_the_typed_specs_are_the_librarys_operations():
    assert sorted(_specs.SPECS) == sorted(_ts.op_names())
    assert sorted(BUILT) == sorted(_ts.op_names())


@pytest.mark.parametrize("name", sorted(BUILT))
def test_each_builder_gives_what_the_library_reads(name):
    spec = BUILT[name]
    assert spec["op"] == name
    typed = _specs.SPECS[name]
    hints = typing.get_type_hints(typed)
    # no key the TypedDict does not declare, and every key it requires
    assert set(spec) <= set(hints), set(spec) - set(hints)
    assert typed.__required_keys__ <= set(spec), typed.__required_keys__ - set(spec)
    # the library reads it, and writes back no key the TypedDict does not declare
    back = json.loads(_ts.normalize_spec(json.dumps(spec)))
    assert back["op"] == name
    assert set(back) <= set(hints), set(back) - set(hints)
    assert typed.__required_keys__ <= set(back)


def test_a_key_the_library_does_not_know_is_refused():
    spec = dict(BUILT["stencil"], sigma=2)
    with pytest.raises(ValueError, match="sigma"):
        _ts.normalize_spec(json.dumps(spec))
