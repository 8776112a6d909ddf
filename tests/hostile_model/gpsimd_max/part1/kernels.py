"""Model gaming (G8): runs VectorE-only work on GpSimd, here a max (``tensor_tensor(.., nl.maximum,
engine=nisa.gpsimd_engine)``), to spread it over a second engine.

GpSimd runs only add, multiply, power and rsqrt (NKI ALU operator table, supported engines): on Trainium the
kernel does not compile (no credit), and nkisim now rejects it the same way."""

import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl


@nki.jit
def matrix_transpose(a_tensor):
    M, N = a_tensor.shape
    P = nl.tile_size.pmax
    out = nl.ndarray((N, M), dtype=a_tensor.dtype, buffer=nl.hbm)
    for i in nl.affine_range(M // P):
        for j in nl.affine_range(N // P):
            tile = nl.ndarray((P, P), dtype=a_tensor.dtype, buffer=nl.sbuf)
            nisa.dma_copy(src=a_tensor[i * P : (i + 1) * P, j * P : (j + 1) * P], dst=tile)
            back = nisa.tensor_copy(nisa.nc_transpose(tile), engine=nisa.vector_engine)
            same = nisa.tensor_tensor(back, back, nl.maximum, engine=nisa.gpsimd_engine)
            nisa.dma_copy(src=same, dst=out[j * P : (j + 1) * P, i * P : (i + 1) * P])
    return out
