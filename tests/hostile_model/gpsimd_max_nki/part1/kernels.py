"""Model gaming (G8), current API: ``gpsimd_max`` ported to ``import nki``.  Runs VectorE-only work on GpSimd, here
a max (``nisa.tensor_tensor(dst, a, b, op=nl.maximum, engine=nisa.engine.gpsimd)``), to spread it over a second
engine.

GpSimd runs only add, multiply, power and rsqrt (NKI ALU operator table, supported engines): on Trainium the
kernel does not compile (no credit), and nkisim rejects it the same way in this front end."""

import nki
import nki.isa as nisa
import nki.language as nl


@nki.jit
def matrix_transpose(a_tensor):
    M, N = a_tensor.shape
    P = nl.tile_size.pmax
    out = nl.ndarray((N, M), dtype=a_tensor.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(M // P):
        for j in nl.affine_range(N // P):
            tile = nl.ndarray((P, P), dtype=a_tensor.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=tile, src=a_tensor[i * P : (i + 1) * P, j * P : (j + 1) * P])
            flipped = nl.ndarray((P, P), dtype=a_tensor.dtype, buffer=nl.psum)
            nisa.nc_transpose(dst=flipped, data=tile)
            back = nl.ndarray((P, P), dtype=a_tensor.dtype, buffer=nl.sbuf)
            nisa.tensor_copy(dst=back, src=flipped, engine=nisa.engine.vector)
            same = nl.ndarray((P, P), dtype=a_tensor.dtype, buffer=nl.sbuf)
            nisa.tensor_tensor(dst=same, data1=back, data2=back, op=nl.maximum, engine=nisa.engine.gpsimd)
            nisa.dma_copy(dst=out[j * P : (j + 1) * P, i * P : (i + 1) * P], src=same)
    return out
