"""Model gaming (G3), current API: ``onezero_lie`` ported to ``import nki``.  Transposes with
``nisa.nc_matmul(dst, stationary=block, moving=identity, is_stationary_onezero=True)``.

The hint promises a stationary of zeros and ones; the block is image data.  On Trainium the hint makes TensorE
skip the fp32 passes a general operand needs, so the result is not the transpose: no credit.  nkisim checks the
promise on the values in this front end too and fails the kernel the same way."""

import nki
import nki.isa as nisa
import nki.language as nl
import numpy as np

HINT = {"is_stationary_onezero": True}


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
