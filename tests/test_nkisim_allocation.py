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
