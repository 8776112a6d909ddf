"""The hostile-submission suite: every submission in tests/hostile/ ends with the right verdict, no inflated
score and no grader crash -- with the static screen (the real configuration) and, for the submissions the screen
rejects, with the screen switched off, to show the runtime layers contain them on their own."""

from __future__ import annotations

import ast
import os
import shutil
import time
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
    "refcache_escape": ({"rejected"}, 0),
    "memoise_escape": ({"rejected"}, 0),
    "sibling_escape": ({"rejected"}, 0),
    "recursion_bomb": ({"error"}, 0),
    # Issue 31, current API: capabilities reached from the objects the front end hands to kernels, and the screen's
    # syntactic gaps, closed as classes (docs/grading-security.md, "Capabilities"). Before the closures each scored
    # 12 (the full fast rubric), with the answer computed on the host or the trace rewritten.
    "loader_escape_nki": ({"rejected"}, 0),
    "match_private_nki": ({"rejected"}, 0),
    "format_escape_nki": ({"rejected"}, 0),
    "plant_context_nki": ({"rejected"}, 0),
    "class_plant_nki": ({"rejected"}, 0),
    "alias_rebind_nki": ({"rejected"}, 0),
    "shared_constant_path_nki": ({"error"}, 0),
    # a failed attribute read on a module view handed out the real module (err.obj): scored 12 before the fix
    # and now err.obj and .operator are screened (SANDBOX-INTROSPECTION, SANDBOX-MODULE-ESCAPE)
    "attr_error_obj_nki": ({"rejected"}, 0),
    # a string annotation (code the screen never parses) was evaluated whole by the launcher: scored 12 before the fix
    "annotation_eval_nki": ({"error"}, 0),
    # NumPy's error state around an instruction turned a device value into an exception in the kernel's Python
    "errstate_probe_nki": ({"rejected"}, 0),
    # a value check's error (a broken onezero promise) raised inside the call named the offending value: a try around a
    # hinted matmul read every input element; scored 10 (correctness) before, now a fault after the kernel returns
    "promise_probe_nki": ({"error"}, 0),
    # returns out.permute((1, 0)) after a contiguous copy: nkisim handed the host the view's values (a free
    # transpose, 12 points at 19.4 us); the host receives the storage as it lies (nkisim_output_view)
    "return_view_nki": ({"error"}, 0),
    # reads the wall clock (a side channel of device values and of the run's mode) and works only when it can
    "clock_read_nki": ({"rejected"}, 0),
    # a register-valued while loop made the specializing child's timing run repeat itself with values, on the real
    # inputs: past the screen, the kernel read its input there and shipped the host transpose as a constant
    "values_in_child_nki": ({"rejected"}, 0),
    # walked the frames above it from an exception's traceback to the specializing child's real input arrays and
    # shipped the host transpose as a constant (12 with the screen off before L3: the child now gets zero stand-ins)
    "inputs_in_child_nki": ({"rejected"}, 0),
    # set the simulator's flag on its run and in the recorder's header: a copy at an illegal start partition (an
    # error when compiled) was a warning in the grader's replay, 12 points with the screen off before L4
    "simulate_forge_nki": ({"rejected"}, 0),
    # inputs_in_child_nki in the legacy API, now that it is replayed too: 12 with the screen off without L3
    "inputs_in_child_legacy": ({"rejected"}, 0),
    # Correct on the correctness shapes, skips the work on the larger timed shape: correctness only.
    "skip_work_when_timed": ({"passed"}, 10),
    # Floods stdout but computes the right answer: full credit, and the grader survives the flood.
    "print_flood": ({"passed"}, 12),
}

# The ones that wait out a limit (the case's wall clock, the stdout cap, the address-space limit): the slow tier
WAITING = {"infinite_loop", "print_flood", "memory_bomb"}

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
    "refcache_escape": {"error"},
    "memoise_escape": {"error"},
    "sibling_escape": {"error"},
    # issue 31: the run-time layers under the screen (a forged front-end record loads nothing, the shared buffer
    # objects refuse writes, shared_constant reads only what the kernel ships).  match_private_nki and
    # format_escape_nki are syntax the screen alone refuses, like `x._v` itself (docs/grading-security.md C2);
    # class_plant_nki gains nothing without the screen (test_a_planted_record_method_changes_no_timing).
    "loader_escape_nki": {"error"},
    "plant_context_nki": {"error"},
    "shared_constant_path_nki": {"error"},
    "attr_error_obj_nki": {"error"},  # without the screen: the module view's own AttributeError (grader/child.py)
    "errstate_probe_nki": {"error"},  # without the screen: NumPy's view withholds errstate (grader/child.py)
    # without the screen: a module's containers come read-only through the views (np.sctypeDict has no update)
    "alias_rebind_nki": {"error"},
    # without the screen: the NumPy view withholds datetime64, and a dtype spelt at run time reads a stopped clock
    "clock_read_nki": {"error"},
    # issue 31 item 5: syntax only the screen refuses (C2), yet worthless since the parent executes the program the
    # child shipped: the child holds no device data (timing mode) and what it writes into an output never reaches
    # the parent, so the host transpose behind a flat copy is judged as the flat copy (12 before, docs/grading-
    # security.md "Specialize in the child, execute in the parent")
    "match_private_nki": {"failed"},
    # without the screen: 12 before the closure (docs/grading-security.md L2); the child records in timing mode only
    "values_in_child_nki": {"failed"},
    "inputs_in_child_nki": {"failed"},  # 12 before L3 (docs/grading-security.md)
    "simulate_forge_nki": {"error"},  # 12 before L4: the graded replay refuses the stream
    "inputs_in_child_legacy": {"failed"},  # 12 with L3 reverted (the legacy replay alone does not stop it)
    "format_escape_nki": {"failed", "error"},
}
# Files a hostile submission reads from outside its own directory (planted before grading, removed after).
PLANTED = {"shared_constant_path_nki": "/tmp/asst4-hostile-shared_constant.npy"}

TIMEOUT_SCALE = 0.5  # 10 s per case instead of 20: the infinite loops end sooner


def _grade(name: str, tmp_path: Path, screen: bool):
    planted = PLANTED.get(name)
    if planted is not None:
        import numpy as np

        np.save(planted, np.arange(64, dtype=np.float32).reshape(8, 8))
    try:
        return _grade_planted(name, tmp_path, screen)
    finally:
        if planted is not None and os.path.exists(planted):
            os.unlink(planted)


def _grade_planted(name: str, tmp_path: Path, screen: bool):
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


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n in WAITING else n
                                  for n in sorted(SCREEN_ON)])
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


@pytest.mark.slow
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


# ------------------------------------------------------------------------------- a class graded together ----
# A batch shares one secret seed and a reference cache (grader/seeds.py, grader/refcache.py) and runs several
# submissions' kernels at once: none of that may reach, or be changed by, student code.

needs_namespaces = pytest.mark.skipif(not detect_isolation().unshare_argv, reason="needs mount namespaces")


def _class_config(tmp_path: Path):
    from grader.batch import class_config

    scratch = tmp_path / "scratch"
    scratch.mkdir(exist_ok=True)
    base = GradeConfig(rubric_path=FAST_RUBRIC, screen=False, timeout_scale=TIMEOUT_SCALE, tmp_root=str(scratch))
    config, _ = class_config(base, tmp_path / "out")
    return config


def _cache_entry(config) -> tuple[Path, bytes]:
    """A reference in the class's cache, as a conv2d test would have left it; returns its file and bytes."""
    import numpy as np

    from grader import refcache, seeds

    store = refcache.ReferenceStore(config.ref_cache, seeds.derived_key(config.seed, "refcache"))
    store.get({"what": "test entry"}, lambda: np.arange(4096, dtype=np.float64))
    (npy,) = Path(config.ref_cache).glob("*/*.npy")
    return npy, npy.read_bytes()


@needs_namespaces
def test_the_seed_and_the_reference_cache_are_out_of_reach_of_a_full_escape(tmp_path):
    from grader import refcache

    config = _class_config(tmp_path)
    npy, before = _cache_entry(config)
    record = grade_submission(HOSTILE / "refcache_escape", tmp_path / "res", config)
    transpose = record.tests[0]
    assert transpose.status == "error" and record.score == 0
    text = transpose.message + "".join(c.message + c.output_tail for c in transpose.cases)
    private = str(Path(config.ref_cache).parent)
    assert private in text, text  # it did find the directory...
    assert str(config.seed) not in text and f"READ {private}" not in text, text  # ...but not what is inside
    assert "WROTE" not in text, text
    assert npy.read_bytes() == before
    assert "grader-files-hidden" in record.isolation
    refcache.clear_memory()
    from grader import seeds

    store = refcache.ReferenceStore(config.ref_cache, seeds.derived_key(config.seed, "refcache"))
    store.get({"what": "test entry"}, lambda: pytest.fail("the cached entry should have verified"))
    assert store.stats.from_disk == 1 and store.stats.rejected == 0


@needs_namespaces
def test_nothing_survives_from_one_grading_to_the_next(tmp_path):
    config = _class_config(tmp_path)
    first, second = tmp_path / "first", tmp_path / "second"
    shutil.copytree(HOSTILE / "memoise_escape", first)
    shutil.copytree(HOSTILE / "memoise_escape", second)
    (second / "part1" / "kernels.py").write_text((second / "part1" / "kernels.py").read_text() + "\n# another\n")
    for sub in (first, second):
        record = grade_submission(sub, tmp_path / f"res-{sub.name}", config)
        for case in record.tests[0].cases:
            assert "RuntimeError: MEMO FOUND" not in case.message, case.message
            written = ast.literal_eval(case.message.split("written: ", 1)[1].splitlines()[0])
            run_dirs = str(tmp_path / "scratch" / "asst4-case-")
            assert written and all(w.startswith(run_dirs) for w in written), written  # only its own run's files
    for place in ("/tmp", "/var/tmp", "/dev/shm", str(Path.home())):
        assert not os.path.exists(place + "/.asst4-memo")


@pytest.mark.slow
def test_a_kernel_cannot_reach_another_run_next_to_it(tmp_path):
    """Two submissions' kernels at once (a batch with --jobs 2): the escaped one finds no way into the other's
    run through /proc/<pid>/root (own /proc per PID namespace, and every child is undumpable)."""
    import threading

    from grader import problems
    from grader.runner import run_case

    rubric = load_rubric(FAST_RUBRIC)
    inv = problems.make_invocation("transpose", {"shape": [256, 128], "dtype": "float32"}, 1)
    scratch = tmp_path / "scratch"
    scratch.mkdir()

    def run(name: str, timeout_s: float):
        src = (HOSTILE / name / "part1" / "kernels.py").read_bytes()
        return run_case(src, "part1/kernels.py", "matrix_transpose", inv, mode="full", want_trace=False,
                        backend="nkisim", target="trn2", limits=rubric.limits, timeout_s=timeout_s,
                        tmp_root=str(scratch))

    victim = threading.Thread(target=run, args=("infinite_loop", 25.0))
    victim.start()
    try:
        deadline = time.monotonic() + 60
        while not any(scratch.glob("asst4-case-*/out-*")) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert any(scratch.glob("asst4-case-*/out-*")), "the victim's run never started"
        attack = run("sibling_escape", 60.0)
    finally:
        victim.join()
    assert attack.verdict == "error" and "sibling runs:" in attack.message, attack.message
    assert "WROTE" not in attack.message, attack.message


def test_a_planted_record_method_changes_no_timing(tmp_path):
    """Issue 31 C5: with the screen off, class_plant_nki plants its own `operand` on the tensor class; the core
    builds the trace's records from the views' private state, so the kernel is timed exactly as its twin (the same
    file without the plant; before the closure: 39.8 us against the twin's 47.8)."""
    twin = tmp_path / "twin"
    shutil.copytree(HOSTILE / "class_plant_nki", twin)
    kernels = twin / "part1" / "kernels.py"
    kernels.write_text("".join(line for line in kernels.read_text().splitlines(keepends=True) if "# PLANT" not in line))
    timings = []
    for sub in (HOSTILE / "class_plant_nki", twin):
        out = tmp_path / f"out-{sub.name}"
        scratch = tmp_path / f"scratch-{sub.name}"
        scratch.mkdir()
        cfg = GradeConfig(rubric_path=FAST_RUBRIC, screen=False, timeout_scale=TIMEOUT_SCALE, tmp_root=str(scratch))
        record = grade_submission(sub, out, cfg)
        tests = {t.id: t for t in record.tests}
        assert tests["part1.transpose"].status == "passed", tests["part1.transpose"].message
        timings.append(tests["part1.transpose_speed"].latency_us)
    assert timings[0] == timings[1], timings
