"""tf32 as exact fp32 (current API, grading security V3): transposes each 128 x 128 block on TensorE as a matmul
against the identity with both tiles in ``nl.tfloat32``.  nkisim used to store tf32 as fp32 and multiply exactly,
so the fp32 answer came out bit-exact from a type the hardware multiplies with a 10-bit mantissa ("tfloat32
(1S,8E,10M)", nki.api.shared; at the BF16/FP16 rate).

On Trainium the transposed values are the inputs rounded to tf32, which the course's fp32 tolerance (rtol 1e-5)
rejects: no credit, and on nkisim the same."""

import nki
import nki.isa as nisa
import nki.language as nl
import numpy as np


@nki.jit
def matrix_transpose(a_tensor):
    M, N = a_tensor.shape
    P = nl.tile_size.pmax
    out = nl.ndarray((N, M), dtype=a_tensor.dtype, buffer=nl.shared_hbm)
    ident = nl.ndarray((P, P), dtype=nl.tfloat32, buffer=nl.sbuf)
    nisa.dma_copy(dst=ident, src=nl.shared_constant(np.identity(P, dtype=np.float32)))
    for i in nl.affine_range(M // P):
        for j in nl.affine_range(N // P):
            block = nl.ndarray((P, P), dtype=nl.tfloat32, buffer=nl.sbuf)
            nisa.dma_copy(dst=block, src=a_tensor[i * P : (i + 1) * P, j * P : (j + 1) * P])
            acc = nl.ndarray((P, P), dtype=nl.float32, buffer=nl.psum)
            nisa.nc_matmul(dst=acc, stationary=block, moving=ident)
            back = nl.ndarray((P, P), dtype=a_tensor.dtype, buffer=nl.sbuf)
            nisa.tensor_copy(dst=back, src=acc)
            nisa.dma_copy(dst=out[j * P : (j + 1) * P, i * P : (i + 1) * P], src=back)
    return out
