"""Model gaming (G1): evacuates each transposed block from PSUM with ``tensor_tensor(zero_column, block, add)``.

The [128, 1] zero column placed first made nkisim cost the instruction for one element per partition instead of
the block's 128, so the evacuations were nearly free; on hardware VectorE streams all 128.  Its twin
``broadcast_first_honest`` puts the column second.  Both must score the same."""

import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl


@nki.jit
def matrix_transpose(a_tensor):
    M, N = a_tensor.shape
    P = nl.tile_size.pmax
    out = nl.ndarray((N, M), dtype=a_tensor.dtype, buffer=nl.hbm)
    zero = nisa.memset((P, 1), 0.0, a_tensor.dtype)
    for i in nl.affine_range(M // P):
        for j in nl.affine_range(N // P):
            tile = nl.ndarray((P, P), dtype=a_tensor.dtype, buffer=nl.sbuf)
            nisa.dma_copy(src=a_tensor[i * P : (i + 1) * P, j * P : (j + 1) * P], dst=tile)
            flipped = nisa.nc_transpose(tile)
            back = nisa.tensor_tensor(zero, flipped, nl.add)
            nisa.dma_copy(src=back, dst=out[j * P : (j + 1) * P, i * P : (i + 1) * P])
    return out
