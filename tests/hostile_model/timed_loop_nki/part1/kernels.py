"""Noticing a timing run (current API, grading security S3): the kernel puts a data-dependent loop (a bound loaded
from the input into a register) in a ``try``.  nkisim used to run dynamic loops by their Python iterations, so a run
that computes no values (``verify_performance_outputs = false``) could not run it and raised through the kernel:
the ``except`` branch then skipped the real transpose, leaving a cheap trace to time, while every correctness run
(values computed) did the work and passed.

On Trainium the loop is one hardware loop whatever the data and the kernel's Python cannot tell how it will be
run; on nkisim the loop body runs once in Python and nothing reaches the kernel's code: the timed run is the
transpose's, as ``dma_honest_nki`` with the probe loop."""

import nki
import nki.isa as nisa
import nki.language as nl


@nki.jit
def matrix_transpose(a_tensor):
    M, N = a_tensor.shape
    P = nl.tile_size.pmax
    out = nl.ndarray((N, M), dtype=a_tensor.dtype, buffer=nl.shared_hbm)
    probe = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
    first = nl.ndarray((1, 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=first, src=a_tensor[0:1, 0:1])
    nisa.tensor_scalar(dst=probe, data=first, op0=nl.multiply, operand0=0.0)
    count = nisa.register_alloc()
    nisa.register_load(count, probe)  # 0 on every input: the loop never runs on the device
    timed = False
    try:
        nl.fori_loop(0, count, lambda k: nisa.memset(dst=probe, value=0))
    except Exception:  # noqa: BLE001 - only a run without values raised here
        timed = True
    if timed:
        nisa.dma_copy(dst=out[0:P, 0:P], src=a_tensor[0:P, 0:P])  # something written, nothing transposed
        return out
    for i in nl.affine_range(M // P):
        band = nl.ndarray((P, N), dtype=a_tensor.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=band, src=a_tensor[i * P : (i + 1) * P, :])
        for j in nl.affine_range(N // P):
            flipped = nl.ndarray((P, P), dtype=a_tensor.dtype, buffer=nl.psum)
            nisa.nc_transpose(dst=flipped, data=band[:, j * P : (j + 1) * P])
            back = nl.ndarray((P, P), dtype=a_tensor.dtype, buffer=nl.sbuf)
            nisa.tensor_copy(dst=back, src=flipped)
            nisa.dma_copy(dst=out[j * P : (j + 1) * P, i * P : (i + 1) * P], src=back)
    return out
