# STAFF-ONLY: the handout's Part 2 starting point (a partial solution); excluded from the student release.
"""The handout's Part 2 starting point in the current NKI API (``import nki``), as a student of the default
edition writes it from the handout's pseudo-code and its "In NKI:" paragraph.

The ladder's ``step0_naive`` (staff/ladder/conv_ladder.py) is the same kernel in the legacy API.  This one is what
the student-loop figures are measured on (docs/staff-notes.md, "The student's loop"): ``python
part2/test_harness.py --submission staff/ladder/step0_naive_nki.py --only smaller,224-fp16``.
"""

import nki
import nki.isa as nisa
import nki.language as nl


@nki.jit
def fused_conv2d_maxpool(X, W, bias, pool_size=1):
    batch_size, in_channels, input_height, input_width = X.shape
    out_channels, _, K, _ = W.shape
    P = nl.tile_size.pmax
    in_tiles, out_tiles = in_channels // P, out_channels // P
    out_height, out_width = input_height - K + 1, input_width - K + 1
    pooled_h, pooled_w = out_height // pool_size, out_width // pool_size
    X_out = nl.ndarray((batch_size, out_channels, pooled_h, pooled_w), dtype=X.dtype, buffer=nl.shared_hbm)

    # bias as float32 columns, one per output-channel tile (dma_copy casts to the destination's dtype)
    bias_sb = nl.ndarray((P, out_tiles), dtype=nl.float32, buffer=nl.sbuf)
    bias_rows = bias.reshape((out_tiles, P))
    for co in nl.affine_range(out_tiles):
        nisa.dma_copy(dst=bias_sb[:, co : co + 1], src=bias_rows[co])
    for b in nl.affine_range(batch_size):
        for out_row in nl.affine_range(pooled_h):
            for co in nl.affine_range(out_tiles):
                bias_col = bias_sb[:, co : co + 1]
                conv = nl.ndarray((P, pool_size, out_width), dtype=nl.float32, buffer=nl.sbuf)
                for r in nl.affine_range(pool_size):
                    y = out_row * pool_size + r
                    acc = nl.ndarray((P, out_width), dtype=nl.float32, buffer=nl.psum)
                    for ci in nl.affine_range(in_tiles):
                        for p in nl.affine_range(K):
                            for q in nl.affine_range(K):
                                w = nl.ndarray((P, P), dtype=W.dtype, buffer=nl.sbuf)
                                nisa.dma_copy(dst=w, src=W[co * P : (co + 1) * P, ci * P : (ci + 1) * P, p, q])
                                w_psum = nl.ndarray((P, P), dtype=W.dtype, buffer=nl.psum)
                                nisa.nc_transpose(dst=w_psum, data=w)
                                wT = nl.ndarray((P, P), dtype=W.dtype, buffer=nl.sbuf)
                                nisa.tensor_copy(dst=wT, src=w_psum)
                                x = nl.ndarray((P, out_width), dtype=X.dtype, buffer=nl.sbuf)
                                nisa.dma_copy(dst=x, src=X[b, ci * P : (ci + 1) * P, y + p, q : q + out_width])
                                nisa.nc_matmul(dst=acc, stationary=wT, moving=x)
                    nisa.tensor_scalar(dst=conv[:, r, :], data=acc, op0=nl.add, operand0=bias_col)
                row = nl.ndarray((P, pooled_w), dtype=X.dtype, buffer=nl.sbuf)
                if pool_size == 1:
                    nisa.tensor_copy(dst=row, src=conv[:, 0, :])
                else:
                    # the 2x2 windows as the last two axes of a view: (P, 1, pooled_w, 2 rows, 2 columns)
                    windows = conv[:, :, 0 : pooled_w * 2].reshape((P, 1, 2, pooled_w, 2)).permute((0, 1, 3, 2, 4))
                    nisa.tensor_reduce(dst=row.reshape((P, 1, pooled_w)), op=nl.max, data=windows, axis=(3, 4))
                nisa.dma_copy(dst=X_out[b, co * P : (co + 1) * P, out_row, :], src=row)
    return X_out
