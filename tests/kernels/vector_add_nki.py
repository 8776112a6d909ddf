"""The part 1 vector adds (part1/kernels.py: naive, tiled, stream) written in the current NKI API (``import nki``).

Line for line the legacy kernels, translated as the NKI migration guide says: destinations first (``nisa.X(dst,
...)`` into tiles allocated with ``nl.ndarray``), outputs in ``nl.shared_hbm``, no ``nki.compiler`` directive.
tests/test_frontend_equivalence.py checks that both spellings compute the same bits at the same modelled latency.
"""

import nki
import nki.isa as nisa
import nki.language as nl


@nki.jit
def vector_add_naive(a_vec, b_vec):
    out = nl.ndarray(a_vec.shape, dtype=a_vec.dtype, buffer=nl.shared_hbm)
    a_sbuf = nl.ndarray((a_vec.shape[0], 1), dtype=a_vec.dtype, buffer=nl.sbuf)
    b_sbuf = nl.ndarray((b_vec.shape[0], 1), dtype=b_vec.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=a_sbuf, src=a_vec)
    nisa.dma_copy(dst=b_sbuf, src=b_vec)
    sum_sbuf = nl.ndarray((a_vec.shape[0], 1), dtype=a_vec.dtype, buffer=nl.sbuf)
    nisa.tensor_scalar(dst=sum_sbuf, data=a_sbuf, op0=nl.add, operand0=b_sbuf)
    nisa.dma_copy(dst=out, src=sum_sbuf)
    return out


@nki.jit
def vector_add_tiled(a_vec, b_vec, ROW_CHUNK=1):
    (N,) = a_vec.shape
    out = nl.ndarray(a_vec.shape, dtype=a_vec.dtype, buffer=nl.shared_hbm)
    for chunk in nl.affine_range(N // ROW_CHUNK):
        lo = chunk * ROW_CHUNK
        a_tile = nl.ndarray((ROW_CHUNK, 1), dtype=a_vec.dtype, buffer=nl.sbuf)
        b_tile = nl.ndarray((ROW_CHUNK, 1), dtype=b_vec.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=a_tile, src=a_vec[lo:lo + ROW_CHUNK])
        nisa.dma_copy(dst=b_tile, src=b_vec[lo:lo + ROW_CHUNK])
        sum_tile = nl.ndarray((ROW_CHUNK, 1), dtype=a_vec.dtype, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=sum_tile, data=a_tile, op0=nl.add, operand0=b_tile)
        nisa.dma_copy(dst=out[lo:lo + ROW_CHUNK], src=sum_tile)
    return out


@nki.jit
def vector_add_stream(a_vec, b_vec, FREE_DIM=2):
    PARTITIONS = nl.tile_size.pmax
    (N,) = a_vec.shape
    COLS = N // PARTITIONS
    a_mat = a_vec.reshape((PARTITIONS, COLS))
    b_mat = b_vec.reshape((PARTITIONS, COLS))
    out = nl.ndarray((PARTITIONS, COLS), dtype=a_vec.dtype, buffer=nl.shared_hbm)
    for col_tile in nl.affine_range(COLS // FREE_DIM):
        lo = col_tile * FREE_DIM
        a_tile = nl.ndarray((PARTITIONS, FREE_DIM), dtype=a_vec.dtype, buffer=nl.sbuf)
        b_tile = nl.ndarray((PARTITIONS, FREE_DIM), dtype=b_vec.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=a_tile, src=a_mat[:, lo:lo + FREE_DIM])
        nisa.dma_copy(dst=b_tile, src=b_mat[:, lo:lo + FREE_DIM])
        sum_tile = nl.ndarray((PARTITIONS, FREE_DIM), dtype=a_vec.dtype, buffer=nl.sbuf)
        nisa.tensor_tensor(dst=sum_tile, data1=a_tile, data2=b_tile, op=nl.add)
        nisa.dma_copy(dst=out[:, lo:lo + FREE_DIM], src=sum_tile)
    return out.reshape(a_vec.shape)
