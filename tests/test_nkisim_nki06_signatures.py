"""Every signature of AWS's NKI 0.6 API stubs against nkisim's current-API front end: parameter names, their order,
kinds and defaults, for each function of ``nki``, ``nki.language``, ``nki.isa`` and ``nki.collectives`` and each
public method of their classes, and each documented enum member and class attribute.

The stubs are read from a copy of the aws-neuron-sdk repository (``nki/api/nki/**/__init__.py``; a checkout or a
bare git directory, ``NKISIM_AWS_NEURON_SDK``, default the staff machine's mirror) and parsed, never imported or
copied; without the copy the tests skip.  A default is compared by value: the stub's expression (``engine.unknown``,
``sbuf``, ``maximum``) is evaluated among nkisim's own names.  The differences nkisim keeps on purpose are listed in
``KEPT`` with the reason.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import os
import shutil
import subprocess
from pathlib import Path

import pytest

SDK = Path(os.environ.get("NKISIM_AWS_NEURON_SDK", "/work/.mirror/aws-neuron+aws-neuron-sdk/repo"))
STUBS = {"nki": "nki/api/nki/__init__.py", "nki.isa": "nki/api/nki/isa/__init__.py",
         "nki.language": "nki/api/nki/language/__init__.py", "nki.collectives": "nki/api/nki/collectives/__init__.py"}
NO_DEFAULT = object()

# Differences kept on purpose: (module, qualified name) -> why.
KEPT = {
    # the constructor binds nkisim's storage; kernels make tensors with nl.ndarray ("Most code should use nl.ndarray")
    ("nki.language", "NkiTensor.__init__"): "constructor over nkisim's storage",
    # t.reshape((a, b)) as the stub, and t.reshape(a, b) as NumPy, both work
    ("nki.language", "NkiTensor.reshape"): "also takes the shape unpacked",
    # NeuronCore-v4 (trn3) only: placeholders raising "nkisim does not support X yet" (python -m nkisim.apicoverage)
    ("nki.isa", "nc_matmul_mx"): "trn3 only", ("nki.isa", "activate2"): "trn3 only",
    ("nki.isa", "rand2"): "trn3 only", ("nki.isa", "exponential"): "trn3 only",
    ("nki.isa", "quantize_mx"): "trn3 only", ("nki.language", "NkiTensor.indirect"): "trn3 only",
}


def _source(rel: str) -> str | None:
    if (SDK / rel).is_file():
        return (SDK / rel).read_text(encoding="utf-8")
    if (SDK / "HEAD").is_file() and shutil.which("git"):
        r = subprocess.run(["git", "-C", str(SDK), "show", f"HEAD:{rel}"], capture_output=True, text=True,
                           check=False)
        if r.returncode == 0:
            return r.stdout
    return None


def _stub(mod: str) -> ast.Module:
    text = _source(STUBS[mod])
    if text is None:
        pytest.skip(f"aws-neuron-sdk not found at {SDK} (set NKISIM_AWS_NEURON_SDK)")
    return ast.parse(text)


def _functions(tree: ast.Module):
    """(qualified name, class name or None, FunctionDef) of every documented function and public method."""
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            yield node.name, None, node
        elif isinstance(node, ast.ClassDef):
            for sub in node.body:
                if isinstance(sub, ast.FunctionDef) and (not sub.name.startswith("_") or sub.name == "__init__") \
                        and not any(isinstance(d, ast.Name) and d.id == "property" for d in sub.decorator_list):
                    yield f"{node.name}.{sub.name}", node.name, sub


def _stub_params(fn: ast.FunctionDef) -> list[tuple[str, str, object]]:
    a = fn.args
    pos = a.posonlyargs + a.args
    defaults = [NO_DEFAULT] * (len(pos) - len(a.defaults)) + list(a.defaults)
    out = [(p.arg, "positional", d) for p, d in zip(pos, defaults)]
    if a.vararg:
        out.append((a.vararg.arg, "*", NO_DEFAULT))
    out += [(p.arg, "keyword", NO_DEFAULT if d is None else d) for p, d in zip(a.kwonlyargs, a.kw_defaults)]
    if a.kwarg:
        out.append((a.kwarg.arg, "**", NO_DEFAULT))
    return [p for p in out if p[0] not in ("self", "cls")]


_KIND = {inspect.Parameter.POSITIONAL_ONLY: "positional", inspect.Parameter.POSITIONAL_OR_KEYWORD: "positional",
         inspect.Parameter.VAR_POSITIONAL: "*", inspect.Parameter.KEYWORD_ONLY: "keyword",
         inspect.Parameter.VAR_KEYWORD: "**"}


def _ours(obj) -> list[tuple[str, str, object]]:
    sig = inspect.signature(obj)
    # ``**removed``: nkisim's catch-all that names the replacement of a keyword NKI removed (mask=, dtype=)
    return [(p.name, _KIND[p.kind], NO_DEFAULT if p.default is p.empty else p.default)
            for p in sig.parameters.values() if p.name not in ("self", "removed")]


def _namespace() -> dict:
    import nki
    import nki.collectives as ncol
    import nki.isa as nisa
    import nki.language as nl

    ns = {}
    for m in (nki, ncol, nl, nisa):
        ns.update({k: getattr(m, k) for k in dir(m) if not k.startswith("__")})
    return ns


def _same_default(stub_expr, ours, ns) -> bool:
    if stub_expr is NO_DEFAULT or ours is NO_DEFAULT:
        return stub_expr is NO_DEFAULT and ours is NO_DEFAULT
    if isinstance(stub_expr, ast.Constant) and stub_expr.value is Ellipsis:
        return True  # the stub elides the default
    want = eval(compile(ast.Expression(stub_expr), "<stub>", "eval"), ns)  # noqa: S307 - AWS's stub expression
    if isinstance(want, (list, tuple)) and isinstance(ours, (list, tuple)):
        return tuple(want) == tuple(ours)
    return want is ours or want == ours


@pytest.mark.parametrize("mod", sorted(STUBS))
def test_signatures_match_the_stubs(mod):
    tree = _stub(mod)
    module = importlib.import_module(mod)
    ns = _namespace()
    problems, checked = [], 0
    for qual, cls, fn in _functions(tree):
        if (mod, qual) in KEPT:
            continue
        owner = getattr(module, cls) if cls else module
        obj = getattr(owner, fn.name, None)
        if obj is None:
            problems.append(f"{mod}.{qual}: missing")
            continue
        stub, ours = _stub_params(fn), _ours(obj)
        checked += 1
        want, got = [(n, k) for n, k, _ in stub], [(n, k) for n, k, _ in ours]
        if want != got:
            problems.append(f"{mod}.{qual}: parameters {want} != {got}")
            continue
        for (name, _, d), (_, _, o) in zip(stub, ours):
            if not _same_default(d, o, ns):
                shown = "none" if d is NO_DEFAULT else ast.unparse(d)
                problems.append(f"{mod}.{qual}: default of {name} is {o!r}, the stub's {shown}")
    assert checked > 0
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("mod", sorted(STUBS))
def test_enum_members_and_class_attributes_exist(mod):
    """Each class attribute of the stubs (enum members with their values, ``tile_size`` fields, ``NkiTensor``
    attributes) exists in nkisim; enum members carry the stub's value."""
    tree = _stub(mod)
    module = importlib.import_module(mod)
    problems = []
    for node in tree.body:
        if not isinstance(node, ast.ClassDef) or (mod, node.name) in KEPT:
            continue
        cls = getattr(module, node.name, None)
        if cls is None:
            problems.append(f"{mod}.{node.name}: missing")
            continue
        for sub in node.body:
            targets = [t.id for t in sub.targets if isinstance(t, ast.Name)] if isinstance(sub, ast.Assign) else \
                [sub.target.id] if isinstance(sub, ast.AnnAssign) and isinstance(sub.target, ast.Name) else \
                [sub.name] if isinstance(sub, ast.FunctionDef) and any(
                    isinstance(d, ast.Name) and d.id == "property" for d in sub.decorator_list) else []
            for name in targets:
                if (mod, f"{node.name}.{name}") in KEPT:
                    continue
                if not hasattr(cls, name):
                    problems.append(f"{mod}.{node.name}.{name}: missing")
                elif isinstance(sub, ast.Assign) and isinstance(sub.value, ast.Constant) \
                        and sub.value.value is not Ellipsis:
                    got = getattr(getattr(cls, name), "value", getattr(cls, name))
                    want = sub.value.value
                    # the memory regions are nkisim objects whose name is the stub's value
                    if got != want and str(got) != f"nl.{want}":
                        problems.append(f"{mod}.{node.name}.{name}: value {got!r}, the stub's {want!r}")
    assert not problems, "\n".join(problems)


def test_module_level_names_exist():
    """Every name the stubs assign at module level (data types, memory regions, ``tile_size``, the deprecated engine
    constants, ``DType``) resolves (a NeuronCore-v4-only one to nkisim's placeholder)."""
    problems = []
    for mod in sorted(STUBS):
        tree = _stub(mod)
        module = importlib.import_module(mod)
        for node in tree.body:
            if isinstance(node, (ast.Assign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for t in targets:
                    if isinstance(t, ast.Name) and not hasattr(module, t.id):
                        problems.append(f"{mod}.{t.id}")
    assert not problems, problems
