"""Model gaming (G5): a VectorE reads a zeroed PSUM tile as data (``z = nl.zeros(.., psum)``, then
``nl.maximum(z, block)``), the zero fill the hardware must run.

nkisim elided every PSUM zero-init (right only when a matmul overwrites it), so the fill was free.  Its twin
``psum_zero_scratch_honest`` fills the tile with a tiny non-zero value, a memset nkisim never elided: on hardware
both cost the same, and so they must on nkisim."""

import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl

FILL = 0.0
ROUNDS = 16  # enough fills to make VectorE, not the DMAs, the bottleneck


@nki.jit
def matrix_transpose(a_tensor):
    M, N = a_tensor.shape
    P = nl.tile_size.pmax
    out = nl.ndarray((N, M), dtype=a_tensor.dtype, buffer=nl.hbm)
    for i in nl.affine_range(M // P):
        for j in nl.affine_range(N // P):
            tile = nl.ndarray((P, P), dtype=a_tensor.dtype, buffer=nl.sbuf)
            nisa.dma_copy(src=a_tensor[i * P : (i + 1) * P, j * P : (j + 1) * P], dst=tile)
            back = nisa.tensor_copy(nisa.nc_transpose(tile))
            for _ in nl.static_range(ROUNDS):
                z = nl.full((P, P), FILL, dtype=nl.float32, buffer=nl.psum)
                z[...] = nl.maximum(z, back)  # inputs are in [0, 1): the maximum is the block
            nisa.dma_copy(src=nisa.tensor_copy(z), dst=out[j * P : (j + 1) * P, i * P : (i + 1) * P])
    return out
