"""Model gaming (D4): the HBM -> HBM transpose of ``dma_copy_hbm_nki`` done by DMA compute
(``nisa.dma_compute(dst=out, srcs=[a_tensor.permute((1, 0))], reduce_op=nl.add)``: a sum of one source).

nkisim moved DMA compute at copy throughput; "dma_compute ... ran at 50% of DMA throughput before v4" (A4,
near-memory accumulation), so on trn1/trn2 it now moves at half the per-engine rate: the kernel is slower than
its dma_copy twin, as on Trainium."""

import nki
import nki.isa as nisa
import nki.language as nl

DMA_COMPUTE = True  # a one-source sum on the DMA engines


@nki.jit
def matrix_transpose(a_tensor):
    M, N = a_tensor.shape
    out = nl.ndarray((N, M), dtype=a_tensor.dtype, buffer=nl.shared_hbm)
    if DMA_COMPUTE:
        nisa.dma_compute(dst=out, srcs=[a_tensor.permute((1, 0))], reduce_op=nl.add)
    else:
        nisa.dma_copy(dst=out, src=a_tensor.permute((1, 0)))
    return out
