"""A two-worker grading's schedule (docs/grading.md, "A grading's timeline, round 8"): the critical group's calls
specialized from stand-ins while the inputs are generated and side by side, the calls off the critical path run
below the grader's priority.  Each changes when things run, never an outcome: these tests compare outcomes with
the schedule's features on and off."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from grader_helpers import (
    CONV16,
    FAST_RUBRIC,
    GROUP_CASES,
    POOL_FAILS,
    ROOT,
    STAFF_CONV,
    assert_same_outcome,
    conv_timed_rubric,
    record_results,
)

import grader.runner as runner
from grader import pipeline, problems, sandbox, timeline
from grader.pipeline import GraderError, background_nice, grade_submission
from grader.records import GradeConfig
from grader.rubric import load_rubric

CONV = problems.get("conv2d")
# the three correctness calls and the batch-1 timed call on X's first image (speculative)
CASES = [*GROUP_CASES, {**CONV16, "batch": 1, "bias": "random", "pool": 1}]
AHEAD = [False, False, False, True]
CONV16_BATCH = GROUP_CASES[0]["batch"]  # the correctness calls' batch (the timed calls' is 1)


@pytest.fixture(scope="module")
def limits():
    return load_rubric(FAST_RUBRIC).limits


def _group(source: bytes, invs, limits, tmp_path, **kw):
    return runner.run_group(source, "part2/conv2d.py", "fused_conv2d_maxpool", invs, [60.0] * len(invs),
                            want_trace=True, target="trn2", limits=limits, tmp_root=str(tmp_path),
                            speculative=AHEAD, **kw)


def _jobs(monkeypatch) -> list[dict]:
    seen: list[dict] = []
    real = runner.run_sandboxed

    def launch(argv, *, stdin_bytes, **kw):
        seen.append(json.loads(stdin_bytes({}) if callable(stdin_bytes) else stdin_bytes))
        return real(argv, stdin_bytes=stdin_bytes, **kw)

    monkeypatch.setattr(runner, "run_sandboxed", launch)
    return seen


@pytest.mark.parametrize("source", [STAFF_CONV, POOL_FAILS], ids=["staff", "pool-fails"])
def test_specializations_side_by_side_and_from_stand_ins_give_the_same_outcomes(source, limits, tmp_path,
                                                                                 monkeypatch):
    """``parallel=2`` and ``inputs=`` (the calls specialized from their stand-ins, the inputs asked for after):
    the same specializing children (one per signature, the speculative ones only when every asked-for one
    succeeded), the same outcomes bit for bit as one at a time from the inputs."""
    real = [CONV.shared_invocation(c, 11).inv for c in CASES]
    stand_ins = [CONV.stand_in(c) for c in CASES]
    jobs = _jobs(monkeypatch)
    before, before_figures = _group(source, real, limits, tmp_path)
    serial_specs = sorted(json.dumps([j["input_specs"], j["kwargs"]]) for j in jobs if j.get("want_stream"))
    jobs.clear()
    asked: list[int] = []

    def inputs():
        asked.append(len([j for j in jobs if j.get("want_stream")]))
        return real

    after, after_figures = _group(source, stand_ins, limits, tmp_path, parallel=2, inputs=inputs)
    assert sorted(json.dumps([j["input_specs"], j["kwargs"]]) for j in jobs if j.get("want_stream")) == serial_specs
    assert asked == [len(serial_specs)]  # once, after every specialization
    assert before_figures == after_figures
    for a, b in zip(before, after, strict=True):
        assert (a is None) == (b is None)
        if a is not None:
            assert_same_outcome(a, b)
    if source is POOL_FAILS:  # the pooling signature fails: the speculative call is not made
        assert len(serial_specs) == 2 and after[3] is None and after[2].verdict == "error"
    else:
        assert len(serial_specs) == 3 and all(r is not None and r.verdict == "ok" for r in after)
    assert not list(tmp_path.iterdir()), "run directories must be removed"


def test_inputs_that_do_not_match_their_stand_ins_are_a_grader_error(limits, tmp_path):
    real = [CONV.shared_invocation(c, 11).inv for c in CASES[:2]]
    wrong = CONV.stand_in({**CASES[0], "height": 18})
    with pytest.raises(ValueError, match="stand-in's signature"):
        runner.run_group(STAFF_CONV, "part2/conv2d.py", "fused_conv2d_maxpool", [wrong, CONV.stand_in(CASES[1])],
                         [60.0, 60.0], want_trace=False, target="trn2", limits=limits, tmp_root=str(tmp_path),
                         inputs=lambda: real)


def test_a_background_call_runs_below_the_graders_priority(limits, tmp_path, monkeypatch):
    """``runner.background(n)``: the kernel processes started meanwhile are asked to lower their priority by n (the
    job's ``nice``), and the child does so before anything else (its nice value and, where the scheduler groups
    processes by session, its session's)."""
    inv = CONV.shared_invocation(CASES[0], 3).inv
    jobs = _jobs(monkeypatch)

    def run() -> None:
        runner.run_case(STAFF_CONV, "part2/conv2d.py", "fused_conv2d_maxpool", inv, mode="timing", want_trace=False,
                        backend="nkisim", target="trn2", limits=limits, timeout_s=60.0, tmp_root=str(tmp_path))

    run()
    with runner.background(5):
        run()
    run()
    assert [j.get("nice") for j in jobs] == [None, None, 5, 5, None, None]  # specialize and replay each
    probe = ("import os, sys; sys.path.insert(0, sys.argv[1]); import child; child._confine({'nice': 5}); "
             "ag = open('/proc/self/autogroup').read().split() if os.path.exists('/proc/self/autogroup') else None; "
             "print(os.nice(0), ag[-1] if ag else '-')")
    mine = os.nice(0)
    out = subprocess.run([sys.executable, "-c", probe, str(ROOT / "grader")], capture_output=True, text=True,
                         check=True, start_new_session=True).stdout.split()
    assert int(out[0]) == min(19, mine + 5)
    assert out[1] in ("5", "-")


def test_background_nice_setting(monkeypatch):
    monkeypatch.delenv("GRADER_BACKGROUND_NICE", raising=False)
    assert background_nice(1) == 0 and background_nice(2) == 5
    monkeypatch.setenv("GRADER_BACKGROUND_NICE", "0")
    assert background_nice(2) == 0
    monkeypatch.setenv("GRADER_BACKGROUND_NICE", "19")
    assert background_nice(4) == 19 and background_nice(1) == 0
    for bad in ("-1", "20", "x"):
        monkeypatch.setenv("GRADER_BACKGROUND_NICE", bad)
        with pytest.raises(GraderError, match="GRADER_BACKGROUND_NICE"):
            background_nice(2)


@pytest.mark.slow
def test_only_the_critical_group_keeps_the_graders_priority(tmp_path, monkeypatch):
    """A two-worker grading: the group of the largest correctness calls runs at the grader's priority, with its
    specializations side by side; every other call below it.  The results are those of a grading with the
    background at the grader's priority (``GRADER_BACKGROUND_NICE=0``)."""
    rubric = conv_timed_rubric(tmp_path)
    sub = tmp_path / "sub"
    (sub / "part2").mkdir(parents=True)
    (sub / "part2" / "conv2d.py").write_bytes(STAFF_CONV)
    records = {}
    jobs = _jobs(monkeypatch)  # one-off processes; the warm servers' forks:
    served = sandbox.WarmServer.run

    def serve(self, stdin_bytes, **kw):
        jobs.append(json.loads(stdin_bytes({})))
        return served(self, stdin_bytes, **kw)

    monkeypatch.setattr(sandbox.WarmServer, "run", serve)
    monkeypatch.setenv("GRADER_CRITICAL_FIRST", "1")  # whatever the machine's load
    monkeypatch.setattr(pipeline, "CRITICAL_FIRST_S", 600.0)  # however long the specializations take under load
    for nice in ("5", "0"):
        monkeypatch.setenv("GRADER_BACKGROUND_NICE", nice)
        monkeypatch.setenv(timeline.ENV, str(tmp_path / f"tl{nice}.json"))
        config = GradeConfig(rubric_path=str(rubric), backend="nkisim", workers=2, tmp_root=str(tmp_path))
        records[nice] = grade_submission(sub, None, config)
    assert records["5"].status == records["0"].status == "graded"
    assert record_results(records["5"]) == record_results(records["0"])
    events = json.loads((tmp_path / "tl5.json").read_text())["events"]
    slots = [e["name"] for e in events if e["kind"] == "slot"]
    critical = [s for s in slots if "conv.plain#0" in s]
    assert len(critical) == 1 and "nice" not in critical[0]
    assert all(s.endswith(" nice 5") for s in slots if s not in critical)
    assert len(slots) > 1
    # the critical group's two correctness signatures were specialized side by side (overlapping spans)
    specs = sorted((e["t0"], e["t1"]) for e in events if e["kind"] == "specialize" and e["thread"].startswith(
        "grader-specialize"))
    assert len(specs) >= 2 and specs[1][0] < specs[0][1]
    # ... and no other call started while they ran (Slots.keep_first: they had the cores)
    others = [e for e in events if e["kind"] == "slot" and e["name"] not in critical]
    assert not [e for e in others if specs[0][0] < e["t0"] < max(t1 for _, t1 in specs)], others
    # ... and its float64 references computed only once they are made: the reference thread kept a third of the
    # cores from them while it had seconds to spare (the group's calls need it when they end)
    refs = [e for e in events if e["kind"] == "reference" and e["name"] in ("conv.plain", "conv.bias", "conv.pool")]
    assert refs and min(e["t0"] for e in refs) >= max(t1 for _, t1 in specs)
    # ... while the inputs thread generated the inputs and wrote their files: the group's process was launched
    # without writing any (runner._group_inputs found them)
    files = [e for e in events if e["kind"] == "input_file"]
    assert any(e["thread"].startswith("grader-inputs") for e in files)
    group = next(e for e in events if e["kind"] == "group_replay" and any(
        s["kind"] == "slot" and s["thread"] == e["thread"] and "conv.plain#0" in s["name"] and s["t0"] <= e["t0"]
        and e["t1"] <= s["t1"] for s in events))
    assert not [e for e in files if e["thread"] == group["thread"] and group["t0"] <= e["t0"] <= group["t1"]]
    # ... into a directory made before any specializing child started, so that their jails mask it: no process that
    # runs the kernel's Python sees the files written meanwhile (docs/grading-security.md L3)
    specializing = [j for j in jobs if j.get("input_specs")]
    assert len([j for j in specializing if j["input_specs"][0][0][0] == CONV16_BATCH]) >= 4  # both gradings
    assert all(any("asst4-inputs-" in m for m in j["mask"]) for j in specializing)
    # ... and so does the import check's, which runs while the largest inputs are drawn into their files
    imports = [j for j in jobs if j.get("mode") == "import"]
    assert imports and all(any("asst4-inputs-" in m for m in j["mask"]) for j in imports)
    assert np.all([e["kind"] != "slot" or "nice" not in e["name"] for e in
                   json.loads((tmp_path / "tl0.json").read_text())["events"]])


def test_the_input_files_directory_exists_before_any_test_starts(tmp_path, monkeypatch):
    """Every specializing child's and import check's jail masks the grading's shared input files (L3), but only a
    directory that exists when the child starts: they run beside calls whose input files are written meanwhile (a
    group writes its own while its calls are specialized, the largest inputs are drawn into their files while the
    imports are checked), so the directory is made before the import check."""
    import grader.pipeline as pipeline

    class Seen(Exception):
        pass

    seen: list[tuple[str, ...]] = []
    check_imports = pipeline._Grading.check_imports

    def imports(grading, tests):  # the import check's children start beside the inputs drawn into their files
        seen.append(grading.servers.inputs_dirs())
        return check_imports(grading, tests)

    def phases(grading, tests, workers):
        seen.append(grading.servers.inputs_dirs())
        raise Seen

    monkeypatch.setattr(pipeline._Grading, "check_imports", imports)
    monkeypatch.setattr(pipeline, "_run_phases", phases)
    sub = tmp_path / "sub"
    (sub / "part2").mkdir(parents=True)
    (sub / "part2" / "conv2d.py").write_bytes(STAFF_CONV)
    config = GradeConfig(rubric_path=str(conv_timed_rubric(tmp_path)), backend="nkisim", workers=2,
                         tmp_root=str(tmp_path))
    try:
        grade_submission(sub, None, config)  # an error record (or Seen): the grading stops there either way
    except Seen:
        pass
    assert len(seen) == 2 and seen[0] == seen[1] and len(seen[0]) == 1 and "asst4-inputs-" in seen[0][0]
    assert not os.path.exists(seen[0][0])  # removed with the grading's servers


def _staff_grading(tmp_path, workers: int):
    from grader.pipeline import _Grading
    from grader.submission import load_submission

    sub = tmp_path / "sub"
    (sub / "part2").mkdir(parents=True, exist_ok=True)
    (sub / "part2" / "conv2d.py").write_bytes(STAFF_CONV)
    rubric = load_rubric(str(conv_timed_rubric(tmp_path)))
    config = GradeConfig(rubric_path="-", backend="nkisim", workers=workers, tmp_root=str(tmp_path))
    return _Grading(load_submission(sub), rubric, config, "nkisim", 7), rubric


@pytest.mark.parametrize("workers", [2, 1])
def test_the_critical_calls_inputs_are_generated_beside_the_screen(tmp_path, monkeypatch, workers):
    """Several workers: the inputs of the largest correctness calls and of the timed calls on the same X and W (not
    the float16 pair's) are generated in a thread started before the static screen, into the memo the group's calls
    then read; their input files are not written then (L3: the group writes them while its calls are specialized).
    One worker (a batch's gradings): nothing is generated ahead."""
    import grader.pipeline as pipeline

    made: list[tuple[str, str, int]] = []
    real = pipeline._Grading._invocation

    def invocation(self, test, case):
        import threading

        made.append((threading.current_thread().name, test.id, case["batch"]))
        return real(self, test, case)

    files: list[str] = []
    written = runner.KernelServers.input_file

    def input_file(self, arr):
        import threading

        files.append(threading.current_thread().name)
        return written(self, arr)

    monkeypatch.setattr(pipeline._Grading, "_invocation", invocation)
    monkeypatch.setattr(runner.KernelServers, "input_file", input_file)
    grading, rubric = _staff_grading(tmp_path, workers)
    try:
        early = grading.early_inputs(rubric.tests)
        if workers == 1:
            assert early is None
            return
        early.join(60)
        ahead = [(t, b) for name, t, b in made if name == "grader-early-inputs"]
        assert ahead[:3] == [("conv.plain", CONV16_BATCH), ("conv.bias", CONV16_BATCH), ("conv.pool", CONV16_BATCH)]
        timed = {t.id for t in rubric.tests if t.kind == "performance" and t.cases[0]["dtype"] == "float32"}
        assert {t for t, _ in ahead[3:]} == timed and all(b == 1 for _, b in ahead[3:])
        assert not files
        # the group's generation finds them: the same arrays
        t = next(t for t in rubric.tests if t.id == "conv.plain")
        assert grading._invocation(t, t.cases[0]).inv.args[0] is CONV.shared_invocation(
            t.cases[0], problems.case_seed(grading.seed, pipeline._input_key(CONV, t.cases[0]), 0)).inv.args[0]
    finally:
        if grading.servers is not None:
            grading.servers.close()


@pytest.mark.parametrize("workers", [2, 1])
def test_a_test_no_other_requires_gives_up_its_worker_once_its_calls_are_made(tmp_path, monkeypatch, workers):
    """While a test no other test requires judges and costs its last call in the parent, it claims no worker, so
    that a call made ahead can take the idle slot; it claims it again before it ends (``_run_scheduled`` releases
    it once its dependents started).  A required test keeps its claim: no call made ahead slips in before its
    dependents' calls.  One worker: claims are not counted."""
    grading, rubric = _staff_grading(tmp_path, workers)
    seen: list[int] = []

    def run(test, done):
        grading._calls_made(test)
        grading._calls_made(test)  # once only
        seen.append(grading.slots.claims)

    monkeypatch.setattr(grading, "_run_test", run)
    timed = next(t for t in rubric.tests if t.kind == "performance")
    required = next(t for t in rubric.tests if t.id in timed.requires)
    try:
        grading.slots.add_claims(1)  # as _run_scheduled does before a test's thread starts
        grading.run_test(timed, {})
        grading.run_test(required, {})
        assert seen == ([0, 1] if workers > 1 else [1, 1]) and grading.slots.claims == 1
    finally:
        if grading.servers is not None:
            grading.servers.close()


def test_a_timed_call_judged_as_its_member_ended_is_not_judged_again_when_its_group_returns(tmp_path, monkeypatch):
    """runner.run_group hands a member's run over as soon as it ends (``early``), and the grading judges and costs a
    timed call then; when the group returns with that same run, it is not judged a second time; another run of the
    call (the group's process failed, the call was made again) is."""
    from grader.runner import CaseRun

    grading, rubric = _staff_grading(tmp_path, 2)
    calls: list[tuple[str, object]] = []

    def judge(test, case, shared, run):
        calls.append((test.id, run))
        return None, None

    monkeypatch.setattr(grading, "_judge_timed", judge)
    timed = next(t for t in rubric.tests if t.kind == "performance")
    member = (timed, 0, timed.cases[0])
    try:
        run = CaseRun("ok", trace=object())
        grading._judge_ahead([member], [run])  # as its member ended (early)
        grading.judged_ahead[(timed.id, 0)][1].result()
        grading._judge_ahead([member], [run])  # the group returned with it
        assert calls == [(timed.id, run)]
        other = CaseRun("ok", trace=object())
        grading._judge_ahead([member], [other])
        grading.judged_ahead[(timed.id, 0)][1].result()
        assert calls == [(timed.id, run), (timed.id, other)] and grading.judged_ahead[(timed.id, 0)][0] is other
    finally:
        grading.judge_pool.shutdown(wait=True)
        if grading.servers is not None:
            grading.servers.close()


def test_a_correctness_call_is_judged_as_its_member_ends_and_its_test_takes_that_verdict(tmp_path, monkeypatch):
    """A correctness call's output is judged as soon as its member of the group ends (``early``: correctness=True),
    never when the group returns (its test is about to judge it); its test takes that verdict for that run only,
    and judges itself when the run differs, the judging failed, or it is still queued (taken back: not waited
    for)."""
    import threading

    import grader.pipeline as pipeline
    from grader.runner import CaseRun

    grading, rubric = _staff_grading(tmp_path, 2)
    calls: list[tuple[str, object]] = []
    gate = threading.Event()

    def judge(test, case, shared, run):
        calls.append((test.id, run))
        if run.message == "wait":
            gate.wait(30)
        if run.message == "fail":
            raise RuntimeError("judging ahead failed")
        return f"verdict of {test.id}"

    monkeypatch.setattr(grading, "_judge_correct", judge)
    plain, other = [t for t in rubric.tests if t.kind == "correctness"][:2]
    member = (plain, 0, plain.cases[0])
    try:
        run = CaseRun("ok")
        grading._judge_ahead([member], [run])  # the group returned: its test judges it
        assert calls == [] and (plain.id, 0) not in grading.judged_ahead
        grading._judge_ahead([member], [run], correctness=True)  # its member ended
        assert grading._judged_ahead(plain, 0, run) == f"verdict of {plain.id}" and calls == [(plain.id, run)]
        assert grading._judged_ahead(plain, 0, run) is None  # taken once
        grading._judge_ahead([member], [CaseRun("ok")], correctness=True)  # its test has judged it: not again
        assert len(calls) == 1 and (plain.id, 0) not in grading.judged_ahead
        grading.judge_taken.clear()  # (the same test's call again, for the cases below)
        grading._judge_ahead([member], [run], correctness=True)
        assert grading._judged_ahead(plain, 0, CaseRun("ok")) is None  # another run of the call
        grading.judge_taken.clear()
        grading._judge_ahead([member], [CaseRun("ok", message="fail")], correctness=True)
        failed = grading.judged_ahead[(plain.id, 0)][0]
        assert grading._judged_ahead(plain, 0, failed) is None
        # every judging thread busy (other calls' judging): this call's is still queued when its test asks, and
        # taken back
        for _ in range(pipeline.JUDGE_AHEAD_THREADS):
            grading.judge_pool.submit(gate.wait, 30)
        queued = CaseRun("ok")
        grading._judge_ahead([(other, 0, other.cases[0])], [queued], correctness=True)
        future = grading.judged_ahead[(other.id, 0)][1]
        assert grading._judged_ahead(other, 0, queued) is None and future.cancelled()
    finally:
        gate.set()
        grading.judge_pool.shutdown(wait=True)
        if grading.servers is not None:
            grading.servers.close()


def test_a_call_is_judged_ahead_only_once_its_reference_is_made(tmp_path, monkeypatch):
    """A call handed over before the reference thread made its reference (a batch-1 timed member ends a quarter of
    the way through the group, while the thread makes the batch-4 float64 convolution the batch-1 one is sliced
    from) is judged once that reference is made, not at once: judging computed the batch-1 convolution again
    (1.5 CPU s).  One whose test has asked by then is left to its test."""
    from concurrent.futures import Future

    from grader.runner import CaseRun

    grading, rubric = _staff_grading(tmp_path, 2)
    calls: list[tuple[str, object]] = []
    monkeypatch.setattr(grading, "_judge_timed", lambda test, case, shared, run: calls.append((test.id, run)))
    timed = [t for t in rubric.tests if t.kind == "performance"][:2]
    refs = [Future(), Future()]
    for t, ref in zip(timed, refs, strict=True):
        grading.ref_futures[(t.id, id(t.cases[0]))] = ref
    runs = [CaseRun("ok", trace=object()), CaseRun("ok", trace=object())]
    try:
        grading._judge_ahead([(t, 0, t.cases[0]) for t in timed], runs, correctness=True)
        assert calls == [] and not grading.judged_ahead
        refs[0].set_result(None)  # the reference thread made the first one's
        grading.judged_ahead[(timed[0].id, 0)][1].result()
        assert calls == [(timed[0].id, runs[0])]
        assert grading._judged_ahead(timed[1], 0, runs[1]) is None  # its test asked first: it judges itself
        refs[1].set_result(None)
        assert calls == [(timed[0].id, runs[0])] and (timed[1].id, 0) not in grading.judged_ahead
    finally:
        grading.judge_pool.shutdown(wait=True)
        if grading.servers is not None:
            grading.servers.close()


@pytest.mark.slow
def test_timed_calls_judged_as_their_group_returns_give_what_their_tests_give(tmp_path, monkeypatch):
    """Several workers: a group's timed calls (made ahead or with the correctness calls) are judged and costed in a
    thread of their own as soon as the group returns, and their tests take that verdict and report; when that
    judging fails, the test judges again itself.  Either way the results are those of a one-worker grading, which
    judges each timed call in its test."""
    import threading

    import grader.pipeline as pipeline

    rubric = conv_timed_rubric(tmp_path)
    sub = tmp_path / "sub"
    (sub / "part2").mkdir(parents=True)
    (sub / "part2" / "conv2d.py").write_bytes(STAFF_CONV)
    judged: list[tuple[str, str]] = []
    real = pipeline._Grading._judge_timed
    fail_ahead = False

    def judge(self, test, case, shared, run):
        name = threading.current_thread().name
        judged.append((name.rsplit("_", 1)[0], test.id))
        if fail_ahead and name.startswith("grader-judge-ahead"):
            raise RuntimeError("judging ahead failed")
        return real(self, test, case, shared, run)

    monkeypatch.setattr(pipeline._Grading, "_judge_timed", judge)
    results = {}
    for label, workers, fail_ahead in (("one", 1, False), ("two", 2, False), ("two-failing", 2, True)):
        judged.clear()
        config = GradeConfig(rubric_path=str(rubric), backend="nkisim", workers=workers, tmp_root=str(tmp_path))
        record = grade_submission(sub, None, config)
        assert record.status == "graded"
        results[label] = record_results(record)
        timed = sorted(t.id for t in record.tests if t.kind == "performance")
        if workers == 1:
            assert sorted(t for _, t in judged) == timed and all(n != "grader-judge-ahead" for n, _ in judged)
        elif not fail_ahead:
            # each judged once: ahead, or by its test when the test asked while its judging was still queued (taken
            # back then, round 12: a loaded CI machine left the float16 pair's queued)
            assert sorted(t for _, t in judged) == timed
        else:
            assert sorted(t for n, t in judged if n != "grader-judge-ahead") == timed  # each judged again
    assert results["two"] == results["one"] == results["two-failing"]
    assert all(t[4] is not None for t in results["one"] if t[0] in timed)  # every timed call judged and costed


def test_a_slot_is_kept_for_the_critical_group_until_it_takes_one():
    """``_Slots.reserve``: with a slot kept, other calls share what is left; the critical group's call takes the kept
    slot whenever it comes, and then the slots are everyone's again (``reserve(-1)`` too, when no test made it)."""
    import threading
    import time

    from grader.pipeline import _Slots

    slots = _Slots(2)
    slots.reserve(1)
    order: list[str] = []
    small_in = threading.Event()
    release_small = threading.Event()

    def small(name: str, hold_until: threading.Event | None) -> None:
        with slots.hold(10, label=name):
            order.append(name)
            small_in.set()
            if hold_until is not None:
                hold_until.wait(10)

    first = threading.Thread(target=small, args=("small-1", release_small))
    first.start()
    assert small_in.wait(10)
    second = threading.Thread(target=small, args=("small-2", None))
    second.start()
    time.sleep(0.2)
    assert order == ["small-1"]  # the second slot is kept
    with slots.hold(1000, label="group", critical=True):
        order.append("group")
        assert slots.reserved == 0
        time.sleep(0.1)
        assert order == ["small-1", "group"]  # both slots busy
    second.join(10)
    assert order == ["small-1", "group", "small-2"]
    release_small.set()
    first.join(10)
    slots.reserve(1)
    slots.reserve(-1)  # no test made the group: the slot is free again
    with slots.hold(1, label="a"), slots.hold(1, label="b"):
        assert slots.busy == 2


@pytest.mark.slow
def test_a_calls_outputs_are_freed_once_judged(tmp_path, monkeypatch):
    """A call's output map is dropped as soon as its verdict is computed, in the judging thread (pipeline
    ``_release_outputs``), not when the grading ends: kept in its group's runs, the 224x224 group's three batch-4
    outputs (460 MB of tmpfs pages) were unmapped and freed in the grading's last step, on one core.  Checked when
    the grading closes (before its group's runs are dropped): no output that was judged is still alive, and the
    results are those of a grading that keeps them."""
    import weakref

    import grader.pipeline as pipeline

    rubric = conv_timed_rubric(tmp_path)
    sub = tmp_path / "sub"
    (sub / "part2").mkdir(parents=True)
    (sub / "part2" / "conv2d.py").write_bytes(STAFF_CONV)
    judged: list[weakref.ref] = []
    alive_at_close: list[int] = []
    real_judge, real_settle = pipeline.judge_output, problems.settle

    def judge(outputs, *args, **kw):
        judged.extend(weakref.ref(o) for o in outputs)
        return real_judge(outputs, *args, **kw)

    def settle():
        import gc

        gc.collect()
        alive_at_close.append(sum(1 for r in judged if r() is not None))
        return real_settle()

    monkeypatch.setattr(pipeline, "judge_output", judge)
    monkeypatch.setattr(problems, "settle", settle)
    config = GradeConfig(rubric_path=str(rubric), backend="nkisim", workers=2, tmp_root=str(tmp_path))
    record = grade_submission(sub, None, config)
    assert record.status == "graded"
    grouped = [t for t in record.tests if t.kind == "correctness"]
    assert len(judged) >= len(grouped) >= 3 and alive_at_close == [0]
    monkeypatch.setattr(pipeline, "_release_outputs", lambda run: None)  # the old behaviour: kept to the end
    judged.clear()
    kept = grade_submission(sub, None, config)
    assert alive_at_close[1] >= len(grouped)  # the group's runs held them: the check above can fail
    assert record_results(kept) == record_results(record)


def test_prepared_output_files_are_poisoned_taken_once_and_not_made_after_close(tmp_path, limits):
    """``KernelServers.prepare_outputs`` writes, in the grading's shared inputs' directory, a poisoned .npy file
    per (shape, dtype) -- np.save's bytes of an all-NaN array -- and ``take_output`` moves a complete one into a
    group member's output directory under the name nkisim's replay takes it by (``buffers.ready_file_name``),
    each file once; a shape nothing was prepared for is not taken.  Once a group asked for a prepared shape, and
    after the grading closes, nothing more is prepared."""
    from nkisim.core import buffers

    servers = runner.KernelServers(target="trn2", limits=limits, tmp_root=str(tmp_path))
    try:
        servers.prepare_outputs([((2, 3, 50000), np.dtype(np.float32))] * 2)
        member = tmp_path / "out" / "m0"
        member.parent.mkdir()
        assert not servers.take_output((2, 3, 4), np.dtype(np.float32), member)
        for _ in range(2):
            assert servers.take_output((2, 3, 50000), np.dtype(np.float32), member)
            taken = member / buffers.ready_file_name((2, 3, 50000), np.float32)
            np.save(tmp_path / "nan.npy", np.full((2, 3, 50000), np.nan, np.float32))
            assert taken.read_bytes() == (tmp_path / "nan.npy").read_bytes()
            taken.unlink()
        assert not servers.take_output((2, 3, 50000), np.dtype(np.float32), member)  # each taken once
        inputs_dir = servers.inputs_dirs()[0]
        # once a group asked for what was wanted, nothing more is made (it would be taken by no one)
        servers.prepare_outputs([((2, 3, 50000), np.dtype(np.float32))])
        assert not servers.take_output((2, 3, 50000), np.dtype(np.float32), member)
        assert not list(Path(inputs_dir).glob("out-*"))
    finally:
        servers.close()
    servers.prepare_outputs([((2, 3, 50000), np.dtype(np.float32))])
    assert not os.path.exists(inputs_dir) and not servers.take_output((2, 3, 50000), np.dtype(np.float32), member)


@pytest.mark.slow
def test_a_group_takes_its_prepared_outputs_and_gives_the_same_results(tmp_path, monkeypatch):
    """The grouped calls' outputs prepared ahead (``_Grading._early_outputs``, here made before the grading goes
    on rather than in a background thread, so that they are complete when the group starts) are taken by the
    group's members, and the grading's results are those of a grading whose replays make their own files."""
    from grader_helpers import conv_rubric, conv_test_toml

    import grader.pipeline as pipeline

    # outputs of 1 MiB or more (a replay keeps a smaller tensor in memory): the unpooled calls' 1.2 MB
    cases = [{**case, "height": 36, "width": 36} for case in GROUP_CASES]
    rubric = conv_rubric(tmp_path / "rubric.toml", *(conv_test_toml(f"conv.{k}", f"conv {k}", [c])
                                                     for k, c in enumerate(cases)))
    sub = tmp_path / "sub"
    (sub / "part2").mkdir(parents=True)
    (sub / "part2" / "conv2d.py").write_bytes(STAFF_CONV)
    real_early, real_take = pipeline._Grading._early_outputs, runner.KernelServers.take_output
    taken: list[bool] = []

    def early(self, calls):
        thread = real_early(self, calls)
        if thread is not None:
            thread.join()
        return thread

    def take(self, shape, dtype, member_dir):
        taken.append(real_take(self, shape, dtype, member_dir))
        return taken[-1]

    left: list[str] = []
    real_collect = runner._collect_group

    def collect(proc, out_dir, *args):
        left.extend(str(p) for p in out_dir.glob("m*/ready-*"))  # a prepared file no member took
        return real_collect(proc, out_dir, *args)

    monkeypatch.setattr(pipeline._Grading, "_early_outputs", early)
    monkeypatch.setattr(runner.KernelServers, "take_output", take)
    monkeypatch.setattr(runner, "_collect_group", collect)
    config = GradeConfig(rubric_path=str(rubric), backend="nkisim", workers=2, tmp_root=str(tmp_path))
    record = grade_submission(sub, None, config)
    # the two unpooled members took theirs (the pooled output is smaller than a file), and each replay used it
    assert record.status == "graded" and taken == [True, True, False] and not left
    assert [t.status for t in record.tests] == ["passed"] * 3
    assert (record.timings["outputs:prepared"], record.timings["outputs:taken"]) == (2, 2)
    monkeypatch.setattr(runner.KernelServers, "take_output", lambda self, shape, dtype, member_dir: False)
    own = grade_submission(sub, None, config)
    assert record_results(own) == record_results(record)
    # GRADER_PREPARE_OUTPUTS=0: none prepared (the replays make their own)
    monkeypatch.setattr(runner.KernelServers, "take_output", take)
    monkeypatch.setenv("GRADER_PREPARE_OUTPUTS", "0")
    taken.clear()
    off = grade_submission(sub, None, config)
    assert "outputs:prepared" not in off.timings and not any(taken)
    assert record_results(off) == record_results(record)


def test_no_other_call_starts_while_the_critical_group_is_specialized():
    """``_Slots.keep_first``: for its time, a call that is not critical waits even on a free slot (and a slot is not
    idle for calls made ahead), a critical one starts; the hold ends when lifted or when its time is up."""
    import threading
    import time

    from grader.pipeline import _Slots

    slots = _Slots(2)
    started: list[str] = []

    def call(name: str, critical: bool = False) -> None:
        with slots.hold(10, label=name, critical=critical):
            started.append(name)

    slots.keep_first(30)
    small = threading.Thread(target=call, args=("small",))
    small.start()
    time.sleep(0.2)
    assert started == []  # a free slot, but held back
    stop = threading.Event()
    threading.Timer(0.3, stop.set).start()
    assert not slots.wait_idle(stop, timeout=0.05)  # nor is a slot idle for the calls made ahead
    call("critical", critical=True)
    assert started == ["critical"]
    time.sleep(0.1)
    assert started == ["critical"]  # still held back
    slots.keep_first(0)  # the specializations are made
    small.join(10)
    assert started == ["critical", "small"]
    slots.keep_first(0.3)  # bounded: a hung specialization holds the others back no longer than this
    t0 = time.monotonic()
    call("late")
    assert started[-1] == "late" and 0.25 <= time.monotonic() - t0 < 5
    assert slots.wait_idle(threading.Event(), timeout=0.05)


def test_the_critical_group_starts_alone_only_when_asked(monkeypatch):
    """``GRADER_CRITICAL_FIRST``: 0 (the default) never holds the other calls back; auto only below two of load per
    worker (under load the niced calls end a grading last, and holding them back made it longer); 1 always."""
    monkeypatch.delenv("GRADER_CRITICAL_FIRST", raising=False)
    monkeypatch.setattr(os, "getloadavg", lambda: (0.0, 0.0, 0.0))
    assert not pipeline.critical_first(2)
    monkeypatch.setenv("GRADER_CRITICAL_FIRST", "auto")
    monkeypatch.setattr(os, "getloadavg", lambda: (3.9, 9.0, 9.0))
    assert pipeline.critical_first(2) and not pipeline.critical_first(1)
    monkeypatch.setattr(os, "getloadavg", lambda: (4.0, 0.0, 0.0))
    assert not pipeline.critical_first(2)
    monkeypatch.setenv("GRADER_CRITICAL_FIRST", "1")
    assert pipeline.critical_first(2)
    monkeypatch.setenv("GRADER_CRITICAL_FIRST", "0")
    monkeypatch.setattr(os, "getloadavg", lambda: (0.0, 0.0, 0.0))
    assert not pipeline.critical_first(2)
    monkeypatch.setenv("GRADER_CRITICAL_FIRST", "yes")
    with pytest.raises(GraderError, match="GRADER_CRITICAL_FIRST"):
        pipeline.critical_first(2)


def test_the_critical_groups_tests_are_started_first(monkeypatch):
    """``_run_scheduled`` starts the tests of the critical group (the largest correctness calls) before the others
    that are ready with them, whatever the rubric's order: one of them makes the group, whose process the grading
    ends with.  The results come back in the rubric's order."""
    import threading
    from types import SimpleNamespace

    from grader.pipeline import _CaseGroup, _run_scheduled, _Slots

    rubric = load_rubric()
    by_id = {t.id: t for t in rubric.tests}
    tests = tuple(by_id[i] for i in ("part1.transpose", "part2.small", "part2.large", "part2.bias", "part2.maxpool"))
    group = _CaseGroup([(t, 0, t.cases[0]) for t in tests[2:]])
    submitted: list[str] = []
    lock = threading.Lock()

    class Grading:
        units = [group]
        slots = _Slots(2)
        critical_units: list = []

        def run_test(self, test, done):
            return SimpleNamespace(id=test.id, passed=True)

    real = pipeline.ThreadPoolExecutor

    class Recording(real):
        def submit(self, fn, *args, **kwargs):
            if getattr(fn, "__name__", "") == "run_test":
                with lock:
                    submitted.append(args[0].id)
            return super().submit(fn, *args, **kwargs)

    monkeypatch.setattr(pipeline, "ThreadPoolExecutor", Recording)
    results = _run_scheduled(Grading(), tests, 2)
    assert submitted == ["part2.large", "part2.bias", "part2.maxpool", "part1.transpose", "part2.small"]
    assert [r.id for r in results] == [t.id for t in tests]
