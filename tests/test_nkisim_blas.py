"""nkisim/core/blas.py: one BLAS thread while values are computed, whichever Python thread asks, as the process's one
limiter of OpenBLAS's (process-wide) thread count.

threadpoolctl >= 3.8 lets only the first Python thread that set a limit change OpenBLAS's pool (until it leaves its
``with``) and silently ignores the others, so a limit taken in a grouped run's thread, a reference thread or a
worker thread did nothing while another thread held one, and concurrent set/restore pairs restored two threads
under a product still running.  Every test here holds a threadpoolctl limit of two threads in the main thread first,
as a program (or an earlier ``run_kernel`` there) may have: the thread-count tests then fail with threadpoolctl in
place of the limiter.  They need an OpenBLAS that can run two threads (skipped on one core).
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import nki
import nki.isa as nisa
import nki.language as nl
import numpy as np
import pytest
from threadpoolctl import threadpool_limits

from nkisim.core import blas
from nkisim.core.runtime import run_kernel, run_shared

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.skipif(not blas.openblas_thread_controls(), reason="no OpenBLAS with a process-wide pool")


@pytest.fixture
def two_threads() -> Iterator[list[int]]:
    """OpenBLAS at two threads, set by the main thread through threadpoolctl (which makes it the only thread
    threadpoolctl lets change the pool until the block ends).  Yields the counts outside any limiter."""
    with threadpool_limits(limits=2, user_api="blas"):
        now = blas.current_threads()
        if now != [2] * len(now):
            pytest.skip(f"OpenBLAS runs {now} threads here, not 2 (one core?)")
        yield now
    assert blas._USERS == 0


def _in_thread(fn: Callable[[], object]) -> object:
    """``fn()`` in a new Python thread; its result, or its exception re-raised here."""
    out: list = []

    def run() -> None:
        try:
            out.append(("ok", fn()))
        except BaseException as exc:  # noqa: BLE001 - re-raised in the test's thread
            out.append(("err", exc))

    t = threading.Thread(target=run)
    t.start()
    t.join()
    kind, value = out[0]
    if kind == "err":
        raise value
    return value


def test_a_limit_from_a_second_thread_takes_effect_and_the_first_release_keeps_it(two_threads):
    """Thread A holds, thread B holds too (one thread inside, though the main thread controls threadpoolctl's
    pool), A leaves while B is inside (still one: B's product must not change threads under it), B leaves: two."""
    a_in, b_in, a_out, b_check = (threading.Event() for _ in range(4))
    seen: dict[str, list[int]] = {}

    def a() -> None:
        with blas.one_blas_thread():
            seen["a inside"] = blas.current_threads()
            a_in.set()
            b_in.wait(10)
        a_out.set()

    def b() -> None:
        a_in.wait(10)
        with blas.one_blas_thread():
            seen["b inside"] = blas.current_threads()
            b_in.set()
            a_out.wait(10)
            seen["b after a left"] = blas.current_threads()
        b_check.set()

    threads = [threading.Thread(target=a), threading.Thread(target=b)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert seen == {"a inside": [1] * len(two_threads), "b inside": [1] * len(two_threads),
                    "b after a left": [1] * len(two_threads)}
    assert blas.current_threads() == two_threads


def test_nested_holders_and_the_default_the_last_restores(two_threads):
    """Nested in one thread: the inner release keeps one thread; set_default_threads while held is what the last
    release restores (a batch worker's share), and applies at once when nothing is held."""
    outer = blas.one_blas_thread().hold()
    with blas.one_blas_thread():
        assert blas.current_threads() == [1] * len(two_threads)
    assert blas.current_threads() == [1] * len(two_threads)
    blas.set_default_threads(2)
    assert blas.current_threads() == [1] * len(two_threads)
    outer.release()
    outer.release()  # a second release is nothing (finally blocks may repeat one)
    assert blas.current_threads() == [2] * len(two_threads)
    blas.set_default_threads(1)
    assert blas.current_threads() == [1] * len(two_threads)
    blas.set_default_threads(2)
    with pytest.raises(RuntimeError, match="held already"):
        held = blas.one_blas_thread().hold()
        try:
            held.hold()
        finally:
            held.release()
    assert blas.current_threads() == [2] * len(two_threads)


@nki.jit
def _probe_kernel(a):
    """Copies ``a``; records OpenBLAS's thread count while the kernel's Python runs (inside run_kernel's limit)."""
    SEEN.append(blas.current_threads())
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=a)
    nisa.dma_copy(dst=out, src=t)
    return out


SEEN: list[list[int]] = []


def test_run_kernel_and_run_shared_from_a_second_thread_take_one_blas_thread(two_threads):
    """A kernel run (and a grouped run, whose members run in threads of their own) started from a thread other than
    the one that set threadpoolctl's limit: one BLAS thread while it runs, two again after."""
    a = np.arange(128 * 4, dtype=np.float32).reshape(128, 4)
    SEEN.clear()
    run = _in_thread(lambda: run_kernel(_probe_kernel, (a,), {}, mode="full"))
    np.testing.assert_array_equal(run.outputs[0] if isinstance(run.outputs, (list, tuple)) else run.outputs, a)
    results, errors, _ = _in_thread(lambda: run_shared([lambda: run_kernel(_probe_kernel, (a,), {}, mode="full")
                                                        for _ in range(2)]))
    assert errors == [None, None]
    assert SEEN == [[1] * len(two_threads)] * 3
    assert blas.current_threads() == two_threads


def test_a_harness_reference_in_its_background_thread_has_the_one_thread_values(two_threads):
    """The Part 2 harness computes its reference convolutions in a background thread while the kernels run in the
    main thread: the values must be the one-thread ones, not those of whatever count the process has meanwhile.
    This shape's products (32x2000 by 2000x500, float32) differ in thousands of elements' last bits between one and
    two OpenBLAS threads, so the test bites only on a machine with two cores or more (skipped below that)."""
    sys.path.insert(0, str(ROOT / "part2"))
    try:
        import test_harness
        from conv2d_numpy import conv2d
    finally:
        sys.path.remove(str(ROOT / "part2"))
    case = test_harness.ConvCase(batch=1, in_channels=2000, out_channels=32, height=22, width=25,
                                 random_bias=False)
    X, W, _ = test_harness.InputBank(7).inputs(case)
    with blas.one_blas_thread():
        one = conv2d(X, W)
    assert not np.array_equal(conv2d(X, W), one), "this shape rounds alike with two threads: the test cannot bite"
    bank = test_harness.InputBank(7)
    bank.prefetch([case])
    got = bank.reference(case)
    np.testing.assert_array_equal(got, one)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork")
def test_a_child_forked_while_another_thread_holds_the_limit_restores_it_and_can_take_it(two_threads):
    """A worker forked while another thread holds one BLAS thread has only the forking thread: that hold ends in the
    child (two threads there again, as the parent will have when it is released), and the limiter still works."""
    inside, done = threading.Event(), threading.Event()

    def holder() -> None:
        with blas.one_blas_thread():
            inside.set()
            done.wait(30)

    t = threading.Thread(target=holder)
    t.start()
    try:
        inside.wait(10)
        assert blas.current_threads() == [1] * len(two_threads)
        pid = os.fork()
        if pid == 0:  # the child: report through the exit status only
            ok = blas.current_threads() == two_threads
            with blas.one_blas_thread():
                ok = ok and blas.current_threads() == [1] * len(two_threads)
            ok = ok and blas.current_threads() == two_threads and blas._USERS == 0
            os._exit(0 if ok else 1)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        assert blas.current_threads() == [1] * len(two_threads)  # the parent's holder is still inside
    finally:
        done.set()
        t.join(30)
    assert blas.current_threads() == two_threads
