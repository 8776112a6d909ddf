# STAFF-ONLY: complete part-2 solutions (calibration corpus); excluded from the student release.
"""2024-course style (trn1 cohort, SDK 2.20/2.21): ``nl.load``/``nl.store``, ``nl.matmul``, ``nl.max``.

No ``skip_middle_end_transformations``; PSUM accumulators are ``nl.zeros(..., nl.float32, buffer=nl.psum)``
tiles accumulated with ``acc += nl.matmul(...)``; the bias is added with ``nl.add`` against a (128, 1) column;
pooling is ``nl.max`` over a reshaped (.., 2, width/2, 2) SBUF view; results leave with ``nl.store`` (which
casts to the output dtype).

* ``fused_conv2d_maxpool_row``: weights loaded per (out, in) tile pair and every 3x3 slice transposed once with
  ``nl.transpose`` before the main loop; ``nl.matmul(w_T, x, transpose_x=True)``; one conv output row per PSUM
  tile, ``pool_size`` rows per iteration, the K input rows of each conv row loaded with one ``nl.load`` per
  128-channel tile.
* ``fused_conv2d_maxpool_block``: as ``_row`` but a block of rows (rows x out_width <= 512) per PSUM tile and
  per input load.
* ``fused_conv2d_maxpool_no_transpose``: weights never transposed by the kernel: ``nl.matmul(w_slice, x)`` with
  the natural (out channel, in channel) slice, so the compiler inserts a TensorE transpose of the weight slice
  before every matmul (the API's documented lowering of ``transpose_x=False``).  Block rows as ``_block``.

Pooling needs an even conv output width (the course's 222 and 14).
"""

import neuronxcc.nki as nki
import neuronxcc.nki.language as nl


@nki.jit
def fused_conv2d_maxpool_row(X, W, bias, pool_size=1):
    batch_size, in_channels, input_height, input_width = X.shape
    out_channels, _, K, _ = W.shape
    P = nl.tile_size.pmax
    n_in, n_out = in_channels // P, out_channels // P
    out_height, out_width = input_height - K + 1, input_width - K + 1
    out_pool_height, out_pool_width = out_height // pool_size, out_width // pool_size

    X_out = nl.ndarray((batch_size, out_channels, out_pool_height, out_pool_width), dtype=X.dtype,
                       buffer=nl.shared_hbm)

    # w_T[co, ci, kh, kw] is the (in channel, out channel) slice: the stationary operand of transpose_x=True
    w_T = nl.ndarray((n_out, n_in, K, K, nl.par_dim(P), P), dtype=W.dtype, buffer=nl.sbuf)
    for co in nl.affine_range(n_out):
        for ci in nl.affine_range(n_in):
            w_tile = nl.load(W[co * P:(co + 1) * P, ci * P:(ci + 1) * P, :, :])
            for kh in nl.affine_range(K):
                for kw in nl.affine_range(K):
                    w_T[co, ci, kh, kw] = nl.transpose(w_tile[:, :, kh, kw])
    bias_cols = bias.reshape((n_out, P, 1))

    for b in nl.affine_range(batch_size):
        for h in nl.affine_range(out_pool_height):
            for co in nl.affine_range(n_out):
                bias_tile = nl.load(bias_cols[co])
                conv = nl.ndarray((P, pool_size, out_width), dtype=nl.float32, buffer=nl.sbuf)
                for r in nl.affine_range(pool_size):
                    row = h * pool_size + r
                    acc = nl.zeros((P, out_width), nl.float32, buffer=nl.psum)
                    for ci in nl.affine_range(n_in):
                        x_rows = nl.load(X[b, ci * P:(ci + 1) * P, row:row + K, :])
                        for kh in nl.affine_range(K):
                            for kw in nl.affine_range(K):
                                acc += nl.matmul(w_T[co, ci, kh, kw], x_rows[:, kh, kw:kw + out_width],
                                                 transpose_x=True)
                    conv[:, r, :] = nl.add(acc, bias_tile)
                if pool_size == 2:
                    pooled = nl.max(conv[:, :, 0:2 * out_pool_width].reshape((P, 2, out_pool_width, 2)), axis=[1, 3])
                    nl.store(X_out[b, co * P:(co + 1) * P, h, :], value=pooled)
                else:
                    nl.store(X_out[b, co * P:(co + 1) * P, h, :], value=conv[:, 0, :])
    return X_out


@nki.jit
def fused_conv2d_maxpool_block(X, W, bias, pool_size=1):
    batch_size, in_channels, input_height, input_width = X.shape
    out_channels, _, K, _ = W.shape
    P = nl.tile_size.pmax
    n_in, n_out = in_channels // P, out_channels // P
    out_height, out_width = input_height - K + 1, input_width - K + 1
    assert pool_size == 1 or out_width % 2 == 0
    out_pool_height, out_pool_width = out_height // pool_size, out_width // pool_size
    conv_rows = out_pool_height * pool_size
    rows = min(conv_rows, 512 // out_width) // pool_size * pool_size
    while conv_rows % rows:
        rows -= pool_size

    X_out = nl.ndarray((batch_size, out_channels, out_pool_height, out_pool_width), dtype=X.dtype,
                       buffer=nl.shared_hbm)

    w_T = nl.ndarray((n_out, n_in, K, K, nl.par_dim(P), P), dtype=W.dtype, buffer=nl.sbuf)
    for co in nl.affine_range(n_out):
        for ci in nl.affine_range(n_in):
            w_tile = nl.load(W[co * P:(co + 1) * P, ci * P:(ci + 1) * P, :, :])
            for kh in nl.affine_range(K):
                for kw in nl.affine_range(K):
                    w_T[co, ci, kh, kw] = nl.transpose(w_tile[:, :, kh, kw])
    bias_cols = bias.reshape((n_out, P, 1))

    for b in nl.affine_range(batch_size):
        for blk in nl.affine_range(conv_rows // rows):
            r0 = blk * rows
            x_blk = nl.ndarray((n_in, nl.par_dim(P), rows + K - 1, input_width), dtype=X.dtype, buffer=nl.sbuf)
            for ci in nl.affine_range(n_in):
                x_blk[ci] = nl.load(X[b, ci * P:(ci + 1) * P, r0:r0 + rows + K - 1, :])
            for co in nl.affine_range(n_out):
                bias_tile = nl.load(bias_cols[co])
                acc = nl.zeros((P, rows, out_width), nl.float32, buffer=nl.psum)
                for ci in nl.affine_range(n_in):
                    for kh in nl.affine_range(K):
                        for kw in nl.affine_range(K):
                            acc += nl.matmul(w_T[co, ci, kh, kw], x_blk[ci, :, kh:kh + rows, kw:kw + out_width],
                                             transpose_x=True)
                conv = nl.add(acc, bias_tile)
                out_r0 = r0 // pool_size
                if pool_size == 2:
                    pooled = nl.max(conv.reshape((P, rows // 2, 2, out_pool_width, 2)), axis=[2, 4])
                    nl.store(X_out[b, co * P:(co + 1) * P, out_r0:out_r0 + rows // 2, :], value=pooled)
                else:
                    nl.store(X_out[b, co * P:(co + 1) * P, out_r0:out_r0 + rows, :], value=conv)
    return X_out


@nki.jit
def fused_conv2d_maxpool_no_transpose(X, W, bias, pool_size=1):
    batch_size, in_channels, input_height, input_width = X.shape
    out_channels, _, K, _ = W.shape
    P = nl.tile_size.pmax
    n_in, n_out = in_channels // P, out_channels // P
    out_height, out_width = input_height - K + 1, input_width - K + 1
    assert pool_size == 1 or out_width % 2 == 0
    out_pool_height, out_pool_width = out_height // pool_size, out_width // pool_size
    conv_rows = out_pool_height * pool_size
    rows = min(conv_rows, 512 // out_width) // pool_size * pool_size
    while conv_rows % rows:
        rows -= pool_size

    X_out = nl.ndarray((batch_size, out_channels, out_pool_height, out_pool_width), dtype=X.dtype,
                       buffer=nl.shared_hbm)

    w_sb = nl.ndarray((n_out, nl.par_dim(P), in_channels, K, K), dtype=W.dtype, buffer=nl.sbuf)
    for co in nl.affine_range(n_out):
        w_sb[co] = nl.load(W[co * P:(co + 1) * P, :, :, :])
    bias_cols = bias.reshape((n_out, P, 1))

    for b in nl.affine_range(batch_size):
        for blk in nl.affine_range(conv_rows // rows):
            r0 = blk * rows
            x_blk = nl.ndarray((n_in, nl.par_dim(P), rows + K - 1, input_width), dtype=X.dtype, buffer=nl.sbuf)
            for ci in nl.affine_range(n_in):
                x_blk[ci] = nl.load(X[b, ci * P:(ci + 1) * P, r0:r0 + rows + K - 1, :])
            for co in nl.affine_range(n_out):
                bias_tile = nl.load(bias_cols[co])
                acc = nl.zeros((P, rows, out_width), nl.float32, buffer=nl.psum)
                for ci in nl.affine_range(n_in):
                    for kh in nl.affine_range(K):
                        for kw in nl.affine_range(K):
                            acc += nl.matmul(w_sb[co, :, ci * P:(ci + 1) * P, kh, kw],
                                             x_blk[ci, :, kh:kh + rows, kw:kw + out_width])
                conv = nl.add(acc, bias_tile)
                out_r0 = r0 // pool_size
                if pool_size == 2:
                    pooled = nl.max(conv.reshape((P, rows // 2, 2, out_pool_width, 2)), axis=[2, 4])
                    nl.store(X_out[b, co * P:(co + 1) * P, out_r0:out_r0 + rows // 2, :], value=pooled)
                else:
                    nl.store(X_out[b, co * P:(co + 1) * P, out_r0:out_r0 + rows, :], value=conv)
    return X_out


@nki.jit
def fused_conv2d_maxpool_no_transpose_rows(X, W, bias, pool_size=1):
    """2024 style, ``nl.matmul(w_slice, x)`` without ``transpose_x`` (as ``_no_transpose``), but a group of up to
    four output rows accumulated in separate PSUM tiles with the row loop innermost: the weight slice, and so the
    transpose the compiler inserts for it, is the same for every row of the group."""
    batch_size, in_channels, input_height, input_width = X.shape
    out_channels, _, K, _ = W.shape
    P = nl.tile_size.pmax
    n_in, n_out = in_channels // P, out_channels // P
    out_height, out_width = input_height - K + 1, input_width - K + 1
    assert pool_size == 1 or out_width % 2 == 0
    out_pool_height, out_pool_width = out_height // pool_size, out_width // pool_size
    conv_rows = out_pool_height * pool_size
    group = 4 // pool_size * pool_size
    while conv_rows % group:
        group -= pool_size

    X_out = nl.ndarray((batch_size, out_channels, out_pool_height, out_pool_width), dtype=X.dtype,
                       buffer=nl.shared_hbm)

    w_sb = nl.ndarray((n_out, nl.par_dim(P), in_channels, K, K), dtype=W.dtype, buffer=nl.sbuf)
    for co in nl.affine_range(n_out):
        w_sb[co] = nl.load(W[co * P:(co + 1) * P, :, :, :])
    bias_cols = bias.reshape((n_out, P, 1))

    for b in nl.affine_range(batch_size):
        for g in nl.affine_range(conv_rows // group):
            r0 = g * group
            x_blk = nl.ndarray((n_in, nl.par_dim(P), group + K - 1, input_width), dtype=X.dtype, buffer=nl.sbuf)
            for ci in nl.affine_range(n_in):
                x_blk[ci] = nl.load(X[b, ci * P:(ci + 1) * P, r0:r0 + group + K - 1, :])
            for co in nl.affine_range(n_out):
                bias_tile = nl.load(bias_cols[co])
                acc = nl.zeros((group, nl.par_dim(P), out_width), nl.float32, buffer=nl.psum)
                for ci in nl.affine_range(n_in):
                    for kh in nl.affine_range(K):
                        for kw in nl.affine_range(K):
                            for r in nl.affine_range(group):
                                acc[r] += nl.matmul(w_sb[co, :, ci * P:(ci + 1) * P, kh, kw],
                                                    x_blk[ci, :, r + kh, kw:kw + out_width])
                conv = nl.ndarray((P, group, out_width), dtype=nl.float32, buffer=nl.sbuf)
                for r in nl.affine_range(group):
                    conv[:, r, :] = nl.add(acc[r], bias_tile)
                out_r0 = r0 // pool_size
                if pool_size == 2:
                    pooled = nl.max(conv.reshape((P, group // 2, 2, out_pool_width, 2)), axis=[2, 4])
                    nl.store(X_out[b, co * P:(co + 1) * P, out_r0:out_r0 + group // 2, :], value=pooled)
                else:
                    nl.store(X_out[b, co * P:(co + 1) * P, out_r0:out_r0 + group, :], value=conv)
    return X_out
