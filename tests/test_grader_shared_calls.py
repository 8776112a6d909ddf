"""Issue 35, item 2: correctness calls of one current-API kernel on the same X and W (part2.large, bias, maxpool) are
specialized once per signature and replayed together in one sandboxed process (grader.runner.run_group,
nkisim.stream.replay_group), reusing products of bit-identical matmul operands.  Each call's outcome -- verdict,
message, outputs bit for bit, trace -- is the one it gets alone; a failing call leaves its siblings' as they are;
a group that cannot give a call its own outcome replays that call alone."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from grader_helpers import (
    FAST_RUBRIC,
    GROUP_CASES,
    LEGACY_CONV,
    POOL_FAILS,
    ROOT,
    STAFF_CONV,
    assert_same_outcome,
    conv_group_tests,
    conv_rubric,
    conv_timed_rubric,
    record_results,
)

import grader.runner as runner
from grader import problems
from grader.pipeline import grade_submission
from grader.records import GradeConfig
from grader.rubric import load_rubric
from grader.sandbox import ProcessResult


def _invs(seed: int = 5) -> list:
    # the pipeline's rule: cases differing only in bias and pooling share the seed of their inputs, hence X and W
    return [problems.get("conv2d").shared_invocation(case, seed).inv for case in GROUP_CASES]


def _alone(source: bytes, invs, limits, tmp_path, api: str = "nki") -> list:
    return [runner.run_case(source, "part2/conv2d.py", "fused_conv2d_maxpool", inv, mode="full", want_trace=True,
                            backend="nkisim", target="trn2", limits=limits, timeout_s=60.0, tmp_root=str(tmp_path),
                            api=api) for inv in invs]


def _group(source: bytes, invs, limits, tmp_path, api: str = "nki"):
    return runner.run_group(source, "part2/conv2d.py", "fused_conv2d_maxpool", invs, [60.0] * len(invs),
                            want_trace=True, target="trn2", limits=limits, tmp_root=str(tmp_path), api=api)


@pytest.fixture(scope="module")
def limits():
    return load_rubric(FAST_RUBRIC).limits


def test_grouped_calls_are_their_separate_runs_bit_for_bit(limits, tmp_path, monkeypatch):
    seen: list = []
    real = runner.run_sandboxed

    def launch(argv, *, stdin_bytes, timeout_s, **kw):
        seen.append((json.loads(stdin_bytes({}) if callable(stdin_bytes) else stdin_bytes), timeout_s, kw["limits"]))
        return real(argv, stdin_bytes=stdin_bytes, timeout_s=timeout_s, **kw)

    monkeypatch.setattr(runner, "run_sandboxed", launch)
    invs = _invs()
    grouped, figures = _group(STAFF_CONV, invs, limits, tmp_path)
    jobs = [j for j, _, _ in seen]
    # one specialization per signature (the two pool-1 calls share theirs), then one replay of all three
    assert [j.get("want_stream", False) for j in jobs] == [True, True, False]
    assert len(jobs[2]["group"]) == 3 and "stream_file" not in jobs[2]
    # the group's process runs in the sandbox as every call does, with the sum of the calls' time limits
    assert seen[2][2] is limits and seen[2][1] == 180.0
    assert figures["hits"] > 0 and figures["hits"] == 2 * figures["misses"] and figures["alone"] == 0
    monkeypatch.setattr(runner, "run_sandboxed", real)
    for alone, got in zip(_alone(STAFF_CONV, invs, limits, tmp_path), grouped, strict=True):
        assert alone.verdict == "ok", alone.message
        assert_same_outcome(alone, got)
        # the isolation layers of the process that ran it are recorded, as for a single replay
        assert {"numpy-clock-stopped", "undumpable"} & set(alone.features) <= set(got.features)
    assert not list(tmp_path.iterdir()), "run directories must be removed"


def test_legacy_calls_are_grouped_as_the_current_apis_are(limits, tmp_path):
    """The legacy API is replayed too (docs/grading-security.md, item 5): its calls group the same way."""
    invs = _invs()
    grouped, figures = _group(LEGACY_CONV, invs, limits, tmp_path, api="legacy")
    assert figures["hits"] > 0 and figures["alone"] == 0
    for alone, got in zip(_alone(LEGACY_CONV, invs, limits, tmp_path, api="legacy"), grouped, strict=True):
        assert alone.verdict == "ok", alone.message
        assert_same_outcome(alone, got)


def test_a_call_that_fails_leaves_its_siblings_as_they_are_alone(limits, tmp_path):
    invs = _invs()
    grouped, _ = _group(POOL_FAILS, invs, limits, tmp_path)
    alone = _alone(POOL_FAILS, invs, limits, tmp_path)
    assert [r.verdict for r in alone] == ["ok", "ok", "error"] and "no pooling here" in alone[2].message
    for a, g in zip(alone, grouped, strict=True):
        assert_same_outcome(a, g)


def test_a_refused_stream_is_that_calls_error_only(limits, tmp_path, monkeypatch):
    """A compromised child ships a stream that breaks two thirds in for the pooling signature: the pooling call's
    replay raises there (the message it gets alone), the other two are unaffected."""
    real = runner._specialized

    def broken(source, rel_file, function, inv, **common):
        run = real(source, rel_file, function, inv, **common)
        if inv.kwargs["pool_size"] == 2:
            s = json.loads(run.stream)
            calls = [i for i, ev in enumerate(s["events"]) if ev[0] == "call"]
            s["events"][calls[2 * len(calls) // 3]][1] = 10**6
            run.stream = json.dumps(s).encode()
        return run

    monkeypatch.setattr(runner, "_specialized", broken)
    invs = _invs()
    grouped, figures = _group(STAFF_CONV, invs, limits, tmp_path)
    assert grouped[2].verdict == "error"
    assert grouped[2].message.startswith("the kernel's instruction stream was refused: StreamError")
    assert "malformed function index" in grouped[2].message
    for a, g in zip(_alone(STAFF_CONV, invs[:2], limits, tmp_path), grouped[:2], strict=True):
        assert_same_outcome(a, g)
    assert figures["alone"] == 0


def test_a_group_that_cannot_give_a_call_its_outcome_replays_it_alone(limits, tmp_path, monkeypatch):
    """The group's process timed out, crashed or ran a call out of memory: those calls are replayed alone."""
    real = runner._collect_group
    monkeypatch.setattr(runner, "_collect_group", lambda *a: [None if k == 1 else r for k, r in enumerate(real(*a))])
    invs = _invs()
    grouped, figures = _group(STAFF_CONV, invs, limits, tmp_path)
    assert figures["alone"] == 1
    monkeypatch.setattr(runner, "_collect_group", lambda *a: None)
    whole, figures = _group(STAFF_CONV, invs, limits, tmp_path)
    assert figures["alone"] == 3
    for a, g, w in zip(_alone(STAFF_CONV, invs, limits, tmp_path), grouped, whole, strict=True):
        assert_same_outcome(a, g)
        assert_same_outcome(a, w)


def _member_dir(out: Path, k: int, status: dict) -> None:
    (out / f"m{k}").mkdir(parents=True)
    (out / f"m{k}" / "status.json").write_text(json.dumps(status))


def test_what_the_parent_takes_from_a_group_process(tmp_path, limits):
    invs = _invs()[:3]
    proc = ProcessResult(returncode=0, timed_out=False, wall_seconds=3.0, output_tail="")
    (tmp_path / "status.json").write_text(json.dumps({"ok": True, "group": {"hits": 4, "misses": 2}}))
    _member_dir(tmp_path, 0, {"ok": False, "stage": "kernel", "error_type": "MemoryError", "error": "",
                              "cpu_seconds": 0.5})
    _member_dir(tmp_path, 1, {"ok": False, "stage": "kernel", "error_type": "StreamError", "error": "bad event",
                              "cpu_seconds": 0.5})
    figures = {"hits": 0, "misses": 0}
    runs = runner._collect_group(proc, tmp_path, invs, [60.0] * 3, "conv2d.py", limits, False, "part2/conv2d.py",
                                 figures)
    # out of memory beside the others: alone; its own error: kept; no status at all: alone
    assert runs[0] is None and runs[1].verdict == "error" and "bad event" in runs[1].message and runs[2] is None
    assert figures == {"hits": 4, "misses": 2} and runs[1].wall_seconds == 1.0
    for failed in (ProcessResult(returncode=None, timed_out=True, wall_seconds=9.0, output_tail=""),
                   ProcessResult(returncode=-9, timed_out=False, wall_seconds=9.0, output_tail="",
                                 signal_name="SIGKILL")):
        assert runner._collect_group(failed, tmp_path, invs, [60.0] * 3, "conv2d.py", limits, False, "x", {}) is None


def _submission(tmp_path: Path, source: bytes) -> Path:
    """A submission of ``source`` as its part2/conv2d.py."""
    sub = tmp_path / "sub"
    (sub / "part2").mkdir(parents=True)
    (sub / "part2" / "conv2d.py").write_bytes(source)
    return sub


def _graded_with_and_without_sharing(tmp_path: Path, monkeypatch, rubric: Path, source: bytes, workers: int):
    """``source`` graded with ``rubric`` and product sharing on, then off: the two records."""
    sub = _submission(tmp_path, source)
    records = []
    for share in ("1", "0"):
        monkeypatch.setenv("GRADER_SHARE_PRODUCTS", share)
        config = GradeConfig(rubric_path=str(rubric), backend="nkisim", workers=workers, tmp_root=str(tmp_path))
        records.append(grade_submission(sub, None, config))
    return records[0], records[1]


@pytest.mark.slow
@pytest.mark.parametrize("source", [STAFF_CONV, POOL_FAILS, LEGACY_CONV], ids=["staff", "pool-fails", "legacy-staff"])
def test_a_grading_with_and_without_grouping_gives_the_same_results(tmp_path, monkeypatch, source):
    rubric = conv_rubric(tmp_path / "rubric.toml", conv_group_tests())
    on, off = _graded_with_and_without_sharing(tmp_path, monkeypatch, rubric, source, workers=2)
    assert [(t.id, t.status, t.score, t.message) for t in on.tests] == \
        [(t.id, t.status, t.score, t.message) for t in off.tests]
    assert [c.max_abs_error for t in on.tests for c in t.cases] == [c.max_abs_error for t in off.tests for c in t.cases]
    assert on.timings["share:groups"] == 1 and on.timings["share:calls"] == 3
    assert "share:groups" not in off.timings
    expected = ["passed", "passed", "error" if source is POOL_FAILS else "passed"]
    assert [t.status for t in on.tests] == expected


def test_grouping_by_default_whatever_the_workers(monkeypatch):
    """A batch grades each submission with one worker, a grading alone has two: both group, in one group (a
    grading with two workers is scheduled so that no worker waits for the group; GRADER_GROUP_SPLIT=1 makes one
    group per worker)."""
    from grader.pipeline import group_split, share_enabled

    monkeypatch.delenv("GRADER_SHARE_PRODUCTS", raising=False)
    monkeypatch.delenv("GRADER_GROUP_SPLIT", raising=False)
    assert share_enabled(1) and share_enabled(2) and not group_split()
    monkeypatch.setenv("GRADER_GROUP_SPLIT", "1")
    assert group_split()
    monkeypatch.setenv("GRADER_SHARE_PRODUCTS", "1")
    assert share_enabled(1) and share_enabled(2)
    monkeypatch.setenv("GRADER_SHARE_PRODUCTS", "0")
    assert not share_enabled(1) and not share_enabled(2)


# The staff kernel computing only the first image: wrong for the batch-2 correctness calls, right for the batch-1
# timed calls (which then must not count: their tests are skipped, as without grouping)
FIRST_IMAGE_ONLY = STAFF_CONV.replace(b"    for b in nl.affine_range(batch_size):\n",
                                      b"    for b in nl.affine_range(1):\n", 1)


# two sandboxed gradings each: the fast tier (make test-fast) keeps the staff kernel's with two workers and the
# first-image-only kernel's speculative calls with one
@pytest.mark.parametrize(("source", "workers"), [
    pytest.param(STAFF_CONV, 1, id="staff-1", marks=pytest.mark.slow), pytest.param(STAFF_CONV, 2, id="staff-2"),
    pytest.param(POOL_FAILS, 1, id="pool-fails-1", marks=pytest.mark.slow),
    pytest.param(POOL_FAILS, 2, id="pool-fails-2", marks=pytest.mark.slow),
    pytest.param(FIRST_IMAGE_ONLY, 1, id="first-image-only-1"),
    pytest.param(FIRST_IMAGE_ONLY, 2, id="first-image-only-2", marks=pytest.mark.slow),
    pytest.param(LEGACY_CONV, 2, id="legacy-staff-2", marks=pytest.mark.slow)])
def test_timed_calls_grouped_give_what_they_give_alone(tmp_path, monkeypatch, source, workers):
    """The batch-1 float32 timed calls are made speculatively with the correctness calls (the first image of their
    X, the same W), the float16 pair together; with two workers in one group per worker, and timed calls made
    ahead on a free worker: scores, messages, maximum errors and latencies are the ones of a grading that groups
    nothing, and a timed test whose requirements failed is skipped as before, its run discarded."""
    rubric = conv_timed_rubric(tmp_path)
    on, off = _graded_with_and_without_sharing(tmp_path, monkeypatch, rubric, source, workers)
    assert on.status == off.status == "graded", (on.error, off.error)
    assert record_results(on) == record_results(off)
    assert not list(tmp_path.glob("case-*")), "run directories must be removed"
    status = {t.id: t.status for t in on.tests}
    # without grouping, two workers still make timed calls ahead, each alone
    assert off.timings.get("share:groups", 0) == 0
    if source is FIRST_IMAGE_ONLY:
        assert status["conv.plain"] == "failed" and {status[k] for k in status if "perf" in k} == {"skipped"}
        if workers == 1:
            # the float32 timed calls were made with the correctness calls (speculatively) and discarded; the
            # float16 pair was never made
            assert on.timings["share:groups"] == 1 and on.timings["share:speculative"] == 2
            assert on.timings["share:unused"] == 2
        return
    if source is POOL_FAILS:
        # the pooling signature fails to specialize: the timed pool tests are skipped
        assert status["conv.pool"] == "error" and status["conv.perf_pool"] == status["conv.perf16_pool"] == "skipped"
        assert {status["conv.perf"], status["conv.perf16"]} <= {"passed", "partial"}
        if workers == 1:
            # the speculative calls are not made with the group (one correctness specialization failed), the
            # float16 pair is made without its pooling call (its test will not run)
            assert on.timings["share:speculative"] == 0 and on.timings["share:calls"] == 4
            assert on.timings["share:groups"] == 1 and on.timings["share:unused"] == 0
        return  # two workers: the float16 pooling call may have been made ahead, and discarded
    assert on.timings["share:unused"] == 0
    # every timed test counted (the unpooled ones' 20 us target: a latency that decides a tier, compared above)
    assert all(status[k] == "passed" for k in status if "perf" not in k)
    assert {status[k] for k in status if "perf" in k} <= {"passed", "partial"}
    assert on.timings["share:calls"] == 7 and on.timings["share:hits"] > 0
    # one group: the 3 correctness calls and the 2 speculative float32 timed calls; the float16 pair (two workers:
    # made ahead when a worker was free before the correctness tests were done)
    assert on.timings["share:groups"] == 2
    assert on.timings["share:speculative"] == 2 if workers == 1 else 2 <= on.timings["share:speculative"] <= 4


@pytest.mark.slow
def test_a_grading_with_one_group_per_worker_gives_the_same_results(tmp_path, monkeypatch):
    """GRADER_GROUP_SPLIT=1: two workers make {plain, pool} and {bias, both float32 timed calls}, with the
    results of a grading that groups nothing."""
    monkeypatch.setenv("GRADER_GROUP_SPLIT", "1")
    rubric = conv_timed_rubric(tmp_path)
    on, off = _graded_with_and_without_sharing(tmp_path, monkeypatch, rubric, STAFF_CONV, workers=2)
    assert record_results(on) == record_results(off)
    assert on.timings["share:groups"] == 3 and on.timings["share:calls"] == 7


@pytest.mark.slow
def test_a_grading_with_the_group_split_across_two_processes_gives_the_same_results(tmp_path, monkeypatch):
    """GRADER_CROSS_GROUP=1: two workers make {plain, bias} (the leader's process, publishing its products) and
    {pool, both float32 timed calls} (taking them through the channel): the results of a grading that groups
    nothing, every product computed once, and no channel file left behind."""
    from nkisim.core import channel

    if not channel.supported():
        pytest.skip("the channel needs x86-64's store order")
    monkeypatch.setenv("GRADER_CROSS_GROUP", "1")
    monkeypatch.setenv("NKISIM_SHARE_SELFCHECK", "1")
    rubric = conv_timed_rubric(tmp_path)
    on, off = _graded_with_and_without_sharing(tmp_path, monkeypatch, rubric, STAFF_CONV, workers=2)
    assert record_results(on) == record_results(off)
    assert on.timings["share:groups"] == 3 and on.timings["share:calls"] == 7
    assert on.timings["share:alone"] == 0
    # the float32 members' products: the leader's computed once, the other four calls' all reused
    (tmp_path / "one").mkdir()
    one = _graded_with_and_without_sharing(tmp_path / "one", monkeypatch, rubric, STAFF_CONV, workers=1)[0]
    assert (on.timings["share:hits"], on.timings["share:misses"]) == (one.timings["share:hits"],
                                                                     one.timings["share:misses"])
    assert not list(tmp_path.rglob("channel-*")), "the channel file must be removed"


def test_a_group_split_across_two_processes_by_signature():
    """GRADER_CROSS_GROUP: the leader with the correctness calls of its signature (one specialization), the
    other calls in the other half."""
    from grader.pipeline import _cross_split

    tests = {t.id: t for t in load_rubric(str(ROOT / "grader" / "rubric.toml")).tests}
    members = [(tests[k], 0, tests[k].cases[0]) for k in ("part2.perf_fp32", "part2.large", "part2.perf_fp32_pool",
                                                            "part2.bias", "part2.maxpool")]
    ids = [[t.id for t, _, _ in group] for group in _cross_split(members)]
    assert ids == [["part2.large", "part2.bias"], ["part2.maxpool", "part2.perf_fp32", "part2.perf_fp32_pool"]]


def test_a_group_is_split_into_one_per_worker():
    """With two workers the three 224x224 correctness calls and the two float32 timed calls are two groups, the
    correctness calls balanced and the timed calls with the lighter; with one worker, one group."""
    from grader.pipeline import _split

    tests = {t.id: t for t in load_rubric(str(ROOT / "grader" / "rubric.toml")).tests}
    members = [(tests[k], 0, tests[k].cases[0]) for k in ("part2.perf_fp32", "part2.large", "part2.perf_fp32_pool",
                                                            "part2.bias", "part2.maxpool")]
    ids = [[t.id for t, _, _ in group] for group in _split(members, 2)]
    assert ids == [["part2.large", "part2.maxpool"], ["part2.bias", "part2.perf_fp32", "part2.perf_fp32_pool"]]
    assert [[t.id for t, _, _ in g] for g in _split(members, 1)] == [
        ["part2.large", "part2.bias", "part2.maxpool", "part2.perf_fp32", "part2.perf_fp32_pool"]]
    # timed calls alone are never split: they have no correctness call to lead them
    assert len(_split([m for m in members if m[0].kind == "performance"], 2)) == 1


def test_kernel_slots_go_to_the_largest_waiting_call_and_speculation_waits(monkeypatch):
    """The grading's slots: at most ``n`` calls at a time, the largest waiting first, a speculative call only
    after every other waiting call; a free slot counts as idle (for calls made ahead) only when no running test
    claims it."""
    import threading
    import time

    from grader.pipeline import _Slots

    slots = _Slots(1)
    order: list[str] = []
    gate = threading.Event()

    def call(name: str, size: float, speculative: bool = False) -> None:
        with slots.hold(size, speculative=speculative):
            order.append(name)
            gate.wait(5)

    first = threading.Thread(target=call, args=("first", 1.0))
    first.start()
    while slots.busy < 1:
        time.sleep(0.01)
    waiting = [threading.Thread(target=call, args=a) for a in (("ahead", 1e9, True), ("small", 1.0), ("big", 1e6))]
    for t in waiting:
        t.start()
    while len(slots._waiting) < 3:
        time.sleep(0.01)
    gate.set()
    for t in (first, *waiting):
        t.join(5)
    assert order == ["first", "big", "small", "ahead"]
    stop = threading.Event()
    slots.add_claims(1)  # a running test claims the one slot: not idle
    stop_later = threading.Timer(0.2, stop.set)
    stop_later.start()
    assert slots.wait_idle(stop, timeout=0.05) is False
    slots.add_claims(-1)
    assert slots.wait_idle(threading.Event()) is True


@pytest.mark.slow
def test_a_unit_made_ahead_that_fails_leaves_its_tests_to_make_their_calls(tmp_path, monkeypatch):
    """A grader error while making timed calls ahead (here: every unit made ahead raises) is no test's outcome:
    the tests make their calls themselves, with the results of a grading that makes nothing ahead."""
    from grader import pipeline

    rubric = conv_timed_rubric(tmp_path)
    sub = _submission(tmp_path, STAFF_CONV)
    real = pipeline._Grading._run_group
    ahead: list = []

    def broken(self, group, asker, index, done):
        if asker is None:
            ahead.append([t.id for t, _, _ in group.members])
            raise RuntimeError("made ahead: broken")
        return real(self, group, asker, index, done)

    monkeypatch.setattr(pipeline._Grading, "_run_group", broken)
    config = GradeConfig(rubric_path=str(rubric), backend="nkisim", workers=2, tmp_root=str(tmp_path))
    got = grade_submission(sub, None, config)
    monkeypatch.setattr(pipeline._Grading, "_run_group", real)
    monkeypatch.setenv("GRADER_SHARE_PRODUCTS", "0")
    want = grade_submission(sub, None, GradeConfig(rubric_path=str(rubric), backend="nkisim", workers=1,
                                                   tmp_root=str(tmp_path)))
    assert got.status == "graded" and record_results(got) == record_results(want)
    assert all(t.status in ("passed", "partial") for t in got.tests)
    # (the float16 pair is made ahead as soon as a worker is free, which is while the correctness groups run)


def test_a_group_s_byte_identical_traces_are_parsed_once(tmp_path, limits, monkeypatch):
    """Members that differ only in their values ship the same trace bytes (large and bias): the parent parses the
    first and clones it for the other (nkisim.core.traceio.load's ``seen``); a different trace is parsed."""
    from nkisim.core import traceio
    from nkisim.perf.synth import TraceBuilder

    def trace_bytes(where: str) -> bytes:
        tb = TraceBuilder("trn2", "conv")
        tb.dma(tb.hbm(128, 512), tb.sbuf(128, 512), where=where)
        return traceio.dumps(tb.trace)

    invs = _invs()[:3]
    proc = ProcessResult(returncode=0, timed_out=False, wall_seconds=3.0, output_tail="")
    (tmp_path / "status.json").write_text(json.dumps({"ok": True, "group": {"hits": 0, "misses": 3}}))
    for k, (inv, data) in enumerate(zip(invs, [trace_bytes("a.py:1")] * 2 + [trace_bytes("a.py:2")], strict=True)):
        _member_dir(tmp_path, k, {"ok": True, "cpu_seconds": 0.1, "borrowed_seconds": 0.0})
        np.save(tmp_path / f"m{k}" / "output_0.npy", np.zeros(inv.out_shape, dtype=inv.out_dtype))
        (tmp_path / f"m{k}" / "trace.bin").write_bytes(data)
    parsed: list[bytes] = []
    real = traceio.loads
    monkeypatch.setattr(traceio, "loads", lambda data: parsed.append(data) or real(data))
    runs = runner._collect_group(proc, tmp_path, invs, [60.0] * 3, "conv2d.py", limits, True, "part2/conv2d.py",
                                 {"hits": 0, "misses": 0})
    assert [r.verdict for r in runs] == ["ok"] * 3
    assert len(parsed) == 2
    a, b, c = (r.trace for r in runs)
    assert a is not b and a.instrs[0] is not b.instrs[0] and a.instrs[0] == b.instrs[0]
    assert c.instrs[0].where == "a.py:2" and a.instrs[0].where == "a.py:1"


def _write_member(out: Path, k: int, inv, data: bytes, cpu: float = 0.1) -> None:
    """Member ``k``'s files as grader/child.py writes them when its replay ends: outputs and trace, status last."""
    mdir = out / f"m{k}"
    mdir.mkdir(parents=True)
    np.save(mdir / "output_0.npy", np.full(inv.out_shape, k, dtype=inv.out_dtype))
    (mdir / "trace.bin").write_bytes(data)
    (mdir / "status.tmp").write_text(json.dumps({"ok": True, "stage": "done", "cpu_seconds": cpu,
                                                "kernel_seconds": cpu, "borrowed_seconds": 0.0}))
    (mdir / "status.tmp").rename(mdir / "status.json")


def _wait_for(cond, timeout: float = 30.0) -> None:
    import time

    end = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < end, "timed out"
        time.sleep(0.01)


def test_a_group_s_members_are_read_as_they_end_and_kept_when_the_process_ends_well(tmp_path, limits, monkeypatch):
    """runner._MemberWatch: a member is read (outputs mapped, trace parsed) and handed to ``early`` as soon as its
    status.json exists, while the process runs; when the process ends well its outcome is that very run, with the
    process's figures, its trace not parsed again; a process that failed, or the time guard, decides as before."""
    from nkisim.core import traceio
    from nkisim.perf.synth import TraceBuilder

    def trace_bytes(where: str) -> bytes:
        tb = TraceBuilder("trn2", "conv")
        tb.dma(tb.hbm(128, 512), tb.sbuf(128, 512), where=where)
        return traceio.dumps(tb.trace)

    parsed: list[bytes] = []
    real = traceio.loads
    monkeypatch.setattr(traceio, "loads", lambda data: parsed.append(data) or real(data))
    invs = _invs()[:3]
    traces = [trace_bytes("a.py:1"), trace_bytes("a.py:1"), trace_bytes("a.py:2")]
    early: list = []
    watch = runner._MemberWatch(invs, [60.0] * 3, limits, True, "part2/conv2d.py",
                                lambda k, run: early.append((k, run)))
    watch.start(tmp_path)
    try:
        _write_member(tmp_path, 2, invs[2], traces[2])
        _wait_for(lambda: len(early) == 1)
        assert early[0][0] == 2 and early[0][1].verdict == "ok" and early[0][1].trace.instrs[0].where == "a.py:2"
        assert float(early[0][1].outputs[0].reshape(-1)[0]) == 2.0
        _write_member(tmp_path, 0, invs[0], traces[0])
        _wait_for(lambda: len(early) == 2)
    finally:
        watch.stop()
    # member 1 ended after the last look: read when the process has ended, its trace a clone of member 0's
    _write_member(tmp_path, 1, invs[1], traces[1])
    (tmp_path / "status.json").write_text(json.dumps({"ok": True, "group": {"hits": 2, "misses": 1},
                                                      "jail": ["pid-namespace"]}))
    proc = ProcessResult(returncode=0, timed_out=False, wall_seconds=3.0, output_tail="tail", features=("cgroup",))
    runs = runner._collect_group(proc, tmp_path, invs, [60.0] * 3, "conv2d.py", limits, True, "part2/conv2d.py",
                                 {"hits": 0, "misses": 0}, watch)
    assert runs[2] is early[0][1] and runs[0] is early[1][1] and all(runs[1] is not r for _, r in early)
    assert len(parsed) == 2  # each distinct trace once: none again after the process, member 1's a clone
    for k, run in enumerate(runs):
        # the fields _collect takes from the process, as a member read after the process has them
        assert run.verdict == "ok" and run.wall_seconds == 1.0 and run.output_tail == "tail"
        assert run.features == ("cgroup", "pid-namespace") and run.cpu_seconds == 0.1
        assert float(run.outputs[0].reshape(-1)[0]) == float(k)
    # the time guard still sends a member to run alone, read early or not
    guarded = runner._MemberWatch(invs, [60.0] * 3, limits, True, "x", None)
    guarded.runs = dict(watch.runs)
    heavy = ProcessResult(returncode=0, timed_out=False, wall_seconds=300.0, output_tail="")
    assert runner._collect_group(heavy, tmp_path, invs, [60.0] * 3, "conv2d.py", limits, True, "x",
                                 {"hits": 0, "misses": 0}, guarded) == [None] * 3
    # a process that failed gives no member its outcome, whatever was read while it ran
    failed = ProcessResult(returncode=-9, timed_out=False, wall_seconds=3.0, output_tail="", signal_name="SIGKILL")
    assert runner._collect_group(failed, tmp_path, invs, [60.0] * 3, "conv2d.py", limits, True, "x", {},
                                 guarded) is None


def test_a_group_gives_each_call_early_the_run_it_returns(limits, tmp_path, monkeypatch):
    """run_group(early=): every member's run is handed over once its member of the group's process has ended, and
    is the outcome the call gets (the same object, as a separate run of it gives it).  (These small calls end
    within one look of the watch: it is made to look until it has read every member before it stops.)"""
    stop = runner._MemberWatch.stop

    def drained(self):
        _wait_for(lambda: len(self.runs) == len(self.invs) or self._thread is None)
        stop(self)

    monkeypatch.setattr(runner._MemberWatch, "stop", drained)
    invs = _invs()
    early: dict = {}
    grouped, figures = runner.run_group(STAFF_CONV, "part2/conv2d.py", "fused_conv2d_maxpool", invs, [60.0] * 3,
                                        want_trace=True, target="trn2", limits=limits, tmp_root=str(tmp_path),
                                        early=lambda k, run: early.setdefault(k, run))
    assert sorted(early) == [0, 1, 2] and figures["alone"] == 0
    assert all(grouped[k] is early[k] and grouped[k].trace is not None for k in early)
    for alone, got in zip(_alone(STAFF_CONV, invs, limits, tmp_path), grouped, strict=True):
        assert_same_outcome(alone, got)
    assert not list(tmp_path.iterdir()), "run directories must be removed"
