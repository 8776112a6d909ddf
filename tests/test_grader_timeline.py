"""GRADER_TIMELINE (grader/timeline.py) and its reader tools/grading_timeline.py: what a grading records when the
variable names a file, that nothing is recorded (and a span is the shared no-op) when it does not, and what the
reader makes of a timeline."""

from __future__ import annotations

import importlib.util
import json
import sys
import threading
from pathlib import Path

import pytest
from grader_helpers import FAST_RUBRIC, GOOD, ROOT

from grader import timeline
from grader.pipeline import _Slots, grade_submission
from grader.records import GradeConfig


def _tool():
    spec = importlib.util.spec_from_file_location("grading_timeline", ROOT / "tools" / "grading_timeline.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["grading_timeline"] = module
    spec.loader.exec_module(module)
    return module


def test_without_the_variable_nothing_is_recorded(tmp_path, monkeypatch):
    monkeypatch.delenv(timeline.ENV, raising=False)
    assert timeline.start() is None
    assert timeline.span("judge", "x") is timeline._NULL
    assert not timeline.active()
    rec = grade_submission(GOOD, None, GradeConfig(rubric_path=FAST_RUBRIC, only=("part1.transpose",), workers=2))
    assert rec.score == 10
    assert list(tmp_path.iterdir()) == []


def test_a_two_worker_grading_records_its_slots_calls_and_judging(tmp_path, monkeypatch, capsys):
    path = tmp_path / "tl.json"
    monkeypatch.setenv(timeline.ENV, str(path))
    rec = grade_submission(GOOD, None, GradeConfig(rubric_path=FAST_RUBRIC, only=("part1.transpose",
                                                                                   "part1.transpose_speed"),
                                                   workers=2))
    assert rec.score > 0
    assert not timeline.active()  # the grading's recording ended with it
    doc = json.loads(path.read_text())
    assert [p.name for p in tmp_path.iterdir()] == ["tl.json"]  # written by rename: no temporary file left
    assert doc["workers"] == 2 and doc["cpu_grader_s"] >= 0 and doc["cpu_kernels_s"] > 0
    events = doc["events"]
    kinds = {e["kind"] for e in events}
    assert {"test", "inputs", "queue", "slot", "specialize", "replay", "judge", "trace_load", "estimate"} <= kinds
    for e in events:
        assert 0 <= e["t0"] <= e["t1"] <= doc["wall_s"] + 1e-3, e
    # a slot holds one call at a time; the processes of a call run inside its slot's span, on that slot
    slots = [e for e in events if e["kind"] == "slot"]
    assert {e["slot"] for e in slots} <= {0, 1}
    for s in (0, 1):
        held = sorted((e["t0"], e["t1"]) for e in slots if e["slot"] == s)
        assert all(a[1] <= b[0] for a, b in zip(held, held[1:], strict=False)), held
    for e in events:
        if e["kind"] in ("specialize", "replay"):
            assert e["slot"] in (0, 1) and e["proc_cpu"] is not None
            assert any(s["slot"] == e["slot"] and s["t0"] <= e["t0"] and e["t1"] <= s["t1"] for s in slots), e
    assert {e["name"] for e in events if e["kind"] == "test"} == {"part1.transpose", "part1.transpose_speed"}
    assert _tool().main([str(path), "--width", "40"]) == 0
    out = capsys.readouterr().out
    assert "slot 0 |" in out and "refs |" in out and "parent |" in out and "cores |" in out
    assert "busy" not in out.split("\n")[0]


def test_slots_are_numbered_from_the_lowest_free_one(tmp_path, monkeypatch):
    monkeypatch.setenv(timeline.ENV, str(tmp_path / "tl.json"))
    recorded = timeline.start(workers=2)
    slots = _Slots(2)
    inside = threading.Event()
    release = threading.Event()

    def hold() -> None:
        with slots.hold(1.0, label="long"):
            inside.set()
            release.wait(5)

    t = threading.Thread(target=hold)
    t.start()
    assert inside.wait(5)
    with slots.hold(2.0, label="short"), timeline.span("replay", "r"):
        pass
    release.set()
    t.join(5)
    timeline.finish(recorded)
    events = json.loads((tmp_path / "tl.json").read_text())["events"]
    held = {e["name"]: e["slot"] for e in events if e["kind"] == "slot"}
    assert held == {"long": 0, "short": 1}
    assert [e["slot"] for e in events if e["kind"] == "replay"] == [1]
    assert all(e["slot"] is None for e in events if e["kind"] == "queue")


def test_the_reader_finds_gaps_and_idle_cores(capsys, tmp_path):
    tool = _tool()
    assert tool.union([(0, 1), (0.5, 2), (3, 4)]) == [(0, 2), (3, 4)]
    assert tool.gaps([(1, 2), (2.05, 3)], 0.0, 5.0, 0.1) == [(0.0, 1), (3, 5.0)]
    doc = {"wall_s": 5.0, "workers": 2, "cpu_grader_s": 1.0, "cpu_kernels_s": 3.0, "events": [
        {"kind": "slot", "name": "a", "t0": 0.0, "t1": 4.0, "thread": "t0", "slot": 0, "cpu": 0.0},
        {"kind": "replay", "name": "a", "t0": 0.0, "t1": 4.0, "thread": "t0", "slot": 0, "cpu": 0.0, "proc_cpu": 4.0},
        {"kind": "test", "name": "b", "t0": 0.0, "t1": 1.0, "thread": "t1", "slot": None, "cpu": 0.5},
        {"kind": "slot", "name": "b", "t0": 0.0, "t1": 1.0, "thread": "t1", "slot": 1, "cpu": 0.0},
        {"kind": "specialize", "name": "b", "t0": 0.0, "t1": 1.0, "thread": "t1", "slot": 1, "cpu": 0.0,
         "proc_cpu": 1.0},
        {"kind": "reference", "name": "b", "t0": 1.0, "t1": 2.0, "thread": "r", "slot": None, "cpu": 1.0},
    ]}
    use = tool.occupancy(doc["events"], 5.0, step=0.5)
    assert use[:10] == pytest.approx([2.0, 2.0, 2.0, 2.0, 1.0, 1.0, 1.0, 1.0, 0.0, 0.0])
    path = tmp_path / "tl.json"
    path.write_text(json.dumps(doc))
    assert tool.main([str(path), "--width", "10"]) == 0
    out = capsys.readouterr().out
    assert "  slot 1 |SS........|" in out
    assert "gap    1.00 -    5.00 ( 4.00 s): reference b" in out
    assert "core-seconds the spans left unused on 2 cores 4.00" in out
    # a span's parent CPU includes the spans nested in it on its thread: the self column does not count them twice
    nested = [
        {"kind": "test", "name": "t", "t0": 0.0, "t1": 4.0, "thread": "a", "slot": None, "cpu": 3.0},
        {"kind": "inputs", "name": "t", "t0": 0.5, "t1": 1.0, "thread": "a", "slot": None, "cpu": 0.5},
        {"kind": "judge", "name": "t", "t0": 2.0, "t1": 3.0, "thread": "a", "slot": None, "cpu": 1.0},
        {"kind": "expected", "name": "t", "t0": 2.1, "t1": 2.5, "thread": "a", "slot": None, "cpu": 0.25},
        {"kind": "judge", "name": "u", "t0": 2.0, "t1": 3.0, "thread": "b", "slot": None, "cpu": 0.75},
    ]
    assert tool.self_cpu(nested) == pytest.approx([1.5, 0.5, 0.75, 0.25, 0.75])
    (tmp_path / "bad.json").write_text("[]")
    assert tool.main([str(tmp_path / "bad.json")]) == 2
    assert tool.main([str(Path(tmp_path / "missing.json"))]) == 2


def test_stand_ins_have_the_signature_of_the_calls_they_stand_for():
    """A group specializes its calls from their stand-ins while the inputs are generated: each stand-in must have
    its call's signature (shapes, dtypes, keyword constants) for every case of the course rubric, and hold no
    values (a view of one zero)."""
    from grader import problems
    from grader.rubric import load_rubric
    from grader.runner import _signature

    seen = 0
    for test in load_rubric(None).tests:
        problem = problems.get(test.problem)
        for case in test.cases:
            stand_in = problem.stand_in(case)
            if stand_in is None:
                continue
            seen += 1
            real = problem.shared_invocation(case, 12345).inv
            assert _signature(stand_in) == _signature(real), (test.id, case)
            assert all(a.strides == (0,) * a.ndim and not a.flags.writeable for a in stand_in.args[:2])  # X, W
            assert stand_in.out_shape == real.out_shape and stand_in.out_dtype == real.out_dtype
    assert seen >= 10  # every conv2d case


def test_the_reader_says_where_the_cpu_it_does_not_draw_went(capsys, tmp_path):
    """The lanes draw the CPU of some span kinds only; the rest of the grading's CPU is split into the grader's own
    CPU in other spans (self CPU: a reference computed in a test's ``expected``), the grader's CPU in no span, and
    the kernel processes' CPU beyond their spans' process CPU (server start-ups, a group outside its members)."""
    tool = _tool()
    doc = {"wall_s": 5.0, "workers": 2, "cpu_grader_s": 3.0, "cpu_kernels_s": 6.5, "events": [
        {"kind": "test", "name": "a", "t0": 0.0, "t1": 4.0, "thread": "t0", "slot": None, "cpu": 2.0},
        {"kind": "expected", "name": "a", "t0": 0.5, "t1": 1.5, "thread": "t0", "slot": None, "cpu": 0.75},
        {"kind": "judge", "name": "a", "t0": 2.0, "t1": 3.0, "thread": "t0", "slot": None, "cpu": 0.5},
        {"kind": "group_replay", "name": "g", "t0": 0.0, "t1": 4.0, "thread": "t1", "slot": 0, "cpu": 0.25,
         "proc_cpu": [2.0, 1.5, None]},
        {"kind": "specialize", "name": "s", "t0": 0.0, "t1": 1.0, "thread": "t2", "slot": 1, "cpu": 0.0,
         "proc_cpu": 1.0},
    ]}
    assert tool.outside(doc) == pytest.approx({"undrawn": 0.75 + 0.75, "grader": 3.0 - 2.25, "kernels": 2.0})
    path = tmp_path / "tl.json"
    path.write_text(json.dumps(doc))
    assert tool.main([str(path), "--width", "10"]) == 0
    assert ("not drawn: the grader's own CPU in spans of other kinds 1.50, in no span 0.75; the kernel processes' "
            "beyond their spans' process CPU 2.00") in capsys.readouterr().out
