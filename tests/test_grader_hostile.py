"""The hostile-submission suite: every submission in tests/hostile/ ends with the right verdict, no inflated
score and no grader crash -- with the static screen (the real configuration) and, for the submissions the screen
rejects, with the screen switched off, to show the runtime layers contain them on their own."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from grader_helpers import FAST_RUBRIC, HOSTILE, check_reports

from grader.pipeline import grade_submission
from grader.records import GradeConfig
from grader.rubric import load_rubric
from grader.sandbox import detect_isolation

# name -> (allowed statuses of part1.transpose, expected total score)
SCREEN_ON: dict[str, tuple[set[str], float]] = {
    "syntax_error": ({"rejected"}, 0),
    "missing_function": ({"error"}, 0),
    "wrong_shape": ({"failed"}, 0),
    "wrong_dtype": ({"failed"}, 0),
    "nan_output": ({"failed"}, 0),
    "infinite_loop": ({"timeout"}, 0),
    "memory_bomb": ({"error"}, 0),  # MemoryError under RLIMIT_AS: "ran out of memory"
    "fork_bomb": ({"rejected"}, 0),
    "fork_bomb_escape": ({"rejected"}, 0),
    "sys_exit": ({"error"}, 0),
    "os_exit": ({"rejected"}, 0),
    "fake_results": ({"failed", "error"}, 0),
    "write_outside": ({"rejected"}, 0),
    "write_outside_escape": ({"rejected"}, 0),
    "read_reference": ({"rejected"}, 0),
    "read_reference_escape": ({"rejected"}, 0),
    "patch_grader": ({"rejected"}, 0),
    "patch_numpy": ({"rejected"}, 0),
    "host_compute": ({"error", "rejected"}, 0),
    "host_return": ({"failed", "error"}, 0),
    "patch_builtins": ({"rejected"}, 0),
    "sleep_dodge": ({"rejected"}, 0),
    "sleep_dodge_escape": ({"rejected"}, 0),
    "network": ({"rejected"}, 0),
    "frame_walk": ({"rejected"}, 0),
    "module_attr_escape": ({"rejected"}, 0),
    "symlink_reference": ({"missing"}, 0),
    "recursion_bomb": ({"error"}, 0),
    # Correct on the correctness shapes, skips the work on the larger timed shape: correctness only.
    "skip_work_when_timed": ({"passed"}, 10),
    # Floods stdout but computes the right answer: full credit, and the grader survives the flood.
    "print_flood": ({"passed"}, 12),
}

# Submissions the screen rejects, graded with the screen off: the runtime layers (restricted imports and
# builtins, rlimits, namespaces, read-only file system, timeouts) still give 0.
SCREEN_OFF: dict[str, set[str]] = {
    "syntax_error": {"error"},
    "fork_bomb": {"error"},
    "fork_bomb_escape": {"timeout", "error"},
    "os_exit": {"error"},
    "write_outside": {"error"},
    "read_reference": {"error"},
    "read_reference_escape": {"error"},
    "patch_grader": {"error"},
    "patch_numpy": {"error", "failed"},
    "patch_builtins": {"error"},
    "sleep_dodge": {"error"},
    "sleep_dodge_escape": {"timeout"},
    "network": {"error"},
    "frame_walk": {"error"},
    "module_attr_escape": {"error"},
}

TIMEOUT_SCALE = 0.5  # 10 s per case instead of 20: the infinite loops end sooner


def _grade(name: str, tmp_path: Path, screen: bool):
    out = tmp_path / "out"
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    cfg = GradeConfig(rubric_path=FAST_RUBRIC, screen=screen, timeout_scale=TIMEOUT_SCALE, tmp_root=str(scratch))
    record = grade_submission(HOSTILE / name, out, cfg)
    assert record.status == "graded", record.error
    results = check_reports(out, load_rubric(FAST_RUBRIC).total_points)
    assert not list(scratch.iterdir()), "sandbox run directories must be removed"
    return record, results


def test_every_hostile_submission_has_an_expectation():
    on_disk = {p.name for p in HOSTILE.iterdir() if p.is_dir()}
    assert on_disk == set(SCREEN_ON), on_disk ^ set(SCREEN_ON)
    assert len(on_disk) >= 15


@pytest.mark.parametrize("name", sorted(SCREEN_ON))
def test_hostile_submission(name, tmp_path):
    statuses, score = SCREEN_ON[name]
    record, results = _grade(name, tmp_path, screen=True)
    transpose = next(t for t in record.tests if t.id == "part1.transpose")
    assert transpose.status in statuses, (transpose.status, transpose.message)
    assert record.score == score, [(t.id, t.status, t.message) for t in record.tests]
    assert results["score"] == score
    for t in record.tests:  # messages name the student's file, not the grader's private run directory
        assert "asst4-case-" not in t.message + "".join(c.message for c in t.cases), (t.id, t.message)
    if transpose.status == "rejected":
        assert "did not pass the static screen" in transpose.message
        assert any(line.strip().startswith("part1/kernels.py:") for line in transpose.message.splitlines())
        # the first line (all the console table and CI annotations show) names the finding
        assert transpose.message.splitlines()[0].startswith("static screen: part1/kernels.py:")


@pytest.mark.parametrize("name", sorted(SCREEN_OFF))
def test_hostile_submission_runtime_layers_alone(name, tmp_path):
    record, results = _grade(name, tmp_path, screen=False)
    transpose = next(t for t in record.tests if t.id == "part1.transpose")
    assert transpose.status in SCREEN_OFF[name], (transpose.status, transpose.message)
    assert record.score == 0 and results["score"] == 0


def test_fake_results_do_not_reach_the_reports(tmp_path):
    record, results = _grade("fake_results", tmp_path, screen=True)
    text = (tmp_path / "out" / "results.json").read_text()
    assert '"score": 1000' not in text and "Points 100/100" not in text
    assert results["score"] == 0


def test_writes_outside_the_work_dir_never_land(tmp_path):
    target = "/tmp/asst4-hostile-write_outside"
    for suffix in ("", ".npy"):
        if os.path.exists(target + suffix):
            os.unlink(target + suffix)
    _grade("write_outside", tmp_path, screen=False)
    assert not os.path.exists(target) and not os.path.exists(target + ".npy")


@pytest.mark.skipif(
    "read-only-fs" not in os.environ.get("GRADER_EXPECT", "read-only-fs") or not detect_isolation().unshare_argv,
    reason="needs mount namespaces",
)
def test_os_level_write_outside_is_blocked(tmp_path):
    target = "/tmp/asst4-hostile-write_outside_escape"
    if os.path.exists(target):
        os.unlink(target)
    record, _ = _grade("write_outside_escape", tmp_path, screen=False)
    assert not os.path.exists(target)
    assert "read-only-fs" in record.isolation
    assert record.tests[0].status == "error" and "Read-only file system" in record.tests[0].message


@pytest.mark.skipif(not detect_isolation().unshare_argv, reason="needs mount namespaces")
def test_grader_files_are_hidden_even_from_a_full_escape(tmp_path):
    record, _ = _grade("read_reference_escape", tmp_path, screen=False)
    assert "grader-files-hidden" in record.isolation
    transpose = record.tests[0]
    assert transpose.status == "error" and "FileNotFoundError" in transpose.message, transpose.message
