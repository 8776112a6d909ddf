"""Model gaming (D2): the plain transpose of ``dma_honest_nki`` with ``dge_mode=nisa.dge_mode.swdge`` on every DMA.

Software DGE builds the descriptors on GpSimd ("uses GpSimd cycles", cost not quantified: DGE reference).  nkisim
used to time it as the hardware DGE; it now charges the static issue plus GpSimd descriptor time (the
conservative side), so the mode can buy nothing: the kernel is slower than its twin."""

import nki
import nki.isa as nisa
import nki.language as nl

DGE = nisa.dge_mode.swdge  # software DGE: GpSimd writes the descriptors
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
