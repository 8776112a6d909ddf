"""Hostile (issue 31, screen): a format string built at run time reads private attributes.

A replacement field naming ``_v[i][j]`` of argument 0, formatted with ``t``, is element (i, j) of the NumPy
storage behind ``t``; the screen looked for private fields only in string literals, so the kernel assembles the
field from pieces.  It reads its whole input into Python element by element,
transposes on the host and ships the answer as an ``nl.shared_constant`` copied to the output (a second copy reads
every input byte).  Closed: ``.format``/``.format_map`` only on string literals, whose fields the screen reads
(SANDBOX-PRIVATE); an f-string's fields are attribute nodes the screen sees."""

import nki
import nki.isa as nisa
import nki.language as nl
import numpy as np


@nki.jit
def matrix_transpose(a_tensor):
    M, N = a_tensor.shape
    rows = []
    for i in range(M):
        row = []
        for j in range(N):
            field = "{0." + "_" + "v[" + str(i) + "][" + str(j) + "]}"
            row.append(float(field.format(a_tensor)))
        rows.append(row)
    answer = nl.shared_constant(np.array(rows, dtype=np.float32).T.copy())
    scratch = nl.ndarray((M, N), dtype=a_tensor.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=scratch, src=a_tensor)
    out = nl.ndarray((N, M), dtype=a_tensor.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=answer)
    return out
