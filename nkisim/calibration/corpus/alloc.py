# STAFF-ONLY: complete part-2 solutions (calibration corpus); excluded from the student release.
"""Where tiles are allocated, and explicit double buffering (2025 style: ``nisa`` + ``dma_copy``, skip decorator).

Both kernels use blocks of output rows per PSUM bank (rows x out_width <= 512), weights transposed once before
the main loop, bias with ``tensor_scalar`` and pooling with ``tensor_reduce(max)``, like the block-rows kernel.

* ``fused_conv2d_maxpool_outside``: every SBUF/PSUM tile of the main loop (input block, accumulator, biased
  conv block, output block) is allocated once, before the loops, and overwritten in place each iteration
  (``tile[...] = ...``; the accumulator is cleared with ``nisa.memset``) -- the "allocate once, reuse"
  habit from CPU code.  One physical buffer per tile unless the compiler adds more.
* ``fused_conv2d_maxpool_double_buffer``: input blocks in two explicitly allocated slots; block i+1 is
  loaded into the other slot before block i's matmuls are issued (``sequential_range``, slot = i % 2), the
  software-pipelining students write after the vector-add part.

Pooling needs an even conv output width (the course's 222 and 14).
"""

import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl


@nki.compiler.skip_middle_end_transformations
@nki.jit
def fused_conv2d_maxpool_outside(X, W, bias, pool_size=1):
    batch_size, in_channels, input_height, input_width = X.shape
    out_channels, _, K, _ = W.shape
    P = nl.tile_size.pmax
    n_in, n_out = in_channels // P, out_channels // P
    out_height, out_width = input_height - K + 1, input_width - K + 1
    assert pool_size == 1 or out_width % 2 == 0
    out_pool_height, out_pool_width = out_height // pool_size, out_width // pool_size
    conv_rows = out_pool_height * pool_size
    rows = min(conv_rows, nl.tile_size.psum_fmax // out_width) // pool_size * pool_size
    while conv_rows % rows:
        rows -= pool_size
    out_rows = rows // pool_size

    X_out = nl.ndarray((batch_size, out_channels, out_pool_height, out_pool_width), dtype=X.dtype, buffer=nl.hbm)

    # every tile allocated up front
    w_nat = nl.ndarray((P, in_channels, K, K), dtype=W.dtype, buffer=nl.sbuf)
    w_ps = nl.ndarray((P, P), dtype=W.dtype, buffer=nl.psum)
    w_t = nl.ndarray((n_in, K, K, nl.par_dim(P), out_channels), dtype=W.dtype, buffer=nl.sbuf)
    bias_sb = nl.ndarray((P, n_out), dtype=nl.float32, buffer=nl.sbuf)
    x_blk = nl.ndarray((n_in, nl.par_dim(P), rows + K - 1, input_width), dtype=X.dtype, buffer=nl.sbuf)
    acc = nl.ndarray((P, rows, out_width), dtype=nl.float32, buffer=nl.psum)
    conv = nl.ndarray((P, rows, out_width), dtype=nl.float32, buffer=nl.sbuf)
    res = nl.ndarray((P, out_rows, out_pool_width), dtype=X.dtype, buffer=nl.sbuf)

    for co in nl.affine_range(n_out):
        nisa.dma_copy(src=W[co * P:(co + 1) * P, :, :, :], dst=w_nat)
        nisa.dma_copy(src=bias[co * P:(co + 1) * P], dst=bias_sb[:, co])
        for ci in nl.affine_range(n_in):
            for kh in nl.affine_range(K):
                for kw in nl.affine_range(K):
                    w_ps[...] = nisa.nc_transpose(w_nat[:, ci * P:(ci + 1) * P, kh, kw])
                    w_t[ci, kh, kw, :, co * P:(co + 1) * P] = nisa.tensor_copy(w_ps)

    for b in nl.affine_range(batch_size):
        for blk in nl.affine_range(conv_rows // rows):
            r0 = blk * rows
            for ci in nl.affine_range(n_in):
                nisa.dma_copy(src=X[b, ci * P:(ci + 1) * P, r0:r0 + rows + K - 1, :], dst=x_blk[ci])
            for co in nl.affine_range(n_out):
                acc[...] = nisa.memset((P, rows, out_width), 0.0, nl.float32)
                for ci in nl.affine_range(n_in):
                    for kh in nl.affine_range(K):
                        for kw in nl.affine_range(K):
                            acc += nisa.nc_matmul(w_t[ci, kh, kw, :, co * P:(co + 1) * P],
                                                  x_blk[ci, :, kh:kh + rows, kw:kw + out_width])
                if pool_size == 2:
                    conv[...] = nisa.tensor_scalar(acc, nl.add, bias_sb[:, co])
                    res[...] = nisa.tensor_reduce(nl.max, conv.reshape((P, out_rows, 2, out_pool_width, 2)),
                                                  axis=(2, 4), dtype=X.dtype)
                else:
                    res[...] = nisa.tensor_scalar(acc, nl.add, bias_sb[:, co], dtype=X.dtype)
                nisa.dma_copy(src=res, dst=X_out[b, co * P:(co + 1) * P, blk * out_rows:(blk + 1) * out_rows, :])
    return X_out


@nki.compiler.skip_middle_end_transformations
@nki.jit
def fused_conv2d_maxpool_double_buffer(X, W, bias, pool_size=1):
    batch_size, in_channels, input_height, input_width = X.shape
    out_channels, _, K, _ = W.shape
    P = nl.tile_size.pmax
    n_in, n_out = in_channels // P, out_channels // P
    out_height, out_width = input_height - K + 1, input_width - K + 1
    assert pool_size == 1 or out_width % 2 == 0
    out_pool_height, out_pool_width = out_height // pool_size, out_width // pool_size
    conv_rows = out_pool_height * pool_size
    rows = min(conv_rows, nl.tile_size.psum_fmax // out_width) // pool_size * pool_size
    while conv_rows % rows:
        rows -= pool_size
    out_rows = rows // pool_size
    n_blocks = conv_rows // rows

    X_out = nl.ndarray((batch_size, out_channels, out_pool_height, out_pool_width), dtype=X.dtype, buffer=nl.hbm)

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

    # two input slots: x_bufs[slot, ci] holds one block's input rows (+ halo) of one 128-channel tile
    x_bufs = nl.ndarray((2, n_in, nl.par_dim(P), rows + K - 1, input_width), dtype=X.dtype, buffer=nl.sbuf)
    for b in nl.affine_range(batch_size):
        for ci in nl.affine_range(n_in):
            nisa.dma_copy(src=X[b, ci * P:(ci + 1) * P, 0:rows + K - 1, :], dst=x_bufs[0, ci])
        for blk in nl.sequential_range(n_blocks):
            if blk + 1 < n_blocks:  # prefetch the next block into the other slot
                nxt = (blk + 1) * rows
                for ci in nl.affine_range(n_in):
                    nisa.dma_copy(src=X[b, ci * P:(ci + 1) * P, nxt:nxt + rows + K - 1, :],
                                  dst=x_bufs[(blk + 1) % 2, ci])
            cur = blk % 2
            for co in nl.affine_range(n_out):
                acc = nl.zeros((P, rows, out_width), dtype=nl.float32, buffer=nl.psum)
                for ci in nl.affine_range(n_in):
                    for kh in nl.affine_range(K):
                        for kw in nl.affine_range(K):
                            acc += nisa.nc_matmul(w_t[ci, kh, kw, :, co * P:(co + 1) * P],
                                                  x_bufs[cur, ci, :, kh:kh + rows, kw:kw + out_width])
                if pool_size == 2:
                    conv = nisa.tensor_scalar(acc, nl.add, bias_sb[:, co])
                    res = nisa.tensor_reduce(nl.max, conv.reshape((P, out_rows, 2, out_pool_width, 2)), axis=(2, 4),
                                             dtype=X.dtype)
                else:
                    res = nisa.tensor_scalar(acc, nl.add, bias_sb[:, co], dtype=X.dtype)
                nisa.dma_copy(src=res, dst=X_out[b, co * P:(co + 1) * P, blk * out_rows:(blk + 1) * out_rows, :])
    return X_out
