# STAFF-ONLY: complete part-2 solutions (calibration corpus); excluded from the student release.
"""Two ways of feeding the Tensor Engine rows of the image (2025 style: ``nisa`` + ``dma_copy``, skip decorator).

* ``fused_conv2d_maxpool_row_dma``: one conv output row per PSUM tile, and every input row it needs arrives
  with its own DMA (``in_tiles x 3`` row DMAs of ``width`` elements per partition for each conv row, i.e. each
  input row is loaded three times).  Pooling with two ``tensor_tensor`` maxima (row pair, then even/odd
  columns); bias added on the way out of PSUM with ``tensor_scalar``.
* ``fused_conv2d_maxpool_block_rows``: as many output rows as fit in one PSUM bank (rows x out_width <= 512
  fp32: 2 rows at 224x224, 30 at 32x16) per matmul, the block's input rows (+2 halo rows) in one DMA per
  128-channel tile; pooling with ``tensor_reduce(max)`` over a (rows/2, 2, width/2, 2) view.

Both transpose the weights once, before the main loop (``nc_transpose`` + ``tensor_copy`` per 128x128 slice).
Pooling needs an even conv output width (the course's 222 and 14).
"""

import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl


@nki.compiler.skip_middle_end_transformations
@nki.jit
def fused_conv2d_maxpool_row_dma(X, W, bias, pool_size=1):
    batch_size, in_channels, input_height, input_width = X.shape
    out_channels, _, K, _ = W.shape
    P = nl.tile_size.pmax
    n_in, n_out = in_channels // P, out_channels // P
    out_height, out_width = input_height - K + 1, input_width - K + 1
    assert pool_size == 1 or out_width % 2 == 0
    out_pool_height, out_pool_width = out_height // pool_size, out_width // pool_size

    X_out = nl.ndarray((batch_size, out_channels, out_pool_height, out_pool_width), dtype=X.dtype, buffer=nl.hbm)

    # weights: one DMA per (out tile, in tile), then every 3x3 slice transposed once
    w_t = nl.ndarray((n_in, K, K, nl.par_dim(P), out_channels), dtype=W.dtype, buffer=nl.sbuf)
    for co in nl.affine_range(n_out):
        for ci in nl.affine_range(n_in):
            w_nat = nl.ndarray((P, P, K, K), dtype=W.dtype, buffer=nl.sbuf)
            nisa.dma_copy(src=W[co * P:(co + 1) * P, ci * P:(ci + 1) * P, :, :], dst=w_nat)
            for kh in nl.affine_range(K):
                for kw in nl.affine_range(K):
                    w_ps = nisa.nc_transpose(w_nat[:, :, kh, kw])
                    w_t[ci, kh, kw, :, co * P:(co + 1) * P] = nisa.tensor_copy(w_ps)
    bias_sb = nl.ndarray((P, n_out), dtype=nl.float32, buffer=nl.sbuf)
    for co in nl.affine_range(n_out):
        nisa.dma_copy(src=bias[co * P:(co + 1) * P], dst=bias_sb[:, co])

    for b in nl.affine_range(batch_size):
        for h in nl.affine_range(out_pool_height):
            conv = nl.ndarray((n_out, nl.par_dim(P), pool_size, out_width), dtype=nl.float32, buffer=nl.sbuf)
            for r in nl.affine_range(pool_size):
                row = h * pool_size + r
                # the K input rows of this conv row, one DMA per row and 128-channel tile
                x_rows = nl.ndarray((n_in, K, nl.par_dim(P), input_width), dtype=X.dtype, buffer=nl.sbuf)
                for ci in nl.affine_range(n_in):
                    for kh in nl.affine_range(K):
                        nisa.dma_copy(src=X[b, ci * P:(ci + 1) * P, row + kh, :], dst=x_rows[ci, kh])
                for co in nl.affine_range(n_out):
                    acc = nl.zeros((P, out_width), dtype=nl.float32, buffer=nl.psum)
                    for ci in nl.affine_range(n_in):
                        for kh in nl.affine_range(K):
                            for kw in nl.affine_range(K):
                                acc += nisa.nc_matmul(w_t[ci, kh, kw, :, co * P:(co + 1) * P],
                                                      x_rows[ci, kh, :, kw:kw + out_width])
                    conv[co, :, r, :] = nisa.tensor_scalar(acc, nl.add, bias_sb[:, co])
            for co in nl.affine_range(n_out):
                if pool_size == 2:
                    rmax = nisa.tensor_tensor(conv[co, :, 0, :], conv[co, :, 1, :], op=nl.maximum)
                    out_row = nisa.tensor_tensor(rmax[:, 0:out_width:2], rmax[:, 1:out_width:2], op=nl.maximum,
                                                 dtype=X.dtype)
                else:
                    out_row = nisa.tensor_copy(conv[co, :, 0, :], dtype=X.dtype)
                nisa.dma_copy(src=out_row, dst=X_out[b, co * P:(co + 1) * P, h, :])
    return X_out


@nki.compiler.skip_middle_end_transformations
@nki.jit
def fused_conv2d_maxpool_block_rows(X, W, bias, pool_size=1):
    batch_size, in_channels, input_height, input_width = X.shape
    out_channels, _, K, _ = W.shape
    P = nl.tile_size.pmax
    n_in, n_out = in_channels // P, out_channels // P
    out_height, out_width = input_height - K + 1, input_width - K + 1
    assert pool_size == 1 or out_width % 2 == 0
    out_pool_height, out_pool_width = out_height // pool_size, out_width // pool_size
    conv_rows = out_pool_height * pool_size

    X_out = nl.ndarray((batch_size, out_channels, out_pool_height, out_pool_width), dtype=X.dtype, buffer=nl.hbm)

    # rows per PSUM bank: the largest multiple of pool_size with rows * out_width <= 512 that divides conv_rows
    rows = min(conv_rows, nl.tile_size.psum_fmax // out_width) // pool_size * pool_size
    while conv_rows % rows:
        rows -= pool_size
    n_blocks = conv_rows // rows

    w_t = nl.ndarray((n_in, K, K, nl.par_dim(P), out_channels), dtype=W.dtype, buffer=nl.sbuf)
    for co in nl.affine_range(n_out):
        w_nat = nl.ndarray((P, in_channels, K, K), dtype=W.dtype, buffer=nl.sbuf)
        nisa.dma_copy(src=W[co * P:(co + 1) * P, :, :, :], dst=w_nat)
        for ci in nl.affine_range(n_in):
            for kh in nl.affine_range(K):
                for kw in nl.affine_range(K):
                    w_ps = nisa.nc_transpose(w_nat[:, ci * P:(ci + 1) * P, kh, kw])
                    w_t[ci, kh, kw, :, co * P:(co + 1) * P] = nisa.tensor_copy(w_ps)
    bias_sb = nl.ndarray((P, n_out), dtype=nl.float32, buffer=nl.sbuf)
    for co in nl.affine_range(n_out):
        nisa.dma_copy(src=bias[co * P:(co + 1) * P], dst=bias_sb[:, co])

    for b in nl.affine_range(batch_size):
        for blk in nl.affine_range(n_blocks):
            r0 = blk * rows
            x_blk = nl.ndarray((n_in, nl.par_dim(P), rows + K - 1, input_width), dtype=X.dtype, buffer=nl.sbuf)
            for ci in nl.affine_range(n_in):
                nisa.dma_copy(src=X[b, ci * P:(ci + 1) * P, r0:r0 + rows + K - 1, :], dst=x_blk[ci])
            for co in nl.affine_range(n_out):
                acc = nl.zeros((P, rows, out_width), dtype=nl.float32, buffer=nl.psum)
                for ci in nl.affine_range(n_in):
                    for kh in nl.affine_range(K):
                        for kw in nl.affine_range(K):
                            acc += nisa.nc_matmul(w_t[ci, kh, kw, :, co * P:(co + 1) * P],
                                                  x_blk[ci, :, kh:kh + rows, kw:kw + out_width])
                if pool_size == 2:
                    conv = nisa.tensor_scalar(acc, nl.add, bias_sb[:, co])
                    windows = conv.reshape((P, rows // 2, 2, out_pool_width, 2))
                    res = nisa.tensor_reduce(nl.max, windows, axis=(2, 4), dtype=X.dtype)
                else:
                    res = nisa.tensor_scalar(acc, nl.add, bias_sb[:, co], dtype=X.dtype)
                out_r0 = blk * (rows // pool_size)
                nisa.dma_copy(src=res, dst=X_out[b, co * P:(co + 1) * P, out_r0:out_r0 + rows // pool_size, :])
    return X_out
