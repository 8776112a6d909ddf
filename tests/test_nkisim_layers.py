"""nkisim's layering (nkisim/ARCHITECTURE.md, "Layers"), as these tests enforce it:

* every import counts, at module level or inside a function (a lazy import runs when its function does); only
  imports under ``if TYPE_CHECKING:`` are left out (tests/import_graph.py, the grader's layer test uses it too);
* nkisim has no import cycle, lazy or not (importing ``a.b`` imports the package ``a`` first: that counts);
* a core module imports only core modules of its own or a lower layer (LAYERS) and no front end's package;
* the front ends do not import each other;
* ``nkisim.perf`` reads only the trace of the core: ``core.instr`` (the stream format) and ``core.traceio`` (its
  files); running a kernel and costing it together is a driver's job (``nkisim/measure.py``);
* only the storage layer reads a tensor view's private slots.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path

import pytest
from import_graph import cycle, graph

NKISIM = Path(__file__).resolve().parents[1] / "nkisim"
# The core's layers, bottom first: a module may import only modules of its own or a lower layer.
LAYERS = [
    {"instr", "config", "rules", "dtypes", "indexing", "views", "stmt", "liveness", "execute", "traceio", "sealed",
     "sites", "blas"},
    {"spill"},
    {"blocks"},
    {"memory"},
    {"access", "partitions"},
    {"context"},
    {"tensor"},
    {"aps", "buffers", "launchinfo", "lockstep", "sharing", "channel"},
    {"ops.common", "ops.partition_broadcast"},
    {"ops.elementwise"},
    {"ops.dma", "ops.tensor_engine", "ops.reduce", "ops.gpsimd", "ops.registers", "ops.collectives", "ops.lnc"},
    {"ops.assign"},
    {"placement", "semantics", "composites"},
    {"runtime"},
]
LAYER_OF = {name: i for i, names in enumerate(LAYERS) for name in names}
PERF_MAY_READ = {"core", "core.instr", "core.traceio"}  # "core": the package itself (its __init__ imports nothing)
PRIVATE_SLOTS = re.compile(r"\.\_(a|v|off|pd|ix|oob|opnd|par|pix|map|axv)\b")


@functools.cache
def _graph() -> dict[str, set[str]]:
    return graph(NKISIM, "nkisim")


def _core(g: dict[str, set[str]]) -> dict[str, set[str]]:
    return {k.removeprefix("core."): {d.removeprefix("core.") for d in v if d.startswith("core.")}
            for k, v in g.items() if k.startswith("core.")}


def test_every_core_module_has_a_layer():
    core = {m for m in _core(_graph()) if m != "ops"}
    assert core == set(LAYER_OF), "add new core modules to LAYERS (and ARCHITECTURE.md)"


def test_nkisim_has_no_import_cycle():
    found = cycle(_graph())
    assert found is None, " -> ".join(found or [])


@pytest.mark.parametrize("name", sorted(LAYER_OF))
def test_core_imports_point_down(name):
    for dep in _core(_graph())[name]:
        if dep in LAYER_OF:
            assert LAYER_OF[dep] <= LAYER_OF[name], f"core/{name} imports core/{dep}, a higher layer"


@pytest.mark.parametrize("name", sorted(LAYER_OF))
def test_core_never_imports_a_front_end(name):
    """The core reads the front-end registry (``nkisim.frontends``, pure data) but no front end's package."""
    deps = _graph()[f"core.{name}"]
    assert not {d for d in deps if d.startswith("frontends.")}, f"core/{name} imports {deps}"


def test_front_ends_do_not_import_each_other():
    from nkisim.frontends import FRONT_ENDS

    g = _graph()
    for fe in FRONT_ENDS:
        mine = fe.package.removeprefix("nkisim.")
        others = [o.package.removeprefix("nkisim.") for o in FRONT_ENDS if o is not fe]
        for mod, deps in g.items():
            if mod == mine or mod.startswith(mine + "."):
                bad = {d for d in deps for o in others if d == o or d.startswith(o + ".")}
                assert not bad, f"{mod} imports {bad}"


def test_perf_reads_only_the_trace():
    g = _graph()
    perf = {m for m in g if m == "perf" or m.startswith("perf.")}
    assert {"perf", "perf.scheduler", "perf.benchmark", "perf.html_profile"} <= perf
    for mod in perf:
        core = {d for d in g[mod] if d == "core" or d.startswith("core.")}
        assert core <= PERF_MAY_READ, f"{mod} imports {sorted(core - PERF_MAY_READ)}"


def test_only_the_storage_layer_reads_tensor_slots():
    """Instruction builders, semantics, composites, the runtime and the front ends use the tensor's public
    properties and nkisim.core.access, never its private slots (``t._a``, ``t._v``, ``t._ix``, ...)."""
    allowed = {NKISIM / "core" / f for f in ("tensor.py", "access.py", "aps.py", "memory.py", "context.py",
                                              "liveness.py")}
    offenders = []
    for path in [*(NKISIM / "core").rglob("*.py"), *(NKISIM / "frontends").rglob("*.py")]:
        if path in allowed:
            continue
        for lineno, line in enumerate(path.read_text().splitlines(), 1):
            if PRIVATE_SLOTS.search(line.split("#", 1)[0]):
                offenders.append(f"{path.relative_to(NKISIM)}:{lineno}: {line.strip()}")
    assert not offenders, "\n".join(offenders)


# ---- the checks themselves: they see what they claim to see -------------------------------------------------


def _package(tmp_path: Path, files: dict[str, str]) -> Path:
    root = tmp_path / "pkg"
    for rel, text in {"__init__.py": "", **files}.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def test_a_lazy_cycle_is_found(tmp_path):
    """b imports a only inside a function, as core.blocks imported core.memory: still a cycle."""
    root = _package(tmp_path, {
        "a.py": "from pkg import b\n",
        "b.py": "def f():\n    from pkg.a import thing\n    return thing\n",
    })
    assert cycle(graph(root, "pkg")) == ["a", "b", "a"]


def test_type_checking_imports_and_relative_imports(tmp_path):
    """An import under TYPE_CHECKING never runs: no edge, no cycle; a relative import is an edge like any."""
    root = _package(tmp_path, {
        "a.py": "from . import b\n",
        "b.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.a import X\nelse:\n"
                "    from .sub import c\n",
        "sub/__init__.py": "",
        "sub/c.py": "import pkg.a\n",
    })
    g = graph(root, "pkg")
    assert g["b"] == {"sub", "sub.c"} and g["a"] == {"b"}
    assert cycle(g) == ["a", "b", "sub.c", "a"]
