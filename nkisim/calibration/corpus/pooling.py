# STAFF-ONLY: complete part-2 solutions (calibration corpus); excluded from the student release.
"""Pooling with ``tensor_tensor`` maxima, and a whole image kept in SBUF (2025 style, skip decorator).

* ``fused_conv2d_maxpool_tt_pool``: blocks of output rows per PSUM bank (rows x out_width <= 512), weights
  transposed once.  Evacuation: with pooling, a ``tensor_copy`` of the PSUM tile to SBUF (``tensor_tensor``
  may not read both operands from PSUM), ``tensor_tensor(max)`` of its even and odd rows, then
  ``tensor_tensor(max)`` of the even and odd columns, then the bias added on ScalarE
  (``activation(copy, bias=...)``, cast to the output dtype); without pooling a single ``activation`` with the
  bias.  Max-pool before the bias is exact (the bias is constant over a window).  Input blocks arrive with one
  DMA per 128-channel tile; the pooled block leaves with one DMA per out-channel tile.
* ``fused_conv2d_maxpool_whole_image``: the whole input image (both 128-channel tiles) loaded into SBUF with one
  DMA per tile before the main loop, then every block of output rows computed from it.  Only for images that fit
  in SBUF: the 32x16 image (16 KiB per partition in fp32).  The 224x224 image needs 392 KiB (fp32) or 196 KiB
  (fp16) per partition, more than a partition's 192 KiB of SBUF, so a student writing this style has to fall
  back to row blocks there; the kernel refuses such shapes with an assertion.

Pooling needs an even conv output width (the course's 222 and 14).
"""

import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl

SBUF_BYTES_PER_PARTITION = 192 * 1024  # trn2: 24 MiB over 128 partitions (trn1: the same)


@nki.compiler.skip_middle_end_transformations
@nki.jit
def fused_conv2d_maxpool_tt_pool(X, W, bias, pool_size=1):
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
        for blk in nl.affine_range(conv_rows // rows):
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
                    conv = nisa.tensor_copy(acc)  # tensor_tensor may not read both operands from PSUM
                    row_max = nisa.tensor_tensor(conv[:, 0:rows:2, :], conv[:, 1:rows:2, :], op=nl.maximum)
                    pooled = nisa.tensor_tensor(row_max[:, :, 0:out_width:2], row_max[:, :, 1:out_width:2],
                                                op=nl.maximum)
                    res = nisa.activation(op=nl.copy, data=pooled, bias=bias_sb[:, co], scale=1.0, dtype=X.dtype)
                else:
                    res = nisa.activation(op=nl.copy, data=acc, bias=bias_sb[:, co], scale=1.0, dtype=X.dtype)
                nisa.dma_copy(src=res, dst=X_out[b, co * P:(co + 1) * P, blk * out_rows:(blk + 1) * out_rows, :])
    return X_out


@nki.compiler.skip_middle_end_transformations
@nki.jit
def fused_conv2d_maxpool_whole_image(X, W, bias, pool_size=1):
    batch_size, in_channels, input_height, input_width = X.shape
    out_channels, _, K, _ = W.shape
    P = nl.tile_size.pmax
    n_in, n_out = in_channels // P, out_channels // P
    image_bytes = n_in * input_height * input_width * X.itemsize
    assert image_bytes < SBUF_BYTES_PER_PARTITION // 2, (
        f"whole-image kernel: the image needs {image_bytes} bytes per partition of SBUF, too many")
    out_height, out_width = input_height - K + 1, input_width - K + 1
    assert pool_size == 1 or out_width % 2 == 0
    out_pool_height, out_pool_width = out_height // pool_size, out_width // pool_size
    conv_rows = out_pool_height * pool_size
    rows = min(conv_rows, nl.tile_size.psum_fmax // out_width) // pool_size * pool_size
    while conv_rows % rows:
        rows -= pool_size
    out_rows = rows // pool_size

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

    for b in nl.affine_range(batch_size):
        x_img = nl.ndarray((n_in, nl.par_dim(P), input_height, input_width), dtype=X.dtype, buffer=nl.sbuf)
        for ci in nl.affine_range(n_in):
            nisa.dma_copy(src=X[b, ci * P:(ci + 1) * P, :, :], dst=x_img[ci])
        for blk in nl.affine_range(conv_rows // rows):
            r0 = blk * rows
            for co in nl.affine_range(n_out):
                acc = nl.zeros((P, rows, out_width), dtype=nl.float32, buffer=nl.psum)
                for ci in nl.affine_range(n_in):
                    for kh in nl.affine_range(K):
                        for kw in nl.affine_range(K):
                            acc += nisa.nc_matmul(w_t[ci, kh, kw, :, co * P:(co + 1) * P],
                                                  x_img[ci, :, r0 + kh:r0 + kh + rows, kw:kw + out_width])
                if pool_size == 2:
                    conv = nisa.tensor_scalar(acc, nl.add, bias_sb[:, co])
                    res = nisa.tensor_reduce(nl.max, conv.reshape((P, out_rows, 2, out_pool_width, 2)), axis=(2, 4),
                                             dtype=X.dtype)
                else:
                    res = nisa.tensor_scalar(acc, nl.add, bias_sb[:, co], dtype=X.dtype)
                nisa.dma_copy(src=res, dst=X_out[b, co * P:(co + 1) * P, blk * out_rows:(blk + 1) * out_rows, :])
    return X_out
