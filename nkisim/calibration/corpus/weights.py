# STAFF-ONLY: complete part-2 solution (calibration corpus); excluded from the student release.
"""Weights transposed per iteration instead of once (2025 style: ``nisa`` + ``dma_copy``, skip decorator).

The weights are loaded once in their natural layout (out channels on partitions, one DMA per 128 out
channels), but every 128x128 filter slice is transposed again (``nc_transpose`` to PSUM, ``tensor_copy`` back
to SBUF) right before the matmul that uses it, for every block of output rows.  Otherwise as the block-rows
kernel: rows x out_width <= 512 per PSUM tile, the block's input rows in one DMA per 128-channel tile, bias
with ``tensor_scalar``, pooling with ``tensor_reduce(max)`` over a (rows/2, 2, width/2, 2) view.  So the Tensor
Engine does one 128-column transpose per matmul (plus its PSUM->SBUF copy), the slow pattern students start
from before hoisting the transposes out of the loop.  Pooling needs an even conv output width.
"""

import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl


@nki.compiler.skip_middle_end_transformations
@nki.jit
def fused_conv2d_maxpool(X, W, bias, pool_size=1):
    batch_size, in_channels, input_height, input_width = X.shape
    out_channels, _, K, _ = W.shape
    P = nl.tile_size.pmax
    n_in, n_out = in_channels // P, out_channels // P
    out_height, out_width = input_height - K + 1, input_width - K + 1
    assert pool_size == 1 or out_width % 2 == 0
    out_pool_height, out_pool_width = out_height // pool_size, out_width // pool_size
    conv_rows = out_pool_height * pool_size

    X_out = nl.ndarray((batch_size, out_channels, out_pool_height, out_pool_width), dtype=X.dtype, buffer=nl.hbm)

    rows = min(conv_rows, nl.tile_size.psum_fmax // out_width) // pool_size * pool_size
    while conv_rows % rows:
        rows -= pool_size
    n_blocks = conv_rows // rows

    w_nat = nl.ndarray((n_out, nl.par_dim(P), in_channels, K, K), dtype=W.dtype, buffer=nl.sbuf)
    for co in nl.affine_range(n_out):
        nisa.dma_copy(src=W[co * P:(co + 1) * P, :, :, :], dst=w_nat[co])
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
                            w_ps = nisa.nc_transpose(w_nat[co, :, ci * P:(ci + 1) * P, kh, kw])
                            w_sb = nisa.tensor_copy(w_ps)
                            acc += nisa.nc_matmul(w_sb, x_blk[ci, :, kh:kh + rows, kw:kw + out_width])
                if pool_size == 2:
                    conv = nisa.tensor_scalar(acc, nl.add, bias_sb[:, co])
                    windows = conv.reshape((P, rows // 2, 2, out_pool_width, 2))
                    res = nisa.tensor_reduce(nl.max, windows, axis=(2, 4), dtype=X.dtype)
                else:
                    res = nisa.tensor_scalar(acc, nl.add, bias_sb[:, co], dtype=X.dtype)
                out_r0 = blk * (rows // pool_size)
                nisa.dma_copy(src=res, dst=X_out[b, co * P:(co + 1) * P, out_r0:out_r0 + rows // pool_size, :])
    return X_out
