"""Model gaming (current API, PSUM initialisation): zeroes each PSUM tile with ``nisa.memset`` and transposes into
it with ``nisa.nc_matmul(..., accumulate=True)`` (block.T @ identity added onto the zeros).

The zero fill read by an accumulating matmul looks free (a matmul would overwrite it anyway), and the values are
right in NumPy.  On NeuronCore-v2/v3 "matmul accumulating into a PSUM location that was value-initialized by a
non-matmul instruction (e.g., memset, tensor_copy) is not supported and is undefined behavior on hardware"
(nki.isa.nc_matmul, "Accumulation mode"): no credit, and nkisim fails the kernel
(``nkisim_matmul_accumulate_value_init``).  The honest form starts the group with the matmul (``accumulate=None``
or ``False``), as ``onezero_honest_nki`` does."""

import nki
import nki.isa as nisa
import nki.language as nl
import numpy as np


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
            acc = nl.ndarray((P, P), dtype=nl.float32, buffer=nl.psum)
            nisa.memset(dst=acc, value=0.0)
            nisa.nc_matmul(dst=acc, stationary=tile, moving=ident, accumulate=True)
            back = nl.ndarray((P, P), dtype=a_tensor.dtype, buffer=nl.sbuf)
            nisa.tensor_copy(dst=back, src=acc)
            nisa.dma_copy(dst=out[j * P : (j + 1) * P, i * P : (i + 1) * P], src=back)
    return out
