"""Honest twin of the DMA-descriptor submissions (``dge_none_nki``, ``dge_swdge_nki``, ``gather_identity_nki``):
a plain current-API transpose, one load per band of 128 rows, ``nc_transpose`` per 128 x 128 block, a PSUM copy
and one store per block (20 DMAs on 512 x 512), every DMA with the compiler's descriptor mode.  Its copies change
only the constants below."""

import nki
import nki.isa as nisa
import nki.language as nl

DGE = nisa.dge_mode.unknown  # the compiler's choice (hardware DGE on trn2)
GATHER = False


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
            nisa.dma_copy(dst=band, src=a_tensor.vector_select(0, rows))
        else:
            nisa.dma_copy(dst=band, src=a_tensor[i * P : (i + 1) * P, :], dge_mode=DGE)
        for j in nl.affine_range(N // P):
            flipped = nl.ndarray((P, P), dtype=a_tensor.dtype, buffer=nl.psum)
            nisa.nc_transpose(dst=flipped, data=band[:, j * P : (j + 1) * P])
            back = nl.ndarray((P, P), dtype=a_tensor.dtype, buffer=nl.sbuf)
            nisa.tensor_copy(dst=back, src=flipped)
            nisa.dma_copy(dst=out[j * P : (j + 1) * P, i * P : (i + 1) * P], src=back, dge_mode=DGE)
    return out
