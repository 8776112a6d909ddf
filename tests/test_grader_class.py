"""Grading a class together: the secret class seed, the shared content-addressed reference cache, the precision of
the references, chunked judging, and the seed never reaching student code.  (The hostile side -- escapes that look
for the seed and the cache, memos across gradings, reaching a neighbouring run -- is in test_grader_hostile.py.)"""

from __future__ import annotations

import json
import multiprocessing
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
from grader_helpers import FAST_RUBRIC, GOOD, ROOT, check_reports
from hypothesis import given, settings
from hypothesis import strategies as st

from grader import judge, problems, refcache, seeds
from grader.batch import class_config, run_batch
from grader.pipeline import grade_submission
from grader.problems import conv2d as conv
from grader.records import GradeConfig
from grader.rubric import load_rubric
from grader.staff import reference_available, reference_dir

needs_reference = pytest.mark.skipif(not reference_available(), reason="staff reference not shipped here")

# A conv2d rubric small enough for unit tests: two correctness cases sharing X and W, and a float16 one.
CONV_RUBRIC = """
[rubric]
title = "class self-test"
seed = 5
verify_performance_outputs = true
[tolerances]
float32 = { rtol = 1e-5, atol = 1e-8 }
float16 = { rtol = 1e-2, atol = 1e-2 }
[[test]]
id = "part2.tiny"
name = "tiny conv"
part = 2
file = "part2/conv2d.py"
function = "fused_conv2d_maxpool"
kind = "correctness"
problem = "conv2d"
points = 1
timeout_s = 120
""" + "".join(
    "[[test.cases]]\nbatch = 1\nin_channels = 128\nout_channels = 128\nheight = 8\nwidth = 8\nkernel = 3\n"
    f'pool = {pool}\nbias = "{bias}"\ndtype = "{dtype}"\n'
    for pool, bias, dtype in ((1, "zeros", "float32"), (2, "random", "float32"), (1, "random", "float16"))
)


@pytest.fixture(autouse=True)
def _fresh_memory():
    refcache.clear_memory()
    yield
    refcache.clear_memory()


# ------------------------------------------------------------------------------------------------- seeds ----


def test_class_seed_is_created_once_private_and_rotated(tmp_path):
    path = tmp_path / ".grader" / seeds.SEED_FILE
    seed, new = seeds.class_seed(path)
    assert new and 0 <= seed < 2**63
    assert os.stat(path).st_mode & 0o777 == 0o600 and os.stat(path.parent).st_mode & 0o777 == 0o700
    assert seeds.class_seed(path) == (seed, False)
    rotated, new = seeds.class_seed(path, rotate=True)
    assert new and rotated != seed and seeds.read_seed(path) == rotated
    assert seeds.fingerprint(rotated) == seeds.fingerprint(rotated) != seeds.fingerprint(seed)
    assert str(rotated) not in seeds.fingerprint(rotated)
    path.write_text("not a number\n")
    with pytest.raises(seeds.SeedError, match="expected one non-negative integer"):
        seeds.read_seed(path)
    with pytest.raises(seeds.SeedError, match="cannot read"):
        seeds.read_seed(tmp_path / "missing")


def test_private_dirs_are_registered_for_every_sandboxed_run(tmp_path, monkeypatch):
    monkeypatch.setenv("GRADER_STATE_DIR", str(tmp_path / "state"))
    a = seeds.ensure_private_dir(tmp_path / "a" / ".grader")
    b = seeds.ensure_private_dir(tmp_path / "b" / ".grader")
    assert seeds.registered_private_dirs() == sorted([str(a.resolve()), str(b.resolve())])
    shutil.rmtree(a)
    assert seeds.registered_private_dirs() == [str(b.resolve())]
    from grader.runner import _masked_dirs

    assert str(b.resolve()) in _masked_dirs()
    # never a directory the sandboxed child needs itself
    assert str(Path(sys.prefix).resolve()) not in _masked_dirs((sys.prefix, "/"))


def test_class_config_hides_the_private_dir(tmp_path):
    config, note = class_config(GradeConfig(), tmp_path / "out")
    private = tmp_path / "out" / ".grader"
    assert config.seed_mode == "secret" and config.seed == seeds.read_seed(private / seeds.SEED_FILE)
    assert config.ref_cache == str(private / "refcache") and str(private) in config.hidden_dirs
    assert note.startswith(f"class seed #{seeds.fingerprint(config.seed)} (new")
    again, note = class_config(GradeConfig(), tmp_path / "out")
    assert again.seed == config.seed and "(from " in note
    (private / "refcache" / "ab").mkdir()
    rotated, _ = class_config(GradeConfig(), tmp_path / "out", rotate=True)
    assert rotated.seed != config.seed and not (private / "refcache" / "ab").exists()
    explicit, note = class_config(GradeConfig(seed=7), tmp_path / "out")
    assert explicit.seed == 7 and "given with --seed" in note
    assert seeds.current_fingerprint(private) == seeds.fingerprint(7)  # what the leaderboard ranks


# --------------------------------------------------------------------------------------------- precision ----


def test_reference_precision_follows_the_tolerances():
    tol = load_rubric().tolerances
    big = {"in_channels": 256, "kernel": 3}
    assert problems.reference_precision("conv2d", {**big, "dtype": "float16"}, tol) == "float32"
    assert problems.reference_precision("conv2d", {**big, "dtype": "float32"}, tol) == "float64"
    assert problems.reference_precision("transpose", {"shape": [8, 8], "dtype": "float32"}, tol) == "exact"
    # a tolerance too tight for float32 accumulation keeps float64 for float16 outputs too
    assert problems.reference_precision("conv2d", {**big, "dtype": "float16"}, {"float16": (1e-4, 0)}) == "float64"
    assert problems.accumulation_error_bound(2305, "float32") == pytest.approx(2305 * 2.0**-24, rel=1e-3)


@settings(max_examples=15, deadline=None)
@given(cin=st.integers(1, 300), hw=st.integers(3, 9), seed=st.integers(0, 2**31), pool=st.sampled_from([1, 2]))
def test_float32_reference_is_within_its_bound_of_the_float64_one(cin, hw, seed, pool):
    case = dict(batch=1, in_channels=cin, out_channels=4, height=hw, width=hw, kernel=3, pool=pool, bias="random",
                dtype="float16")
    inv = problems.make_invocation("conv2d", case, seed)
    exact = conv.conv2d_reference(inv, "float64")
    cheap = conv.conv2d_reference(inv, "float32")
    assert cheap.dtype == np.float32
    bound = problems.accumulation_error_bound(problems.accumulated_terms("conv2d", case), "float32")
    assert np.all(np.abs(cheap - exact) <= bound * np.abs(exact) + 1e-30)


# ----------------------------------------------------------------------------------------- judging ----


@settings(max_examples=25, deadline=None)
@given(n=st.integers(1, 3000), bad=st.lists(st.integers(0, 2999), max_size=5), seed=st.integers(0, 1000))
def test_chunked_judging_matches_whole_array_isclose(n, bad, seed):
    rng = np.random.default_rng(seed)
    expected = rng.random((n,)) * 10
    out = expected.astype(np.float32)
    for i in bad:
        if i < n:
            out[i] += 1.0
    old, judge.CHUNK = judge.CHUNK, 64  # many chunks, with the bad values on either side of their borders
    try:
        v = judge.judge_output([out], expected, np.dtype(np.float32), {"float32": (1e-5, 1e-8)})
    finally:
        judge.CHUNK = old
    far = ~np.isclose(out.astype(np.float64), expected, rtol=1e-5, atol=1e-8)
    assert v.passed == (not far.any())
    assert (v.mismatches or 0) == int(far.sum())
    assert v.max_abs_error == pytest.approx(float(np.abs(out - expected).max()))
    if far.any():
        assert f"first at index ({int(np.flatnonzero(far)[0])},)" in v.message



@given(st.integers(1, 500), st.floats(-1e6, 1e6), st.integers(0, 2**31))
@settings(max_examples=40, deadline=None)
def test_a_ranked_verdict_names_no_value(n, shift, seed):
    """With the class's secret seed every resubmission gets the same inputs, so whatever a verdict's message says
    about the data adds up: the reference value at the first mismatch, and what a kernel encodes on the device into
    its own output there, into how many values it gets wrong or into the size of an error small enough to pass
    (docs/grading-security.md, L8).  A ranked verdict's message is a function of the tolerances alone."""
    rng = np.random.default_rng(seed)
    expected = rng.standard_normal(n)
    wrong = (expected + shift + rng.standard_normal(n)).astype(np.float32)
    close = (expected * (1 + 1e-7)).astype(np.float32)
    f32, tol = np.dtype(np.float32), {"float32": (1e-5, 1e-8)}
    for out in (wrong, close, np.full(n, np.nan, np.float32)):
        shown = judge.judge_output([out], expected, f32, tol)
        ranked = judge.judge_output([out], expected, f32, tol, reveal=False)
        assert ranked.passed == shown.passed and ranked.max_abs_error is None
        assert ranked.message == ("matches the reference" if shown.passed else
                                  "values differ from the reference (rtol=1e-05, atol=1e-08); " + judge.SECRET_NOTE)


WRONG_CONV = """
import nki
import nki.isa as nisa
import nki.language as nl


@nki.jit
def fused_conv2d_maxpool(X, W, bias, pool_size=1):
    batch, _, height, width = X.shape
    cout = W.shape[0]
    oh, ow = (height - 2) // pool_size, (width - 2) // pool_size
    out = nl.ndarray((batch, cout, oh, ow), dtype=X.dtype, buffer=nl.shared_hbm)
    zero = nl.ndarray((cout, oh * ow), dtype=X.dtype, buffer=nl.sbuf)
    nisa.memset(dst=zero, value=0.0)
    flat = out.reshape((batch * cout, oh * ow))
    for b in nl.affine_range(batch):
        nisa.dma_copy(dst=flat[b * cout:(b + 1) * cout, :], src=zero)
    return out
"""


@pytest.mark.slow
def test_a_ranked_grading_shows_no_value_of_the_secret_inputs(tmp_path):
    """A wrong conv graded with the class seed: its message and result.json name no value, position, count or
    error size; graded on its own seed, the same kernel's message names them all."""
    (tmp_path / "rubric.toml").write_text(CONV_RUBRIC)
    sub = tmp_path / "sub" / "part2"
    sub.mkdir(parents=True)
    (sub / "conv2d.py").write_text(WRONG_CONV)
    base = GradeConfig(rubric_path=str(tmp_path / "rubric.toml"), only=("part2.tiny",))
    ranked_config, _ = class_config(base, tmp_path / "ranked")
    ranked = grade_submission(tmp_path / "sub", tmp_path / "ranked" / "s", ranked_config)
    own = grade_submission(tmp_path / "sub", tmp_path / "own", base)
    (r,), (o,) = ranked.tests, own.tests
    assert r.status == o.status == "failed"
    assert "first at index" in o.message and "max abs error" in o.message
    assert judge.SECRET_NOTE in r.message and "index" not in r.message and "expected" not in r.message
    record = json.loads((tmp_path / "ranked" / "s" / "result.json").read_text())
    cases = [c for t in record["tests"] for c in t.get("cases", [])]
    assert cases and all(c.get("max_abs_error") is None for c in cases)


@settings(max_examples=60, deadline=None)
@given(shape=st.tuples(st.integers(1, 3), st.integers(1, 5), st.integers(1, 9), st.integers(1, 9)),
       pool=st.sampled_from([1, 2, 3]), random_bias=st.booleans(), dtype=st.sampled_from([np.float64, np.float32]),
       chunk=st.sampled_from([1, 7, 64, 1 << 18]), seed=st.integers(0, 1000),
       special=st.lists(st.tuples(st.integers(0, 10**6), st.sampled_from([np.nan, np.inf, -np.inf, 3e38])),
                        max_size=3),
       bad=st.lists(st.integers(0, 10**6), max_size=3), prepared=st.booleans())
def test_pooled_expected_is_conv2d_finish_slice_by_slice(shape, pool, random_bias, dtype, chunk, seed, special, bad,
                                                          prepared):
    """What the judge reads of a conv2d reference (PooledConv: pooled and biased a few planes at a time from the
    cached convolution) is conv2d_finish's array bit for bit, chunk by chunk and at any index, and the verdicts on
    it -- pass, mismatches, first index, max error, NaN and infinities on either side -- are the whole array's."""
    rng = np.random.default_rng(seed)
    c = (rng.random(shape) * 4 - 1).astype(dtype)
    for i, v in special:
        c.reshape(-1)[i % c.size] = v
    bias = rng.random(shape[1], dtype=np.float32) if random_bias else np.zeros(shape[1], np.float32)
    ref = conv.conv2d_finish(c, bias, pool)
    old, judge.CHUNK = judge.CHUNK, chunk
    try:
        if prepared:  # the maxima and the planes' extremes made ahead (conv2d.prepare), or not
            conv.prepare(c, pool)
        lazy = conv.PooledConv(c, bias, pool)
        assert (lazy.lows is not None) == prepared
        parts = [(lo, part.copy()) for lo, part in lazy.chunks(chunk)]
        assert lazy.shape == ref.shape and lazy.dtype == ref.dtype
        assert [lo for lo, _ in parts] == list(np.cumsum([0] + [p.size for _, p in parts])[:-1])
        flat = np.concatenate([p for _, p in parts]) if parts else np.empty(0, ref.dtype)
        assert flat.dtype == ref.dtype and np.array_equal(flat, ref.reshape(-1), equal_nan=True)
        assert max((p.size for _, p in parts), default=0) <= lazy.chunk_limit(chunk)
        for lo, part in parts:  # the slices' extremes from their planes' are np.min's and np.max's, NaN included
            if prepared:
                assert np.array_equal(lazy.bounds(lo, part.size), (np.min(part), np.max(part)), equal_nan=True)
            else:
                assert lazy.bounds(lo, part.size) is None
        for k in range(0, ref.size, max(1, ref.size // 7)):
            at = tuple(int(i) for i in np.unravel_index(k, ref.shape))
            assert np.array_equal(lazy.at(at), ref[at], equal_nan=True)
        out = ref.astype(np.float32)
        for i in bad:
            if out.size:
                out.reshape(-1)[i % out.size] += 1.0
        tol = {"float32": (1e-5, 1e-8)}
        with np.errstate(invalid="ignore", over="ignore"):
            assert (judge.judge_output([out], lazy, np.dtype(np.float32), tol)
                    == judge.judge_output([out], ref, np.dtype(np.float32), tol))
    finally:
        judge.CHUNK = old
    assert np.array_equal(np.asarray(lazy), ref, equal_nan=True)


def test_pooled_maxima_and_extremes_are_made_once_per_convolution_and_pool():
    """What makes judging a pooled output cheaper (the maxima, the planes' extremes) is made once per convolution
    and pool, in a background thread of the lowest priority when asked ahead (the reference thread asks once the
    convolution is computed); a PooledConv takes it when it is there and never waits for it; it goes with the
    convolution."""
    import gc
    import os
    import threading
    import time
    import weakref

    rng = np.random.default_rng(3)
    c = rng.random((2, 3, 6, 8))
    made: list = []
    real = conv._pool_planes
    conv._pool_planes = lambda *a: made.append(os.getpriority(os.PRIO_PROCESS, threading.get_native_id())) or real(*a)
    try:
        assert conv.PooledConv(c, np.zeros(3, np.float32), 2).pooled is None  # not asked for: judged without
        conv.PooledConv(c, np.zeros(3, np.float32), 2).prepare_later()
        conv.prepare_later(c, 2)  # asked twice: made once
        deadline = time.monotonic() + 30
        while conv.prepared(c, 2) is None and time.monotonic() < deadline:
            time.sleep(0.01)
        first = conv.PooledConv(c, np.zeros(3, np.float32), 2)
        again = conv.PooledConv(c, rng.random(3, dtype=np.float32), 2)
        assert made == [19] and again.pooled is first.pooled and again.lows is first.lows
        assert np.array_equal(first.pooled.reshape(2, 3, 3, 4), conv.maxpool(c, 2))
        assert not (first.pooled.flags.writeable or first.lows.flags.writeable or first.highs.flags.writeable)
        assert conv.prepare(c, 2)[0] is first.pooled and len(made) == 1
        assert conv.prepare(c, 1)[0] is None and len(made) == 1  # pool 1: the extremes only
        other = c.copy()
        assert conv.prepare(other, 2)[0] is not first.pooled and len(made) == 2
    finally:
        conv._pool_planes = real
    gone = weakref.ref(first.pooled)
    key = (id(c), 2)
    del first, again, c
    gc.collect()
    assert gone() is None and key not in conv._PREPARED


def test_no_judge_preparation_thread_outlives_its_work_or_the_grading():
    """The background thread ends once it finds no work (a later prepare_later starts another), and
    grader.problems.settle (called when a grading ends) drops what it has not started and waits for the rest: a
    thread left behind would outlive the grading in the caller's process (part2/test_harness.py forks its workers
    only when no other thread is alive)."""
    import threading
    import time

    from grader import problems

    def prep_threads() -> list[threading.Thread]:
        return [t for t in threading.enumerate() if t.name == "grader-judge-prep"]

    rng = np.random.default_rng(5)
    first = rng.random((1, 2, 4, 4))
    conv.prepare_later(first, 2)
    deadline = time.monotonic() + 30
    while (conv.prepared(first, 2) is None or prep_threads()) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert conv.prepared(first, 2) is not None and not prep_threads()  # done, and gone by itself
    started = threading.Event()
    release = threading.Event()
    real = conv.prepare

    def slow(c, pool):
        started.set()
        release.wait(30)
        return real(c, pool)

    conv.prepare = slow
    try:
        held, queued = rng.random((1, 2, 4, 4)), rng.random((1, 2, 4, 4))
        conv.prepare_later(held, 2)
        conv.prepare_later(queued, 2)
        assert started.wait(30)
        threading.Timer(0.2, release.set).start()
        problems.settle()
    finally:
        conv.prepare = real
    assert not prep_threads()
    assert conv.prepared(held, 2) is not None  # the one under way was finished
    assert conv.prepared(queued, 2) is None and (id(queued), 2) not in conv._PREPARING  # the queued one dropped


# --------------------------------------------------------------------------------------- the cache ----


def _store(tmp_path: Path, key: bytes = b"k" * 32) -> refcache.ReferenceStore:
    d = tmp_path / "cache"
    d.mkdir(exist_ok=True)
    return refcache.ReferenceStore(d, key)


def test_store_computes_once_then_reuses_memory_and_disk(tmp_path):
    calls = []

    def compute():
        calls.append(1)
        return np.arange(10.0)

    store = _store(tmp_path)
    a = store.get({"x": 1}, compute)
    b = store.get({"x": 1}, compute)
    assert calls == [1] and a is b and not a.flags.writeable
    assert (store.stats.computed, store.stats.from_memory) == (1, 1)
    refcache.clear_memory()
    other = _store(tmp_path)  # another worker: the disk entry
    np.testing.assert_array_equal(other.get({"x": 1}, compute), np.arange(10.0))
    assert calls == [1] and other.stats.from_disk == 1
    assert len(list((tmp_path / "cache").glob("*/*.npy"))) == 1
    other.get({"x": 2}, compute)  # a different descriptor is a different address
    assert calls == [1, 1]


def test_a_changed_or_foreign_entry_is_recomputed(tmp_path):
    store = _store(tmp_path)
    store.get({"x": 1}, lambda: np.ones(1000))
    (npy,) = (tmp_path / "cache").glob("*/*.npy")
    data = bytearray(npy.read_bytes())
    data[-8:] = np.float64(0.0).tobytes()  # a poisoned reference
    npy.write_bytes(bytes(data))
    refcache.clear_memory()
    fresh = _store(tmp_path)
    np.testing.assert_array_equal(fresh.get({"x": 1}, lambda: np.ones(1000)), np.ones(1000))
    assert (fresh.stats.rejected, fresh.stats.computed) == (1, 1)
    refcache.clear_memory()
    stranger = _store(tmp_path, key=b"another secret, another batch!!!")  # a MAC under another key
    stranger.get({"x": 1}, lambda: np.ones(1000))
    assert (stranger.stats.rejected, stranger.stats.computed) == (1, 1)


def test_no_disk_without_a_secret_and_an_unusable_directory_costs_only_speed(tmp_path):
    store = refcache.ReferenceStore(tmp_path, None)  # per-submission seeds: memory only
    store.get({"x": 1}, lambda: np.ones(3))
    assert not list(tmp_path.iterdir())
    gone = refcache.ReferenceStore(tmp_path / "missing", b"k" * 32)
    np.testing.assert_array_equal(gone.get({"x": 2}, lambda: np.ones(3)), np.ones(3))


def test_memory_is_bounded():
    lru = refcache._Lru(1000)
    lru.put("a", 1, 600)
    lru.put("b", 2, 600)
    assert lru.get("a") is None and lru.get("b") == 2
    lru.put("huge", 3, 5000)
    assert lru.get("huge") is None


def test_threads_of_one_grading_compute_an_entry_once(tmp_path):
    store = _store(tmp_path)
    calls = []

    def compute():
        calls.append(1)
        return np.ones(5)

    threads = [threading.Thread(target=store.get, args=({"x": 1}, compute)) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert calls == [1]


def _compute_in_another_process(directory: str, counter: str) -> None:
    def compute():
        with open(counter, "a") as fh:
            fh.write("x")
        return np.ones(4)

    refcache.ReferenceStore(directory, b"k" * 32).get({"x": "shared"}, compute)


@pytest.mark.slow
def test_workers_of_a_batch_compute_an_entry_once(tmp_path):
    (tmp_path / "cache").mkdir()
    counter = tmp_path / "computed"
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_compute_in_another_process, args=(str(tmp_path / "cache"), str(counter)))
             for _ in range(3)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    assert [p.exitcode for p in procs] == [0, 0, 0]
    assert counter.read_text() == "x"  # the lock file kept the others waiting, then they loaded the entry


def test_shared_inputs_are_read_only_and_shared_by_bias_and_pool_variants():
    case = dict(batch=1, in_channels=3, out_channels=2, height=5, width=5, kernel=3, pool=1, bias="zeros",
                dtype="float32")
    a = problems.get("conv2d").shared_invocation(case, 9)
    b = problems.get("conv2d").shared_invocation({**case, "bias": "random", "pool": 2}, 9)
    assert a.inv.args[0] is b.inv.args[0] and a.digests[:2] == b.digests[:2] and a.digests[2] != b.digests[2]
    assert not a.inv.args[0].flags.writeable
    fresh = problems.make_invocation("conv2d", {**case, "bias": "random", "pool": 2}, 9)
    for x, y in zip(fresh.args, b.inv.args):
        np.testing.assert_array_equal(x, y)


# ---------------------------------------------------------------------------------------- gradings ----


@pytest.mark.slow
@needs_reference
def test_a_class_computes_each_reference_once(tmp_path):
    rubric = tmp_path / "rubric.toml"
    rubric.write_text(CONV_RUBRIC)
    subs = tmp_path / "subs"
    for i in range(3):
        shutil.copytree(reference_dir(), subs / f"s{i}", ignore=shutil.ignore_patterns("relaxed", "*.pyc"))
        conv = subs / f"s{i}" / "part2" / "conv2d.py"
        conv.write_text(conv.read_text() + f"\n# {i}\n")
    out = tmp_path / "out"
    config, _ = class_config(GradeConfig(rubric_path=str(rubric), only=("part2.tiny",)), out)
    results = run_batch(subs, out, config, jobs=1, executor="serial", progress=False)
    assert [r.status for r in results] == ["graded"] * 3 and all(r.score == 1 for r in results)
    computed = [r.timings["references:computed"] for r in sorted(results, key=lambda r: r.student)]
    assert computed == [2, 0, 0]  # float32 X/W (two cases share it) and the float16 one, once for the class
    records = [json.loads((Path(r.out_dir) / "result.json").read_text()) for r in results]
    assert {r["seed_fingerprint"] for r in records} == {seeds.fingerprint(config.seed)}
    assert {r["seed_mode"] for r in records} == {"secret"} and {r["seed"] for r in records} == {-1}
    for r in results:  # the secret is in no file of the batch's output but the seed file
        for f in Path(r.out_dir).iterdir():
            assert str(config.seed) not in f.read_text(), f
    refcache.clear_memory()  # a new worker: everything from the disk cache
    again = run_batch(subs, out, config, jobs=1, executor="serial", progress=False, force=True)
    assert all(r.timings["references:computed"] == 0 for r in again)
    assert sum(r.timings["references:from_disk"] for r in again) == 2  # then from the worker's memory


def test_the_seed_never_reaches_student_code(tmp_path, monkeypatch):
    """Whatever the child process gets -- its command line, environment and job -- holds no trace of the class
    seed; its inputs arrive as files."""
    import grader.runner as runner
    from grader import warmstart

    seen: list[tuple[list[str], bytes, dict]] = []
    real = runner.run_sandboxed

    def spy(argv, *, stdin_bytes, **kw):
        job = stdin_bytes({"cgroup": None, "rlimits": {}}) if callable(stdin_bytes) else stdin_bytes
        seen.append((list(argv), job, dict(kw.get("env_extra") or {})))
        return real(argv, stdin_bytes=job, **kw)

    class SpiedServer(runner.WarmServer):  # a warm server's command line and environment, and each call's job
        def __init__(self, python_argv, **kw):
            seen.append((list(python_argv), b"{}", dict(kw.get("env_extra") or {})))
            super().__init__(python_argv, **kw)

        def run(self, job, **kw):
            payload = job({"cgroup": None, "rlimits": {}})
            seen.append(([], payload, {}))
            return super().run(lambda context: payload, **kw)

    monkeypatch.setattr(runner, "run_sandboxed", spy)
    monkeypatch.setattr(runner, "WarmServer", SpiedServer)
    monkeypatch.setattr(warmstart, "WarmServer", SpiedServer)  # where the grading's servers start (round 12)
    config, _ = class_config(GradeConfig(rubric_path=FAST_RUBRIC, only=("part1.transpose",)), tmp_path / "out")
    record = grade_submission(GOOD, tmp_path / "res", config)
    assert record.score == 10 and seen
    secret = str(config.seed)
    for argv, job, env in seen:
        blob = " ".join(argv) + job.decode() + json.dumps(env) + json.dumps(dict(os.environ))
        assert secret not in blob and seeds.fingerprint(config.seed) not in blob
        assert job == b"{}" or set(json.loads(job)) >= {"inputs", "kwargs"}
        assert not any("seed" in k for k in json.loads(job))
    assert any(job != b"{}" for _, job, _ in seen)
    results = check_reports(tmp_path / "res", load_rubric(FAST_RUBRIC).select(["part1.transpose"]).total_points)
    assert secret not in json.dumps(results) and secret not in (tmp_path / "res" / "summary.md").read_text()
    assert secret not in (tmp_path / "res" / "junit.xml").read_text()


@pytest.mark.slow
def test_batch_cli_uses_the_secret_class_seed_by_default(tmp_path):
    subs = tmp_path / "subs"
    shutil.copytree(GOOD, subs / "alice")
    out = tmp_path / "out"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "grader", "batch", str(subs), "--out", str(out), "--rubric", FAST_RUBRIC,
           "--only", "part1.transpose", "--jobs", "1", "--executor", "serial"]
    run = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr
    seed = seeds.read_seed(out / ".grader" / seeds.SEED_FILE)
    assert f"class seed #{seeds.fingerprint(seed)}" in run.stderr and str(seed) not in run.stdout + run.stderr
    (result,) = out.glob("alice/*/result.json")
    assert json.loads(result.read_text())["seed_fingerprint"] == seeds.fingerprint(seed)
    assert str(seed) not in result.read_text() and str(seed) not in (out / "batch.jsonl").read_text()
    again = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert "skipped 1" in again.stdout  # same seed: the result is reused
    rotated = subprocess.run([*cmd, "--rotate-seed"], env=env, capture_output=True, text=True, timeout=600)
    assert "graded 1" in rotated.stdout and seeds.read_seed(out / ".grader" / seeds.SEED_FILE) != seed
    per_student = subprocess.run([*cmd, "--seed-mode", "submission", "--rotate-seed"], env=env,
                                 capture_output=True, text=True, timeout=600)
    assert per_student.returncode == 2 and "--seed-mode secret" in per_student.stderr


def test_docs_list_what_every_test_checks():
    """docs/grading.md carries the table `python -m grader rubric --markdown` prints, for the shipped rubric."""
    from grader.reports import rubric_markdown

    doc = (ROOT / "docs" / "grading.md").read_text()
    table = doc.split("<!-- rubric:begin -->\n", 1)[1].split("\n<!-- rubric:end -->", 1)[0]
    assert table == rubric_markdown(load_rubric()), "regenerate the table: python -m grader rubric --markdown"
    for t in load_rubric().tests:
        assert f"`{t.id}`" in table


def test_a_smaller_batch_is_the_first_images_of_a_larger_and_shares_its_convolution(monkeypatch):
    """The batch-1 timed tests' X is the first image of the batch-4 correctness tests' X (same W, same bias), so
    the parent slices the batch-4 convolution instead of computing another 58 GFLOP (224x224); the slice equals
    the batch-1 convolution computed on its own."""
    refcache.clear_memory()
    problem = problems.get("conv2d")
    computed: list[tuple[int, ...]] = []
    real = conv.conv2d_accumulate

    def counting(x, w, *a, **kw):
        computed.append(x.shape)
        return real(x, w, *a, **kw)

    monkeypatch.setattr(conv, "conv2d_accumulate", counting)
    four = dict(batch=4, in_channels=4, out_channels=3, height=9, width=7, kernel=3, pool=1, bias="random",
                dtype="float32")
    one = {**four, "batch": 1, "pool": 2}
    seed = problems.case_seed(5, "conv2d" + json.dumps(problem.input_fields(four), sort_keys=True), 0)
    assert problem.input_fields(one) == problem.input_fields(four)
    big, small = problem.shared_invocation(four, seed), problem.shared_invocation(one, seed)
    for a, b in zip(small.inv.args, big.inv.args):
        np.testing.assert_array_equal(a, b[: len(a)])
    store = refcache.ReferenceStore(None, None)
    problem.expected(store, big, "float64")
    got = problem.expected(store, small, "float64")
    assert computed == [(4, 4, 9, 7)]  # the batch-4 convolution only; batch 1 is its first image
    np.testing.assert_array_equal(got, conv.conv2d_reference(small.inv, "float64"))
    # computed on its own when no larger batch's convolution is at hand (e.g. --only part2.perf_fp32)
    refcache.clear_memory()
    computed.clear()
    alone = problem.expected(refcache.ReferenceStore(None, None), problem.shared_invocation(one, seed), "float64")
    assert computed == [(1, 4, 9, 7)]
    np.testing.assert_array_equal(alone, got)



def _counting_digests(monkeypatch) -> tuple[list, object]:
    made: list[tuple[int, ...]] = []
    real = refcache.array_digest

    def counting(arr):
        made.append(arr.shape)
        return real(arr)

    monkeypatch.setattr(refcache, "array_digest", counting)
    return made, real


CONV_FOUR = dict(batch=4, in_channels=4, out_channels=3, height=9, width=7, kernel=3, pool=1, bias="random",
                 dtype="float32")


@pytest.mark.parametrize("threads", [1, 4])
def test_a_memory_only_store_addresses_references_by_input_objects_and_digests_nothing(monkeypatch, threads):
    """Where references live in this process only (a per-submission seed: ``python -m grader grade``), they are
    addressed by tokens of the memoised input objects: no SHA-256 of any input, the three batch-4 variants share one
    convolution, the batch-1 X's is sliced from it (W compared by content), a transpose's reference is made once,
    and the values are those computed on their own."""
    refcache.clear_memory()
    made, _ = _counting_digests(monkeypatch)
    computed: list[tuple[int, ...]] = []
    real_acc = conv.conv2d_accumulate
    monkeypatch.setattr(conv, "conv2d_accumulate",
                        lambda x, w, *a, **kw: computed.append(x.shape) or real_acc(x, w, *a, **kw))
    problem = problems.get("conv2d")
    store = refcache.ReferenceStore(None, None)
    assert not store.persistent
    big = [problem.shared_invocation({**CONV_FOUR, "bias": b, "pool": p}, 11) for b, p in
           (("zeros", 1), ("random", 1), ("random", 2))]
    small = problem.shared_invocation({**CONV_FOUR, "batch": 1, "pool": 2}, 11)
    workers = [threading.Thread(target=problem.expected, args=(store, sh, "float64")) for sh in big * threads]
    for t in workers:
        t.start()
    for t in workers:
        t.join()
    got = problem.expected(store, small, "float64")
    assert computed == [(4, 4, 9, 7)]
    np.testing.assert_array_equal(got, conv.conv2d_reference(small.inv, "float64"))
    for sh in big:
        np.testing.assert_array_equal(problem.expected(store, sh, "float64"), conv.conv2d_reference(sh.inv, "float64"))
    tp = problems.get("transpose")
    a = tp.shared_invocation({"shape": [64, 32], "dtype": "float32"}, 11)
    first = tp.expected(store, a, "float64")
    assert tp.expected(store, a, "float64") is first and np.array_equal(first, a.inv.args[0].T)
    assert made == []
    assert big[0].keys(False)[:2] == big[1].keys(False)[:2] != small.keys(False)[:2]


def test_input_digests_are_made_when_a_persistent_reference_is_looked_up_and_once(monkeypatch, tmp_path):
    """Generating the inputs makes no digest (the largest are drawn beside the critical group's specializations,
    whose cores a 196 MiB SHA-256 took); the first lookup in a store whose entries outlive the process (a class
    batch's disk cache) makes each digest once, whichever threads ask, and they are array_digest's: the addresses
    are the contents', so another process finds the entries on disk."""
    refcache.clear_memory()
    made, real = _counting_digests(monkeypatch)
    problem = problems.get("conv2d")
    one = {**CONV_FOUR, "batch": 1, "pool": 2}
    big, small = problem.shared_invocation(CONV_FOUR, 11), problem.shared_invocation(one, 11)
    again = problem.shared_invocation({**CONV_FOUR, "bias": "zeros"}, 11)
    assert made == []
    (tmp_path / "cache").mkdir()
    store = refcache.ReferenceStore(tmp_path / "cache", b"k" * 32)
    assert store.persistent
    threads = [threading.Thread(target=problem.expected, args=(store, big, "float64")) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(made) == sorted([(4, 4, 9, 7), (3, 4, 3, 3), (3,)])  # X, W and the bias, once each
    assert big.digests == tuple(real(a) for a in big.inv.args)
    assert again.digests[:2] == big.digests[:2] and len(made) == 4  # the same X and W: only its own bias
    made.clear()
    problem.expected(store, small, "float64")  # sliced from the batch-4 convolution (its digests known)
    assert sorted(made) == sorted([(1, 4, 9, 7), (3, 4, 3, 3), (3,)])
    assert small.digests == tuple(real(a) for a in small.inv.args)
    assert store.stats.computed == 2  # the batch-4 convolution and the batch-1 slice (each stored on disk)
    # another process (a fresh memo, new input objects) finds both on disk by the content digests
    refcache.clear_memory()
    del big, small, again
    big, small = problem.shared_invocation(CONV_FOUR, 11), problem.shared_invocation(one, 11)
    later = refcache.ReferenceStore(tmp_path / "cache", b"k" * 32)
    made.clear()
    got = problem.expected(later, small, "float64")
    assert later.stats.from_disk == 1 and later.stats.computed == 0
    np.testing.assert_array_equal(got, conv.conv2d_reference(small.inv, "float64"))
    np.testing.assert_array_equal(problem.expected(later, big, "float64"), conv.conv2d_reference(big.inv, "float64"))
    assert later.stats.from_disk == 2 and later.stats.computed == 0


@pytest.mark.parametrize("slice_", [1, 3, 1000, conv.DRAW_SLICE])
@pytest.mark.parametrize("dtype", ["float16", "float32"])
def test_conv_inputs_are_the_streams_draws_however_a_float16_x_is_cut(monkeypatch, slice_, dtype):
    """conv2d_data draws a float16 X a slice at a time into a small float32 buffer: the values are those of one
    whole float32 draw cast to float16 (the generator's stream does not depend on how it is cut, odd slices
    included: PCG64 keeps the unused half of a 64-bit output for the next float32), so are W and the bias seed."""
    monkeypatch.setattr(conv, "DRAW_SLICE", slice_)
    case = dict(batch=3, in_channels=5, out_channels=2, height=11, width=9, kernel=3, pool=1, bias="random",
                dtype=dtype)
    x, w, bias_seed = conv.conv2d_data(case, 123)
    rng = np.random.default_rng(123)
    want_w = rng.random((2, 5, 3, 3), dtype=np.float32).astype(dtype)
    want_seed = int(rng.integers(0, 2**63))
    want_x = rng.random((3, 5, 11, 9), dtype=np.float32).astype(dtype)
    assert x.dtype == want_x.dtype and w.dtype == want_w.dtype and bias_seed == want_seed
    assert x.tobytes() == want_x.tobytes() and w.tobytes() == want_w.tobytes()


@pytest.mark.parametrize("persistent", [False, True])
def test_a_smaller_batch_judged_while_the_larger_batch_s_convolution_is_made_waits_for_it(monkeypatch, tmp_path,
                                                                                          persistent):
    """The batch-1 timed calls may be judged while the reference thread is still computing the batch-4
    convolution (their group hands over each call as it ends): their expected output waits for it and takes its
    first image, instead of computing the batch-1 convolution alone (58 GFLOP in float64 for 224x224)."""
    import time

    refcache.clear_memory()
    problem = problems.get("conv2d")
    computed: list[tuple[int, ...]] = []
    started, release = threading.Event(), threading.Event()
    real = conv.conv2d_accumulate

    def slow(x, w, *a, **kw):
        computed.append(x.shape)
        started.set()
        assert release.wait(60)
        return real(x, w, *a, **kw)

    monkeypatch.setattr(conv, "conv2d_accumulate", slow)
    (tmp_path / "cache").mkdir()
    store = (refcache.ReferenceStore(tmp_path / "cache", b"k" * 32) if persistent
             else refcache.ReferenceStore(None, None))
    big = problem.shared_invocation(CONV_FOUR, 13)
    small = problem.shared_invocation({**CONV_FOUR, "batch": 1, "pool": 2}, 13)
    refs = threading.Thread(target=problem.expected, args=(store, big, "float64"))
    refs.start()
    assert started.wait(60)
    got: list = []
    judge_thread = threading.Thread(target=lambda: got.append(problem.expected(store, small, "float64")))
    judge_thread.start()
    time.sleep(0.3)
    assert not got  # waiting for the batch-4 convolution
    release.set()
    refs.join(60)
    judge_thread.join(60)
    assert computed == [(4, 4, 9, 7)]
    release.set()
    np.testing.assert_array_equal(got[0], conv.conv2d_reference(small.inv, "float64"))
