"""The grader's modules form a chain: no module imports (even lazily, inside a function) one that imports it."""

from __future__ import annotations

import ast
from pathlib import Path

from grader_helpers import ROOT

GRADER = ROOT / "grader"


def _grader_imports(path: Path) -> set[str]:
    """Names of the grader modules ``path`` imports anywhere in its body (top level or inside functions)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found |= {a.name.split(".")[1] for a in node.names if a.name.startswith("grader.")}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == "grader":
                found |= {a.name for a in node.names if (GRADER / f"{a.name}.py").exists()}
            elif node.module.startswith("grader."):
                found.add(node.module.split(".")[1])
    return found


def _graph() -> dict[str, set[str]]:
    mods = {p.stem: p for p in GRADER.glob("*.py")}
    return {name: _grader_imports(p) & set(mods) - {name} for name, p in mods.items()}


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(n: str) -> list[str] | None:
        state[n] = 1
        stack.append(n)
        for m in sorted(graph.get(n, ())):
            if state.get(m) == 1:
                return stack[stack.index(m) :] + [m]
            if m not in state and (found := visit(m)):
                return found
        stack.pop()
        state[n] = 2
        return None

    for n in sorted(graph):
        if n not in state and (found := visit(n)):
            return found
    return None


def test_cycle_finder_finds_a_circle():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None


def test_grader_modules_import_one_way():
    graph = _graph()
    assert {"calibrate", "runner", "thresholds", "pipeline", "batch"} <= set(graph)
    assert _cycle(graph) is None, " -> ".join(_cycle(graph) or [])


def test_the_calibration_chain():
    """runner and thresholds sit below calibrate; the staff-kernel lookup sits below all three."""
    graph = _graph()
    assert "calibrate" not in graph["runner"] | graph["thresholds"]
    assert "runner" not in graph["thresholds"] and "thresholds" not in graph["runner"]
    assert {"runner", "thresholds", "staff"} <= graph["calibrate"]
    assert graph["staff"] == set()
