"""Device values on the host (current API, grading security S1): reads every input element's bits into a sequencer
register, takes the integer the register exposed to Python (``r.value``) and uploads the transposed answer with
``nl.shared_constant``: no real kernel behind the output, and every byte of the input still read by the trace.

On Trainium the kernel's Python never sees a register's value ("a register's value is not known while the kernel is
being built", nki.isa.VirtualRegister): no credit; on nkisim a register exposes nothing, so the kernel fails."""

import nki
import nki.isa as nisa
import nki.language as nl
import numpy as np


@nki.jit
def matrix_transpose(a_tensor):
    M, N = a_tensor.shape
    out = nl.ndarray((N, M), dtype=a_tensor.dtype, buffer=nl.shared_hbm)
    host = np.zeros((N, M), dtype=np.int32)
    for i in range(M):
        row = nl.ndarray((1, N), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=row, src=a_tensor[i : i + 1, :])
        bits = row.view(nl.int32)  # the same bytes as integers: a register load keeps them exactly
        for j in range(N):
            reg = nisa.register_alloc()
            nisa.register_load(reg, bits[0:1, j : j + 1])
            host[j, i] = reg.value
    nisa.dma_copy(dst=out, src=nl.shared_constant(host.view(np.float32)))
    return out
