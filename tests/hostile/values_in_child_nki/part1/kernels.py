"""Hostile (grading security, defence in depth): device values in the specializing child.

The child that runs a current-API kernel's Python records its program in timing mode, where no values exist and an
HBM argument's storage holds none; the parent replays the program on the real inputs.  But a timing run whose
dynamic loop needs a register's value (here a while loop over a register loaded from SBUF) was run again in full
mode (``nkisim.core.runtime.run_kernel``'s ``ValuesNeeded`` fallback), in the child, on the real inputs: the
kernel's Python ran beside device data.  Past the screen (``case nl.NkiTensor(_v=...)``, a read of a private slot
only the screen refuses, C2), it read the input, transposed it on the host and shipped the answer as an
``nl.shared_constant`` of its own, recorded by value: one DMA of the right answer, 12 points with the screen off.
Closed: a recording run is never repeated with values (docs/grading-security.md L2)."""

import nki
import nki.isa as nisa
import nki.language as nl


@nki.jit
def matrix_transpose(a_tensor):
    M, N = a_tensor.shape
    cnt = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.memset(dst=cnt, value=0)
    reg = nisa.register_alloc()
    nisa.register_load(reg, cnt)

    def body(r):
        nisa.register_load(r, cnt)
        return r

    nl.while_loop(reg, body)  # zero trips; timing mode cannot tell without the register's value
    match a_tensor:
        case nl.NkiTensor(_v=source):
            answer = source.T.copy()
    out = nl.ndarray((N, M), dtype=a_tensor.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=nl.shared_constant(answer))
    return out
