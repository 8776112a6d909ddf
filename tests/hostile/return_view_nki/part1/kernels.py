"""Hostile (issue 31, red team): a transpose for the price of a contiguous copy, by returning a permuted view.

The kernel copies its input into the output tensor as it lies (one contiguous HBM -> HBM DMA) and returns
``out.permute((1, 0))``.  nkisim handed the host the view's values, the transpose, although no instruction wrote the
output in that layout: scored 12 (correctness and speed) with the screen on.

On Trainium a view "share[s] the same underlying storage -- no data is copied" (nki.language.NkiTensor): the host
receives the output tensor's storage, the untransposed copy.  Closed: a returned tensor must be its storage as it
lies (the tensor or a reshape of it), nkisim_output_view otherwise (docs/grading-security.md S12)."""

import nki
import nki.isa as nisa
import nki.language as nl


@nki.jit
def matrix_transpose(a_tensor):
    M, N = a_tensor.shape
    out = nl.ndarray((M, N), dtype=a_tensor.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=a_tensor)
    return out.permute((1, 0))
