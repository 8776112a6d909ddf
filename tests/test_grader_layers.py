"""The grader's modules form a chain: no module imports (even lazily, inside a function) one that imports it."""

from __future__ import annotations

from grader_helpers import ROOT
from import_graph import cycle, graph

GRADER = ROOT / "grader"


def _graph() -> dict[str, set[str]]:
    return graph(GRADER, "grader")


def test_cycle_finder_finds_a_circle():
    assert cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None


def test_grader_modules_import_one_way():
    g = _graph()
    assert {"calibrate", "runner", "thresholds", "pipeline", "batch", "problems", "problems.conv2d"} <= set(g)
    assert cycle(g) is None, " -> ".join(cycle(g) or [])


def test_the_calibration_chain():
    """runner and thresholds sit below calibrate; the staff-kernel lookup sits below all three."""
    g = _graph()
    assert "calibrate" not in g["runner"] | g["thresholds"]
    assert "runner" not in g["thresholds"] and "thresholds" not in g["runner"]
    assert {"runner", "thresholds", "staff"} <= g["calibrate"]
    assert g["staff"] == set()


def test_problems_sit_below_the_pipeline():
    """A problem module reads the caches (thresholds, refcache) and the shared problem code, and may mark spans on
    the timeline (a leaf: it imports nothing of the grader), nothing that runs a grading; the registry imports no
    problem (they are found by name), and no other module imports one."""
    g = _graph()
    assert g["timeline"] == set()
    problem_modules = {m for m in g if m.startswith("problems.") and m not in ("problems.base", "problems.generic")}
    assert {"problems.vector_add", "problems.transpose", "problems.conv2d"} <= problem_modules
    for m in problem_modules:
        assert g[m] <= {"problems", "problems.base", "problems.generic", "refcache", "thresholds", "staff",
                        "timeline"}, (m, g[m])
    assert g["problems"] == {"problems.base"}
    assert g["problems.base"] == set()
    users = {m for m, deps in g.items() if deps & problem_modules and m not in problem_modules}
    assert users == set(), f"{sorted(users)} import a problem module by name: use grader.problems.get(name)"
