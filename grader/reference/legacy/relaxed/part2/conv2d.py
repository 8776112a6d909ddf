# STAFF-ONLY: excluded from the student release (tools/release.py checks for this marker).
"""Relaxed staff reference for part 2: a correct but unoptimised fused conv2d + bias + max-pool.

It sets the partial-credit threshold (120% of its latency).  It is the first working kernel a student writes
from the handout's plan, without the performance work: weights transposed once and kept in SBUF, but one output
row per PSUM tile (zero-initialised), the input rows of every output row and output tile loaded with their own
small DMAs into a single buffer (so loads wait for the previous row's matmuls), the PSUM result staged in SBUF,
pooling done there afterwards, and one output row stored at a time.
"""

import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl


@nki.compiler.skip_middle_end_transformations
@nki.jit
def fused_conv2d_maxpool(X, W, bias, pool_size=1):
    batch_size, in_channels, input_height, input_width = X.shape
    out_channels, _, filter_size, _ = W.shape
    P = nl.tile_size.pmax
    assert in_channels % P == 0 and out_channels % P == 0 and pool_size in (1, 2)
    out_height = input_height - filter_size + 1
    out_width = input_width - filter_size + 1
    assert nl.tile_size.gemm_moving_fmax >= out_width
    in_tiles, out_tiles = in_channels // P, out_channels // P
    taps = filter_size * filter_size
    pooled_h, pooled_w = out_height // pool_size, out_width // pool_size

    X_out = nl.ndarray((batch_size, out_channels, pooled_h, pooled_w), dtype=X.dtype, buffer=nl.hbm)

    # Weights: natural layout per output tile, transposed block by block into w_t[ci_part, ci, tap, co].
    w_t = nl.ndarray((P, in_tiles, taps, out_channels), dtype=W.dtype, buffer=nl.sbuf)
    w_rows = W.reshape((out_channels, in_channels * taps))
    for co in nl.affine_range(out_tiles):
        w_nat = nl.ndarray((P, in_channels, taps), dtype=W.dtype, buffer=nl.sbuf)
        nisa.dma_copy(src=w_rows[co * P : (co + 1) * P, :], dst=w_nat.reshape((P, in_channels * taps)))
        for ci in nl.affine_range(in_tiles):
            for tap in nl.affine_range(taps):
                w_psum = nisa.nc_transpose(w_nat[:, ci * P : (ci + 1) * P, tap])
                w_t[:, ci, tap, co * P : (co + 1) * P] = nisa.tensor_copy(w_psum)

    bias_sb = nl.ndarray((P, out_tiles), dtype=nl.float32, buffer=nl.sbuf)
    bias_rows = bias.reshape((out_tiles, P))
    for co in nl.affine_range(out_tiles):
        nisa.dma_copy(src=bias_rows[co], dst=bias_sb[:, co : co + 1])

    # One buffer of each kind, allocated once: every load waits for the previous row's compute to finish.
    rows = nl.ndarray((P, in_tiles, filter_size, input_width), dtype=X.dtype, buffer=nl.sbuf)
    conv = nl.ndarray((P, pool_size, out_width), dtype=nl.float32, buffer=nl.sbuf)
    result = nl.ndarray((P, pooled_w), dtype=X.dtype, buffer=nl.sbuf)
    for b in nl.affine_range(batch_size):
        for co in nl.affine_range(out_tiles):
            for out_row in nl.affine_range(pooled_h):
                for r in nl.affine_range(pool_size):
                    y = out_row * pool_size + r
                    for ci in nl.affine_range(in_tiles):
                        nisa.dma_copy(src=X[b, ci * P : (ci + 1) * P, y : y + filter_size, :], dst=rows[:, ci])
                    acc = nl.zeros((P, out_width), dtype=nl.float32, buffer=nl.psum)
                    for ci in nl.affine_range(in_tiles):
                        for p in nl.affine_range(filter_size):
                            for q in nl.affine_range(filter_size):
                                acc += nisa.nc_matmul(
                                    w_t[:, ci, p * filter_size + q, co * P : (co + 1) * P],
                                    rows[:, ci, p, q : q + out_width],
                                )
                    conv[:, r, :] = nisa.tensor_scalar(acc, nl.add, bias_sb[:, co : co + 1])
                if pool_size == 1:
                    result[...] = nisa.tensor_copy(conv[:, 0, :], dtype=X.dtype)
                else:
                    row_max = nisa.tensor_reduce(nl.max, conv[:, :, 0 : pooled_w * 2], axis=(1,), dtype=nl.float32)
                    result[...] = nisa.tensor_reduce(
                        nl.max, row_max.reshape((P, pooled_w, 2)), axis=(2,), dtype=X.dtype
                    )
                nisa.dma_copy(src=result, dst=X_out[b, co * P : (co + 1) * P, out_row, :])
    return X_out
