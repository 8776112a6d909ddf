"""Honest twin of ``dma_compute_hbm_nki``: the transpose as one HBM -> HBM ``dma_copy`` of the input's transposed
view (``a_tensor.permute((1, 0))``), the DMA engines reading it element by element.  Slow (every element its own
descriptor element), but correct."""

import nki
import nki.isa as nisa
import nki.language as nl

DMA_COMPUTE = False


@nki.jit
def matrix_transpose(a_tensor):
    M, N = a_tensor.shape
    out = nl.ndarray((N, M), dtype=a_tensor.dtype, buffer=nl.shared_hbm)
    if DMA_COMPUTE:
        nisa.dma_compute(dst=out, srcs=[a_tensor.permute((1, 0))], reduce_op=nl.add)
    else:
        nisa.dma_copy(dst=out, src=a_tensor.permute((1, 0)))
    return out
