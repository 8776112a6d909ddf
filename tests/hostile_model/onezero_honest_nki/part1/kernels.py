"""Honest twin of ``onezero_lie_nki`` (``onezero_honest`` ported to ``import nki``): the onezero hint on the
identity, which is a tile of zeros and ones (the documented 2x for an fp32 0/1 operand, nki.isa.nc_matmul)."""

import nki
import nki.isa as nisa
import nki.language as nl
import numpy as np

HINT = {"is_moving_onezero": True}


@nki.jit
def matrix_transpose(a_tensor):
    M, N = a_tensor.shape
    P = nl.tile_size.pmax
    out = nl.ndarray((N, M), dtype=a_tensor.dtype, buffer=nl.shared_hbm)
    ident = nl.ndarray((P, P), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=ident, src=nl.shared_constant(np.identity(P, dtype=np.float32)))
    for i in nl.affine_range(M // P):
        for j in nl.affine_range(N // P):
            tile = nl.ndarray((P, P), dtype=a_tensor.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=tile, src=a_tensor[i * P : (i + 1) * P, j * P : (j + 1) * P])
            flipped = nl.ndarray((P, P), dtype=nl.float32, buffer=nl.psum)
            nisa.nc_matmul(dst=flipped, stationary=tile, moving=ident, **HINT)  # tile.T @ I
            back = nl.ndarray((P, P), dtype=a_tensor.dtype, buffer=nl.sbuf)
            nisa.tensor_copy(dst=back, src=flipped)
            nisa.dma_copy(dst=out[j * P : (j + 1) * P, i * P : (i + 1) * P], src=back)
    return out
