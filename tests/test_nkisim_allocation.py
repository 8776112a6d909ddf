"""What an automatically allocated tile's storage is (core/buffers.py, core/memory.py; issue 35 item 1): a timing run
gives every tile of one geometry the same read-only array (no value is ever written or read there), a full run
reuses the storage of a dead tile that nothing else holds, and poisons it again, so reading a tile before writing
it gives NaN whichever storage it got."""

from __future__ import annotations

import weakref

import nki
import nki.isa as nisa
import nki.language as nl
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nkisim.core.access import allocation
from nkisim.core.runtime import run_kernel

SEEN: list = []
REUSED: list = []


def _tile_storage(t):
    return allocation(t).base


@nki.jit
def _read_before_write(a):
    """Each iteration copies out a fresh tile before writing it (the poison), then fills it with ones: a tile whose
    storage was a dead tile's, not poisoned again, would hand the next copy the ones."""
    out = nl.ndarray((4, 128, 8), dtype=nl.float32, buffer=nl.shared_hbm)
    for i in nl.affine_range(4):
        t = nl.ndarray((128, 8), dtype=nl.float32, buffer=nl.sbuf)
        base = _tile_storage(t)
        REUSED.append(any(r() is base for r in SEEN))  # an earlier tile's array (weak: the test keeps none alive)
        SEEN.append(weakref.ref(base))
        del base
        nisa.dma_copy(dst=out[i], src=t)
        nisa.memset(dst=t, value=1.0)
    return out


def test_a_reused_tile_storage_is_poisoned_again():
    SEEN.clear()
    REUSED.clear()
    out = run_kernel(_read_before_write, (np.zeros(1, np.float32),), {}, mode="full").outputs
    assert np.isnan(out).all()
    assert any(REUSED), REUSED  # later tiles did get dead tiles' arrays (else this test proves nothing)


def test_storage_something_else_holds_is_never_reused():
    """A dead tile's array that is still viewed elsewhere (here: the test holds it) stays out of the free list."""
    held: list = []

    @nki.jit
    def k(a):
        out = nl.ndarray((6, 128, 8), dtype=nl.float32, buffer=nl.shared_hbm)
        for i in nl.affine_range(6):
            t = nl.ndarray((128, 8), dtype=nl.float32, buffer=nl.sbuf)
            base = _tile_storage(t)
            assert not any(base is h for h in held), "a tile got storage another holder still sees"
            held.append(base[:, :4])  # a view: keeps the array
            nisa.memset(dst=t, value=float(i))
            nisa.dma_copy(dst=out[i], src=t)
        return out

    out = run_kernel(k, (np.zeros(1, np.float32),), {}, mode="full").outputs
    np.testing.assert_array_equal(out, np.arange(6, dtype=np.float32)[:, None, None] * np.ones((6, 128, 8)))
    assert all((h == i).all() for i, h in enumerate(held))  # nothing wrote into storage someone still held


@pytest.mark.parametrize("mode", ["full", "timing"])
def test_a_timing_run_shares_one_read_only_array_per_geometry(mode):
    bases: list = []

    @nki.jit
    def k(a):
        out = nl.ndarray((128, 8), dtype=nl.float32, buffer=nl.shared_hbm)
        t = nl.ndarray((128, 8), dtype=nl.float32, buffer=nl.sbuf)
        u = nl.ndarray((128, 8), dtype=nl.float32, buffer=nl.sbuf)
        v = nl.ndarray((128, 4), dtype=nl.float32, buffer=nl.sbuf)
        bases.extend(_tile_storage(x) for x in (t, u, v))
        nisa.memset(dst=t, value=2.0)
        nisa.tensor_copy(dst=u, src=t)
        nisa.memset(dst=v, value=0.0)
        nisa.dma_copy(dst=out, src=u)
        return out

    run = run_kernel(k, (np.zeros(1, np.float32),), {}, mode=mode)
    t, u, v = bases
    if mode == "timing":
        assert t is u and t is not v and not t.flags.writeable and not v.flags.writeable
    else:
        assert t is not u and t.flags.writeable
        np.testing.assert_array_equal(run.outputs, np.full((128, 8), 2.0, np.float32))


# ---- lazy poisoning (core.access.poison_now): a full run fills a fresh tile at the first access to its values,
# unless that access writes every element through the tile's own view


@nki.jit
def _windows(a, windows):
    """Per round: a tile filled with a marker value (so that a later tile reusing its storage would show it), then a
    fresh tile of the same geometry written only in the column ``windows`` of that round, copied out whole."""
    out = nl.ndarray((len(windows), 128, 8), dtype=nl.float32, buffer=nl.shared_hbm)
    for i, wins in enumerate(windows):
        t = nl.ndarray((128, 8), dtype=nl.float32, buffer=nl.sbuf)
        nisa.memset(dst=t, value=-1.0)  # its first access writes it whole: never poisoned
        nisa.dma_copy(dst=out[i], src=t)
        del t
        u = nl.ndarray((128, 8), dtype=nl.float32, buffer=nl.sbuf)
        for k, (lo, hi) in enumerate(wins):
            nisa.memset(dst=u[:, lo:hi], value=float(k))
        if not wins:
            nisa.tensor_scalar(dst=u, data=u, op0=nl.add, operand0=1.0)  # reads the fresh tile: NaN + 1
        nisa.dma_copy(dst=out[i], src=u)
    return out


def _expected(windows) -> np.ndarray:
    exp = np.full((len(windows), 128, 8), np.nan, np.float32)
    for i, wins in enumerate(windows):
        for k, (lo, hi) in enumerate(wins):
            exp[i, :, lo:hi] = k
    return exp


@settings(max_examples=25, deadline=None)
@given(st.lists(st.lists(st.tuples(st.integers(0, 7), st.integers(1, 8)).filter(lambda w: w[0] < w[1]),
                         max_size=3), min_size=1, max_size=4))
def test_a_tile_reads_the_poison_wherever_it_was_not_written(windows):
    """Whatever the first accesses to fresh tiles (a whole write, partial writes, a read), every element not written
    reads NaN, also when the storage was a dead tile's holding other values."""
    wins = tuple(tuple(w) for w in windows)
    out = run_kernel(_windows, (np.zeros(1, np.float32), wins), {}, mode="full").outputs
    np.testing.assert_array_equal(out, _expected(windows))  # NaN == NaN for assert_array_equal


def test_writes_through_other_views_poison_first():
    """Only a write of every element through the tile's own view skips the fill: a write through a full-slice view
    (a view of its own) poisons first and overwrites it all; a strided view leaves every other column NaN."""

    @nki.jit
    def k(a):
        out = nl.ndarray((2, 128, 8), dtype=nl.float32, buffer=nl.shared_hbm)
        src = nl.ndarray((128, 8), dtype=nl.float32, buffer=nl.sbuf)
        nisa.memset(dst=src, value=3.0)
        t = nl.ndarray((128, 8), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=t[:, :], src=src)  # every element, through another view
        nisa.dma_copy(dst=out[0], src=t)
        u = nl.ndarray((128, 8), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=u[:, 0:8:2], src=src[:, 0:4])  # every other column
        nisa.dma_copy(dst=out[1], src=u)
        return out

    out = run_kernel(k, (np.zeros(1, np.float32),), {}, mode="full").outputs
    np.testing.assert_array_equal(out[0], np.full((128, 8), 3.0, np.float32))
    np.testing.assert_array_equal(out[1, :, 0::2], np.full((128, 4), 3.0, np.float32))
    assert np.isnan(out[1, :, 1::2]).all()


def test_shared_uniform_flags_are_copied_before_a_write():
    """PSUM tiles of one shape start with one shared read-only all-clear flag array (core.access copy on write): a
    partial write to one gives it flags of its own and leaves the other's, and a whole write shares the all-set ones."""
    seen: list = []

    @nki.jit
    def k(a):
        out = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.shared_hbm)
        p = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.psum)
        q = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.psum)
        seen.append(allocation(p).acc is allocation(q).acc and not allocation(p).acc.flags.writeable)
        nisa.memset(dst=p[:, 0:64], value=0.0)
        pa, qa = allocation(p).acc, allocation(q).acc
        seen.append(bool(pa[:, :64].all() and not pa[:, 64:].any() and not qa.any() and pa.flags.writeable))
        nisa.memset(dst=q, value=1.0)
        seen.append(bool(allocation(q).acc.all() and not allocation(q).acc.flags.writeable
                         and not allocation(p).acc[:, 64:].any()))
        nisa.tensor_copy(dst=out, src=q)
        return out

    run_kernel(k, (np.zeros(1, np.float32),), {}, mode="full")
    assert seen == [True, True, True], seen
