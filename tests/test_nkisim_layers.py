"""nkisim's layering (nkisim/ARCHITECTURE.md, "Layers"): imports point one way, the core has no import cycle, and
only the storage layer reads a tensor view's private slots."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

NKISIM = Path(__file__).resolve().parents[1] / "nkisim"
# The core's layers, bottom first: a module may import only modules of its own or a lower layer.
LAYERS = [
    {"instr", "config", "rules", "dtypes", "indexing", "views", "stmt", "liveness", "execute", "traceio", "sealed"},
    {"memory", "blocks", "spill"},
    {"access", "partitions"},
    {"context"},
    {"tensor"},
    {"aps", "buffers"},
    {"ops.common", "ops.partition_broadcast"},
    {"ops.elementwise"},
    {"ops.dma", "ops.tensor_engine", "ops.reduce", "ops.gpsimd", "ops.registers", "ops.collectives"},
    {"ops.assign"},
    {"placement", "semantics", "composites"},
    {"runtime"},
]
LAYER_OF = {name: i for i, names in enumerate(LAYERS) for name in names}
PRIVATE_SLOTS = re.compile(r"\.\_(a|v|off|pd|ix|oob|opnd|par|pix|map|axv)\b")


def _core_modules() -> dict[str, Path]:
    out = {}
    for path in (NKISIM / "core").rglob("*.py"):
        rel = path.relative_to(NKISIM / "core").with_suffix("")
        name = ".".join(rel.parts)
        if name.endswith("__init__"):
            continue
        out[name] = path
    return out


def _imports(path: Path, top_level_only: bool) -> set[str]:
    """Modules a file imports (``nkisim.core.X`` -> ``X``, others in full), at module level or everywhere."""
    tree = ast.parse(path.read_text())
    nodes = tree.body if top_level_only else list(ast.walk(tree))
    found = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            if node.module in ("nkisim.core", "nkisim.core.ops"):
                found.update(f"{node.module}.{a.name}" for a in node.names)
            else:
                found.add(node.module)
    return {n.removeprefix("nkisim.core.") for n in found}


def test_every_core_module_has_a_layer():
    assert set(_core_modules()) == set(LAYER_OF), "add new core modules to LAYERS (and ARCHITECTURE.md)"


@pytest.mark.parametrize("name", sorted(LAYER_OF))
def test_core_imports_point_down(name):
    path = _core_modules()[name]
    for dep in _imports(path, top_level_only=True):
        if dep in LAYER_OF:
            assert LAYER_OF[dep] <= LAYER_OF[name], f"core/{name} imports core/{dep}, a higher layer"


@pytest.mark.parametrize("name", sorted(LAYER_OF))
def test_core_never_imports_a_front_end(name):
    """The core reads the front-end registry (``nkisim.frontends``, pure data) but no front end's package."""
    for dep in _imports(_core_modules()[name], top_level_only=False):
        assert not dep.startswith("nkisim.frontends."), f"core/{name} imports {dep}"


def test_front_ends_do_not_import_each_other():
    from nkisim.frontends import FRONT_ENDS

    for fe in FRONT_ENDS:
        others = [o.package for o in FRONT_ENDS if o is not fe]
        for path in Path(fe.directory).rglob("*.py"):
            for dep in _imports(path, top_level_only=False):
                assert not any(dep == o or dep.startswith(o + ".") for o in others), f"{path} imports {dep}"


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
