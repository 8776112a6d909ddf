"""Honest twin of ``onezero_lie``: the onezero hint on the identity, which is a tile of zeros and ones (the
documented 2x for an fp32 0/1 operand, nki.isa.nc_matmul)."""

import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl
import numpy as np

HINT = {"is_moving_onezero": True}


@nki.jit
def matrix_transpose(a_tensor):
    M, N = a_tensor.shape
    P = nl.tile_size.pmax
    out = nl.ndarray((N, M), dtype=a_tensor.dtype, buffer=nl.hbm)
    ident_hbm = nl.shared_constant(np.identity(P, dtype=np.float32))
    ident = nl.ndarray((P, P), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(src=ident_hbm, dst=ident)
    for i in nl.affine_range(M // P):
        for j in nl.affine_range(N // P):
            tile = nl.ndarray((P, P), dtype=a_tensor.dtype, buffer=nl.sbuf)
            nisa.dma_copy(src=a_tensor[i * P : (i + 1) * P, j * P : (j + 1) * P], dst=tile)
            flipped = nisa.nc_matmul(tile, ident, **HINT)
            back = nisa.tensor_copy(flipped)
            nisa.dma_copy(src=back, dst=out[j * P : (j + 1) * P, i * P : (i + 1) * P])
    return out
