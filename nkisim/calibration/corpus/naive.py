# STAFF-ONLY: complete part-2 solutions (calibration corpus); excluded from the student release.
"""Conv kernels that move weights element by element (2025 style: ``nisa`` ISA calls, ``nisa.dma_copy``, the skip
decorator), written from issue 27's descriptions of held-out student kernels.

* ``fused_conv2d_maxpool_weight_slices``: blocks of output rows per PSUM tile as the staff kernel, but every
  128 x 128 weight slice ``W[o0:o1, i0:i1, kh, kw]`` is loaded straight from the OIHW weight tensor inside the
  loops, for every block: each element is its own 2-4-byte run in HBM (stride K*K elements), thousands of such
  DMAs; the slice is transposed on TensorE and copied back to SBUF before its matmul.
* ``fused_conv2d_maxpool_naive``: the naive baseline: one output row per PSUM tile and fresh DMAs for both
  operands at every filter position (the shifted input row and the element-granular weight slice).

Pooling needs an even conv output width (the course's 222 and 14).
"""

import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl


def _bias_pool_store(X_out, acc, bias_sb, b, co, out_r0, rows, out_width, pool_size):
    """PSUM -> SBUF with the bias added on VectorE, max-pool over row pairs and column pairs, store."""
    P = nl.tile_size.pmax
    conv = nisa.tensor_scalar(acc, nl.add, bias_sb[:, co])
    if pool_size == 2:
        rmax = nisa.tensor_tensor(conv[:, 0:rows:2, :], conv[:, 1:rows:2, :], op=nl.maximum)
        out = nisa.tensor_tensor(rmax[:, :, 0:out_width:2], rmax[:, :, 1:out_width:2], op=nl.maximum,
                                 dtype=X_out.dtype)
        nisa.dma_copy(src=out, dst=X_out[b, co * P:(co + 1) * P, out_r0:out_r0 + rows // 2, :])
    else:
        out = nisa.tensor_copy(conv, dtype=X_out.dtype)
        nisa.dma_copy(src=out, dst=X_out[b, co * P:(co + 1) * P, out_r0:out_r0 + rows, :])


def _bias(bias, n_out):
    P = nl.tile_size.pmax
    bias_sb = nl.ndarray((P, n_out), dtype=nl.float32, buffer=nl.sbuf)
    for co in nl.affine_range(n_out):
        nisa.dma_copy(src=bias[co * P:(co + 1) * P], dst=bias_sb[:, co])
    return bias_sb


def _weight_slice(W, co, ci, kh, kw):
    """W[o0:o1, i0:i1, kh, kw] straight from HBM (element-granular), transposed on TensorE, back in SBUF."""
    P = nl.tile_size.pmax
    w_oi = nl.ndarray((P, P), dtype=W.dtype, buffer=nl.sbuf)
    nisa.dma_copy(src=W[co * P:(co + 1) * P, ci * P:(ci + 1) * P, kh, kw], dst=w_oi)
    return nisa.tensor_copy(nisa.nc_transpose(w_oi))


@nki.compiler.skip_middle_end_transformations
@nki.jit
def fused_conv2d_maxpool_weight_slices(X, W, bias, pool_size=1):
    batch_size, in_channels, input_height, input_width = X.shape
    out_channels, _, K, _ = W.shape
    P = nl.tile_size.pmax
    n_in, n_out = in_channels // P, out_channels // P
    out_height, out_width = input_height - K + 1, input_width - K + 1
    out_pool_height, out_pool_width = out_height // pool_size, out_width // pool_size
    conv_rows = out_pool_height * pool_size
    rows = min(conv_rows, 512 // out_width) // pool_size * pool_size
    while conv_rows % rows:
        rows -= pool_size

    X_out = nl.ndarray((batch_size, out_channels, out_pool_height, out_pool_width), dtype=X.dtype,
                       buffer=nl.shared_hbm)
    bias_sb = _bias(bias, n_out)
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
                            acc += nisa.nc_matmul(_weight_slice(W, co, ci, kh, kw),
                                                  x_blk[ci, :, kh:kh + rows, kw:kw + out_width])
                _bias_pool_store(X_out, acc, bias_sb, b, co, r0 // pool_size, rows, out_width, pool_size)
    return X_out


@nki.compiler.skip_middle_end_transformations
@nki.jit
def fused_conv2d_maxpool_naive(X, W, bias, pool_size=1):
    batch_size, in_channels, input_height, input_width = X.shape
    out_channels, _, K, _ = W.shape
    P = nl.tile_size.pmax
    n_in, n_out = in_channels // P, out_channels // P
    out_height, out_width = input_height - K + 1, input_width - K + 1
    out_pool_height, out_pool_width = out_height // pool_size, out_width // pool_size

    X_out = nl.ndarray((batch_size, out_channels, out_pool_height, out_pool_width), dtype=X.dtype,
                       buffer=nl.shared_hbm)
    bias_sb = _bias(bias, n_out)
    for b in nl.affine_range(batch_size):
        for h in nl.affine_range(out_pool_height):
            for co in nl.affine_range(n_out):
                acc = nl.zeros((P, pool_size, out_width), dtype=nl.float32, buffer=nl.psum)
                for r in nl.affine_range(pool_size):
                    row = h * pool_size + r
                    for ci in nl.affine_range(n_in):
                        for kh in nl.affine_range(K):
                            for kw in nl.affine_range(K):
                                x_row = nl.ndarray((P, out_width), dtype=X.dtype, buffer=nl.sbuf)
                                nisa.dma_copy(src=X[b, ci * P:(ci + 1) * P, row + kh, kw:kw + out_width], dst=x_row)
                                acc[:, r, :] += nisa.nc_matmul(_weight_slice(W, co, ci, kh, kw), x_row)
                _bias_pool_store(X_out, acc, bias_sb, b, co, h, pool_size, out_width, pool_size)
    return X_out
