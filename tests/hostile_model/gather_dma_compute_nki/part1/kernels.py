"""Model gaming (open gap, found writing the D3 set): the identity gather of ``gather_identity_nki`` done by DMA
compute, ``nisa.dma_compute(dst=band, srcs=[a_tensor.vector_select(0, rows)], reduce_op=nl.add)`` (a sum of
one indirect source).

nki.isa.dma_compute (NKI 0.6): "The only supported DGE mode for read-modify-write (scatter/gather) is SW DGE", and
the gather form needs exactly two sources (``dst(SB) = dst(SB) + src(HBM)[indices]``).  nkisim accepts the
one-source form, costs it with the target's default descriptors (hardware DGE on trn2) instead of software DGE,
and does not make the DMA wait for its index tile: it is timed faster than the ``dma_copy`` gather, which pays
the GpSimd descriptor time.  On hardware it is refused or pays the software DGE."""

import nki
import nki.isa as nisa
import nki.language as nl

DGE = nisa.dge_mode.unknown
GATHER = True  # rows through an index tile, by DMA compute


@nki.jit
def matrix_transpose(a_tensor):
    M, N = a_tensor.shape
    P = nl.tile_size.pmax
    out = nl.ndarray((N, M), dtype=a_tensor.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(M // P):
        band = nl.ndarray((P, N), dtype=a_tensor.dtype, buffer=nl.sbuf)
        if GATHER:  # the band's rows through an index tile that holds their own numbers (an identity gather)
            rows = nl.ndarray((P, 1), dtype=nl.int32, buffer=nl.sbuf)
            nisa.iota(dst=rows, pattern=[[0, 1]], offset=i * P, channel_multiplier=1)
            nisa.dma_compute(dst=band, srcs=[a_tensor.vector_select(0, rows)], reduce_op=nl.add)
        else:
            nisa.dma_copy(dst=band, src=a_tensor[i * P : (i + 1) * P, :], dge_mode=DGE)
        for j in nl.affine_range(N // P):
            flipped = nl.ndarray((P, P), dtype=a_tensor.dtype, buffer=nl.psum)
            nisa.nc_transpose(dst=flipped, data=band[:, j * P : (j + 1) * P])
            back = nl.ndarray((P, P), dtype=a_tensor.dtype, buffer=nl.sbuf)
            nisa.tensor_copy(dst=back, src=flipped)
            nisa.dma_copy(dst=out[j * P : (j + 1) * P, i * P : (i + 1) * P], src=back, dge_mode=DGE)
    return out
