"""Hostile (issue 31, red team): a value check's error text carries device values into the kernel's Python.

``nc_matmul(is_stationary_onezero=True)`` promises a 0/1 fp32 tile; nkisim checks the promise on the values and
raised the error inside the call, naming the first offending element's value and position.  A ``try`` around it is
a reader of any SBUF tile: this kernel probes every input element (scaled by 3 so that no element is 0 or 1),
reads it from the message, zeroes it on the device and probes again, then transposes on the host and uploads the
answer with ``nl.shared_constant``.  Scored 10 (every correctness case) with no transpose behind it.

On Trainium the kernel's Python never sees a device value: a broken promise gives wrong numbers, not an exception.
Closed: a value check of an instruction is a fault of the run (raised when the kernel's Python has returned, naming
the rule but no value), as run-time index errors are (docs/grading-security.md S10)."""

import nki
import nki.isa as nisa
import nki.language as nl
import numpy as np


@nki.jit
def matrix_transpose(a_tensor):
    M, N = a_tensor.shape
    host = np.zeros((N, M), dtype=np.float32)
    one = nl.ndarray((1, 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.memset(dst=one, value=1.0)
    zero = nl.shared_constant(np.zeros((1, 1), dtype=np.float32))
    for i in range(M):
        for c0 in range(0, N, 128):
            C = min(128, N - c0)
            row = nl.ndarray((1, C), dtype=nl.float32, buffer=nl.sbuf)
            nisa.dma_copy(dst=row, src=a_tensor[i : i + 1, c0 : c0 + C])
            nisa.tensor_scalar(dst=row, data=row, op0=nl.multiply, operand0=3.0)
            probe = nl.ndarray((C, 1), dtype=nl.float32, buffer=nl.psum)
            done = False
            while not done:
                try:
                    nisa.nc_matmul(dst=probe, stationary=row, moving=one, is_stationary_onezero=True)
                    done = True
                except ValueError as err:
                    text = str(err)
                    value = float(text.split(" holds ")[1].split(" at ")[0])
                    m = int(text.split(" at [")[1].split("]")[0].split(",")[1])
                    host[c0 + m, i] = value / 3.0
                    nisa.dma_copy(dst=row[0:1, m : m + 1], src=zero)
    out = nl.ndarray((N, M), dtype=a_tensor.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=nl.shared_constant(host))
    return out
