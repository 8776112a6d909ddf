# STAFF-ONLY: a correct conv2d (a test fixture); excluded from the student release.
"""Model gaming (G3): the plain conv of ``conv_honest`` with ``is_moving_onezero=True`` on every fp32 matmul.

The moving tiles are image rows, not zeros and ones.  nkisim costed the hinted fp32 matmuls at 2x and computed
exact products; on Trainium the product is not the fp32 one (no credit), and nkisim now fails the kernel."""

import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl

HINT = {"is_moving_onezero": True}


@nki.jit
def fused_conv2d_maxpool(X, W, bias, pool_size=1):
    batch, in_channels, height, width = X.shape
    out_channels, _, k, _ = W.shape
    assert pool_size == 1, "this test kernel has no pooling"
    P = nl.tile_size.pmax
    out_h, out_w = height - k + 1, width - k + 1
    ci_tiles, co_tiles, taps = in_channels // P, out_channels // P, k * k
    out = nl.ndarray((batch, out_channels, out_h, out_w), dtype=X.dtype, buffer=nl.hbm)

    w_t = nl.ndarray((P, ci_tiles, taps, out_channels), dtype=W.dtype, buffer=nl.sbuf)
    w_rows = W.reshape((out_channels, in_channels * taps))
    for co in nl.affine_range(co_tiles):
        w_nat = nl.ndarray((P, in_channels, taps), dtype=W.dtype, buffer=nl.sbuf)
        nisa.dma_copy(src=w_rows[co * P : (co + 1) * P, :], dst=w_nat.reshape((P, in_channels * taps)))
        for ci in nl.affine_range(ci_tiles):
            for t in nl.affine_range(taps):
                w_t[:, ci, t, co * P : (co + 1) * P] = nisa.nc_transpose(w_nat[:, ci * P : (ci + 1) * P, t])
    bias_sb = nl.ndarray((P, co_tiles), dtype=nl.float32, buffer=nl.sbuf)
    bias_rows = bias.reshape((co_tiles, P))
    for co in nl.affine_range(co_tiles):
        nisa.dma_copy(src=bias_rows[co], dst=bias_sb[:, co : co + 1])

    for b in nl.affine_range(batch):
        x = nl.ndarray((P, ci_tiles, height, width), dtype=X.dtype, buffer=nl.sbuf)
        for ci in nl.affine_range(ci_tiles):
            nisa.dma_copy(src=X[b, ci * P : (ci + 1) * P, :, :], dst=x[:, ci, :, :])
        for co in nl.affine_range(co_tiles):
            res = nl.ndarray((P, out_h, out_w), dtype=X.dtype, buffer=nl.sbuf)
            for r in nl.affine_range(out_h):
                acc = nl.ndarray((P, out_w), dtype=nl.float32, buffer=nl.psum)
                for ci in nl.affine_range(ci_tiles):
                    for p in nl.affine_range(k):
                        for q in nl.affine_range(k):
                            acc += nisa.nc_matmul(
                                w_t[:, ci, p * k + q, co * P : (co + 1) * P], x[:, ci, r + p, q : q + out_w], **HINT
                            )
                res[:, r, :] = nisa.tensor_scalar(acc, nl.add, bias_sb[:, co : co + 1], dtype=X.dtype)
            nisa.dma_copy(src=res, dst=out[b, co * P : (co + 1) * P, :, :])
    return out
