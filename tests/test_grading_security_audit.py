"""The grading-security audit (docs/grading-security.md) covers every name and parameter a kernel can reach: each
public function of both front ends, each public tensor method and each parameter name is listed in its index, so a
name added to a front end without an audit row fails here (issue 25: "the audit table covers every parameter of every
instruction and launch form the course's kernels can reach")."""

from __future__ import annotations

import importlib
import inspect
import re
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parent.parent / "docs" / "grading-security.md"
# the index's short prefix -> the front-end modules it stands for (either API)
MODULES = {
    "nisa": ("nkisim.frontends.nki.isa", "nkisim.frontends.legacy.isa"),
    "nl": ("nkisim.frontends.nki.language", "nkisim.frontends.legacy.language"),
    "nki": ("nkisim.frontends.nki.nki", "nkisim.frontends.legacy.nki"),
    "ncoll": ("nkisim.frontends.nki.collectives",),
    "ncc": ("nkisim.frontends.legacy.compiler",),
}


def _index() -> str:
    text = DOC.read_text()
    start = text.index("### Index: every name and parameter a kernel can reach")
    return text[start : text.index("\n## ", start)]


def _functions() -> dict[str, list]:
    out: dict[str, list] = {}
    for prefix, modules in MODULES.items():
        for name in modules:
            mod = importlib.import_module(name)
            for attr in dir(mod):
                f = getattr(mod, attr)
                if not attr.startswith("_") and inspect.isfunction(f) and f.__module__.startswith("nkisim"):
                    out.setdefault(f"{prefix}.{attr}", []).append(f)
    from nkisim.core.tensor import Tensor
    from nkisim.frontends.nki.tensor import NkiTensor

    for cls in (Tensor, NkiTensor):
        for attr, f in inspect.getmembers(cls, callable):
            if not attr.startswith("_"):
                out.setdefault(f"tensor.{attr}", []).append(f)
    return out


def _parameters(functions: dict[str, list]) -> set[str]:
    names = set()
    for fs in functions.values():
        for f in fs:
            try:
                sig = inspect.signature(f)
            except (TypeError, ValueError):
                continue
            names |= {p.name for p in sig.parameters.values()
                      if p.name != "self" and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)}
    return names


FUNCTIONS = _functions()


def test_the_front_ends_are_found():
    assert len(FUNCTIONS) > 200 and "nisa.nc_matmul" in FUNCTIONS and "tensor.ap" in FUNCTIONS


def test_every_call_has_an_audit_row():
    listed = set(re.findall(r"`((?:nisa|nl|nki|ncoll|ncc|tensor)\.[A-Za-z_0-9]+)`", _index()))
    missing = sorted(set(FUNCTIONS) - listed)
    assert not missing, f"add these to the audit index of {DOC.name}: {missing}"


def test_every_parameter_has_an_audit_row():
    index = _index()
    table = index[index.index("Parameters, by what they control"):]
    listed = set(re.findall(r"`([A-Za-z_][A-Za-z_0-9]*)`", table))
    missing = sorted(_parameters(FUNCTIONS) - listed)
    assert not missing, f"add these parameters to the audit index of {DOC.name}: {missing}"


@pytest.mark.parametrize("row", ["dynamic loops and registers", "collectives (`nki.collectives`)"])
def test_the_index_rows_say_what_a_kernel_gains(row):
    line = next(x for x in _index().splitlines() if x.startswith(f"| {row}"))
    assert line.count("|") == 5 and "| no" in line
