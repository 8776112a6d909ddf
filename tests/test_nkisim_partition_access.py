"""Engines read a contiguous run of partitions, each partition walking the same free pattern in its own memory
(trainium_inferentia2_arch.rst, "Access patterns"); a view that moves data across partitions in one engine
instruction is something no engine does (docs/grading-security.md, G11).  Each refusal here was a one-instruction
cross-partition move before, values exact and costed as a plain copy."""

from __future__ import annotations

import neuronxcc.nki as lnki
import neuronxcc.nki.language as lnl
import nki.isa as nisa
import nki.language as nl
import numpy as np
from nkisim_util import raises_rule

from nkisim.core.runtime import run_kernel
from nkisim.frontends import NKI

ROWS = np.arange(128 * 32, dtype=np.float32).reshape(128, 32)


def _ap_copy(a, pattern, out_shape, offset=None):
    out = nl.ndarray(out_shape, dtype=a.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=a)
    r = nl.ndarray(out_shape, dtype=a.dtype, buffer=nl.sbuf)
    nisa.tensor_copy(dst=r, src=t.ap(pattern, offset=offset))
    nisa.dma_copy(dst=out, src=r)
    return out


def _run(pattern, out_shape, offset=None):
    # tuples: the NKI 0.3+ compiler takes no list kernel arguments (nkisim_kernel_signature)
    return run_kernel(_ap_copy, (ROWS, tuple(map(tuple, pattern)), tuple(out_shape), offset), frontend=NKI).outputs


def test_an_access_pattern_inside_each_partition_row_reads_it():
    """Two windows of each row, in its own partition: legal, the values are the row's."""
    out = _run([[32, 128], [16, 2], [1, 16]], (128, 2, 16))
    np.testing.assert_array_equal(out, ROWS.reshape(128, 2, 16))
    out = _run([[32, 64], [-1, 8]], (64, 8), offset=31)  # a reversed walk from the end of the row
    np.testing.assert_array_equal(out, ROWS[:64, 31:23:-1])


def test_a_free_stride_cannot_step_into_the_next_partition():
    """[[32, 64], [32, 2], [1, 32]] over a [128, 32] tile gave partition p its own row and partition p+1's row in
    one VectorE copy; the hardware's free pattern stays inside partition p's memory."""
    with raises_rule("nkisim_view", "ap", "reach elements [0, 63]", "holds 32 elements", "DMA or a TensorE"):
        _run([[32, 64], [32, 2], [1, 32]], (64, 2, 32))


def test_a_free_walk_from_inside_the_row_cannot_run_past_its_end():
    with raises_rule("nkisim_view", "starting at element 16", "reach elements [16, 47]"):
        _run([[32, 64], [1, 32]], (64, 32), offset=16)
    with raises_rule("nkisim_view", "reach elements [-8, 7]"):
        _run([[32, 64], [-1, 16]], (64, 16), offset=32 + 7)


# ---- index expressions of the legacy API ---------------------------------------------------------------------
SQUARE = np.arange(128 * 128, dtype=np.float32).reshape(128, 128)


def _legacy_copy(a, form):
    out = lnl.ndarray((128, 128) if form != "diagonal" else (128, 1), dtype=a.dtype, buffer=lnl.shared_hbm)
    t = lnl.load(a)
    i_p = lnl.arange(128)[:, None]
    i_f = lnl.arange(128)[None, :]
    if form == "transpose":
        lnl.store(out, lnl.copy(t[i_f, i_p]))  # partition index along the free axis: a one-instruction transpose
    elif form == "diagonal":
        lnl.store(out, lnl.copy(t[i_p, i_p]))  # partition p reads element p of its row
    elif form == "store_transpose":
        lnl.store(out, t[i_f, i_p])  # the same view feeding a DMA: the queues address every byte
    elif form == "regular":
        lnl.store(out, lnl.copy(t[i_p, 127 - i_f]))  # a reversed free walk, the same in every partition
    return out


def _legacy_run(form):
    return lnki.simulate_kernel(lnki.jit(_legacy_copy), SQUARE, form)


def test_an_index_expression_that_transposes_is_not_an_engine_operand():
    with raises_rule("nkisim_partition_lanes", "tensor_copy on vector", "varies along free axis 1", "transpose"):
        _legacy_run("transpose")


def test_a_partition_dependent_free_offset_is_not_an_engine_operand():
    with raises_rule("nkisim_partition_lanes", "partition axis steps 516 bytes", "not one partition (512 bytes)"):
        _legacy_run("diagonal")


def test_the_same_views_feed_dmas_and_regular_walks_feed_engines():
    np.testing.assert_array_equal(np.asarray(_legacy_run("store_transpose")), SQUARE.T)
    np.testing.assert_array_equal(np.asarray(_legacy_run("regular")), SQUARE[:, ::-1])
