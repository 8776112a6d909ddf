"""The legacy accumulation idioms compilers emit give the hardware's values (issue 33, deliverable 2).

A general kernel ran correctly on trn1 and trn2 but gave NaN on nkisim: it summed per-partition partial sums with
``nl.loop_reduce`` into a fresh ``nl.ndarray``.  The compiler makes an accumulation's first write its
initialisation; nkisim added onto the NaN it fills fresh tiles with.  Every value is checked against NumPy.
"""

from __future__ import annotations

import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl
import numpy as np
import pytest

from nkisim.core.runtime import run_kernel

RNG = np.random.default_rng(1060)


@nki.jit
def rowsum_loop_reduce(x, op, init):
    """The issue's reproducer: two tensor_reduce partial sums of a [128, 1024] tile combined with loop_reduce."""
    out = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.shared_hbm)
    t = nl.load(x)
    if init is None:
        acc = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.sbuf)  # fresh: no value
    else:
        acc = nl.full((128, 1), init, dtype=nl.float32, buffer=nl.sbuf)
    for i in nl.affine_range(2):
        part = nisa.tensor_reduce(op, t[:, i * 512:(i + 1) * 512], axis=[1], keepdims=True)
        acc = nl.loop_reduce(part, op=op, loop_indices=[i])
    nl.store(out, value=acc)
    return out


@pytest.mark.parametrize(("op", "ref"), [(np.add, np.sum), (np.maximum, np.max), (np.minimum, np.min)])
def test_loop_reduce_into_a_fresh_ndarray(op, ref):
    x = RNG.standard_normal((128, 1024)).astype(np.float32)
    got = run_kernel(rowsum_loop_reduce, (x, op, None)).outputs
    assert not np.isnan(got).any()
    np.testing.assert_allclose(got[:, 0], ref(x, axis=1), rtol=1e-5, atol=1e-4)


def test_an_initialised_accumulator_keeps_its_value():
    x = RNG.standard_normal((128, 1024)).astype(np.float32) - 5.0  # every row's max is below 3
    got = run_kernel(rowsum_loop_reduce, (x, np.maximum, 3.0)).outputs
    np.testing.assert_array_equal(got[:, 0], np.full(128, 3.0, np.float32))
    got = run_kernel(rowsum_loop_reduce, (x, np.add, 1.5)).outputs
    np.testing.assert_allclose(got[:, 0], x.sum(axis=1) + 1.5, rtol=1e-5, atol=1e-3)


@nki.jit
def block_accumulate(x):
    """``acc[b] += tile`` into a block tile never written, each block its own running sum."""
    nb, n, f = x.shape[0], x.shape[1] // 128, x.shape[2]
    out = nl.ndarray((nb, 128, f), dtype=x.dtype, buffer=nl.shared_hbm)
    acc = nl.ndarray((nb, nl.par_dim(128), f), dtype=nl.float32, buffer=nl.sbuf)
    for b in nl.affine_range(nb):
        for k in nl.sequential_range(n):
            acc[b] += nl.load(x[b, k * 128:(k + 1) * 128, :])
    for b in nl.affine_range(nb):
        nl.store(out[b], value=acc[b])
    return out


def test_plus_equals_into_block_tiles():
    x = RNG.standard_normal((3, 4 * 128, 256)).astype(np.float32)
    got = run_kernel(block_accumulate, (x,)).outputs
    np.testing.assert_allclose(got, x.reshape(3, 4, 128, 256).sum(axis=1), rtol=1e-5, atol=1e-5)


@nki.jit
def lazy_zeros(x):
    out = nl.ndarray((128, 256), dtype=nl.float32, buffer=nl.shared_hbm)
    acc = nl.zeros((128, 256), dtype=nl.float32, buffer=nl.sbuf, lazy_initialization=True)
    for k in nl.affine_range(x.shape[0] // 128):
        acc += nl.load(x[k * 128:(k + 1) * 128, :])
    nl.store(out, value=acc)
    return out


def test_lazy_initialization_zeros():
    x = RNG.standard_normal((3 * 128, 256)).astype(np.float32)
    np.testing.assert_allclose(run_kernel(lazy_zeros, (x,)).outputs, x.reshape(3, 128, 256).sum(axis=0),
                               rtol=1e-5, atol=1e-5)


def test_reading_an_unwritten_tile_otherwise_still_gives_nan():
    """Only an accumulation into itself initialises: an unwritten tile read as an operand stays NaN (the
    emulator's way of showing a read of undefined memory)."""
    @nki.jit
    def k(x):
        out = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
        fresh = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)
        nl.store(out, value=nl.add(fresh, nl.load(x)))
        return out

    assert np.isnan(run_kernel(k, (RNG.standard_normal((128, 64)).astype(np.float32),)).outputs).all()


def test_timing_runs_trace_the_same_instructions():
    x = RNG.standard_normal((128, 1024)).astype(np.float32)
    full = run_kernel(rowsum_loop_reduce, (x, np.add, None))
    timing = run_kernel(rowsum_loop_reduce, (x, np.add, None), mode="timing")
    assert [i.op for i in full.trace.instrs] == [i.op for i in timing.trace.instrs]
