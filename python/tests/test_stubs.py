"""The type stubs of the extension module (python/tilestream/_tilestream.pyi) hold what
the module has: the same functions and classes, each function with the same parameters
in the same order, the same ones optional. A function added to the binding without its
stub, or a stub left behind by a renamed parameter, fails here."""

import ast
import inspect
import sys
from pathlib import Path

import tilestream._tilestream as native

STUB = Path(__file__).resolve().parents[1] / "tilestream" / "_tilestream.pyi"


def stub_defs():
    tree = ast.parse(STUB.read_text())
    funcs, classes = {}, set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            a = node.args
            names = [p.arg for p in a.posonlyargs + a.args]
            optional = names[len(names) - len(a.defaults):] if a.defaults else []
            funcs[node.name] = (names, set(optional))
        elif isinstance(node, ast.ClassDef):
            classes.add(node.name)
    return funcs, classes


def module_defs():
    funcs, classes = {}, set()
    for name in dir(native):
        if name.startswith("_"):
            continue
        obj = getattr(native, name)
        if isinstance(obj, type):
            classes.add(name)
        elif callable(obj):
            params = inspect.signature(obj).parameters.values()
            names = [p.name for p in params]
            optional = {p.name for p in params if p.default is not inspect.Parameter.empty}
            funcs[name] = (names, optional)
    return funcs, classes


def test_the_stubs_name_what_the_module_has():
    sf, sc = stub_defs()
    mf, mc = module_defs()
    assert sorted(mf) == sorted(sf), "functions: module vs stub"
    assert sorted(mc) == sorted(sc), "classes: module vs stub"


def test_each_stub_has_the_parameters_of_its_function():
    sf, _ = stub_defs()
    mf, _ = module_defs()
    for name, (names, optional) in mf.items():
        assert sf[name][0] == names, f"{name}: parameters {sf[name][0]} in the stub, {names} in the module"
        assert sf[name][1] == optional, f"{name}: optional {sf[name][1]} in the stub, {optional} in the module"


def test_the_check_finds_a_stub_that_differs(tmp_path, monkeypatch):
    # the check is not vacuous: a renamed parameter and a missing function are seen
    text = STUB.read_text().replace("def row_step(shape", "def row_step(dims", 1)
    text = text.replace("def version() -> str: ...", "", 1)
    bad = tmp_path / "_tilestream.pyi"
    bad.write_text(text)
    monkeypatch.setattr(sys.modules[__name__], "STUB", bad)
    sf, _ = stub_defs()
    mf, _ = module_defs()
    assert "version" not in sf and "version" in mf
    assert sf["row_step"][0] != mf["row_step"][0]
