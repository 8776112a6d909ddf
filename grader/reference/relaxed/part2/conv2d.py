# STAFF-ONLY: excluded from the student release (tools/release.py checks for this marker).
"""Relaxed staff reference for part 2, in the current NKI API (``import nki``): a correct but unoptimised fused
conv2d + bias + max-pool.

Statement for statement the legacy edition's relaxed kernel (grader/reference/legacy/relaxed/part2/conv2d.py),
translated as the NKI migration guide says (destination-first ISA calls, outputs in ``nl.shared_hbm``, reductions
over trailing axes); tests/test_reference_nki_twins.py checks both compute the same bits at the same modelled
latency, so a course on SDK 2.30+ hardware can calibrate the partial-credit bar with the kernel of its own API.

It sets the partial-credit threshold where the optimized staff kernel cannot (grader/thresholds.py).  It is the
first working kernel a student writes from the handout's plan, without the performance work: weights transposed
once and kept in SBUF, but one output row per PSUM tile (zero-initialised, as the legacy kernel's ``nl.zeros``),
the input rows of every output row and output tile loaded with their own small DMAs into a single buffer (so
loads wait for the previous row's matmuls), the PSUM result staged in SBUF, pooling done there afterwards, and
one output row stored at a time.
"""

import nki
import nki.isa as nisa
import nki.language as nl


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

    X_out = nl.ndarray((batch_size, out_channels, pooled_h, pooled_w), dtype=X.dtype, buffer=nl.shared_hbm)

    # Weights: natural layout per output tile, transposed block by block into w_t[ci_part, ci, tap, co].
    w_t = nl.ndarray((P, in_tiles, taps, out_channels), dtype=W.dtype, buffer=nl.sbuf)
    w_rows = W.reshape((out_channels, in_channels * taps))
    for co in nl.affine_range(out_tiles):
        w_nat = nl.ndarray((P, in_channels, taps), dtype=W.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=w_nat.reshape((P, in_channels * taps)), src=w_rows[co * P : (co + 1) * P, :])
        for ci in nl.affine_range(in_tiles):
            for tap in nl.affine_range(taps):
                w_psum = nl.ndarray((P, P), dtype=W.dtype, buffer=nl.psum)
                nisa.nc_transpose(dst=w_psum, data=w_nat[:, ci * P : (ci + 1) * P, tap])
                nisa.tensor_copy(dst=w_t[:, ci, tap, co * P : (co + 1) * P], src=w_psum)

    bias_sb = nl.ndarray((P, out_tiles), dtype=nl.float32, buffer=nl.sbuf)
    bias_rows = bias.reshape((out_tiles, P))
    for co in nl.affine_range(out_tiles):
        nisa.dma_copy(dst=bias_sb[:, co : co + 1], src=bias_rows[co])

    # One buffer of each kind, allocated once: every load waits for the previous row's compute to finish.
    rows = nl.ndarray((P, in_tiles, filter_size, input_width), dtype=X.dtype, buffer=nl.sbuf)
    # conv rows interleaved (column x of row r at [x, r]): the pool's row max then reduces a trailing, contiguous
    # axis, as the legacy kernel's reduction over its row axis reads its tile (the current API reduces trailing
    # axes only; a permuted view instead would read with a stride, which costs the Vector Engine twice as much)
    conv = nl.ndarray((P, out_width, pool_size), dtype=nl.float32, buffer=nl.sbuf)
    result = nl.ndarray((P, pooled_w), dtype=X.dtype, buffer=nl.sbuf)
    for b in nl.affine_range(batch_size):
        for co in nl.affine_range(out_tiles):
            for out_row in nl.affine_range(pooled_h):
                for r in nl.affine_range(pool_size):
                    y = out_row * pool_size + r
                    for ci in nl.affine_range(in_tiles):
                        nisa.dma_copy(dst=rows[:, ci], src=X[b, ci * P : (ci + 1) * P, y : y + filter_size, :])
                    acc = nl.zeros((P, out_width), dtype=nl.float32, buffer=nl.psum)
                    for ci in nl.affine_range(in_tiles):
                        for p in nl.affine_range(filter_size):
                            for q in nl.affine_range(filter_size):
                                nisa.nc_matmul(
                                    dst=acc,
                                    stationary=w_t[:, ci, p * filter_size + q, co * P : (co + 1) * P],
                                    moving=rows[:, ci, p, q : q + out_width],
                                )
                    nisa.tensor_scalar(dst=conv[:, :, r], data=acc, op0=nl.add, operand0=bias_sb[:, co : co + 1])
                if pool_size == 1:
                    nisa.tensor_copy(dst=result, src=conv[:, :, 0])
                else:
                    row_max = nl.ndarray((P, pooled_w * 2), dtype=nl.float32, buffer=nl.sbuf)
                    nisa.tensor_reduce(dst=row_max, op=nl.max, data=conv[:, 0 : pooled_w * 2, :], axis=(2,))
                    nisa.tensor_reduce(dst=result, op=nl.max, data=row_max.reshape((P, pooled_w, 2)), axis=(2,))
                nisa.dma_copy(dst=X_out[b, co * P : (co + 1) * P, out_row, :], src=result)
    return X_out
