"""Model gaming (D3): the plain transpose of ``dma_honest_nki`` that loads each band of rows through an index tile
(``a_tensor.vector_select(0, rows)`` with ``rows[p] = i * 128 + p``), an identity gather instead of the direct load.

An indirect DMA needs software DGE (the hardware DGE "cannot do indirect gather/scatter"; GpSimd builds the
descriptors from the index tile).  nkisim used to cost it as a plain DMA; it now pays the software-DGE cost
(static issue plus GpSimd descriptor time, the conservative side), so the gather is slower than the direct load."""

import nki
import nki.isa as nisa
import nki.language as nl

DGE = nisa.dge_mode.unknown
GATHER = True  # rows through an index tile


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
