"""Hostile (grading security, defence in depth): the real inputs in the specializing child.

The child that runs a current-API kernel's Python computes no values, yet it was handed the call's real input
arrays (the parent's .npy files, loaded as a plain run's are) only to read their shapes and dtypes.  Past the
screen (``exc.__traceback__``, a dunder only the screen refuses), the kernel walks the frames above it from a
caught exception's traceback to the launcher's argument list, transposes the input on the host and ships the
answer as an ``nl.shared_constant`` of its own, recorded by value: one DMA of the right answer.  Closed: the
specializing child is given zero-filled stand-ins of the inputs' shapes and dtypes, never their data
(docs/grading-security.md L3)."""

import nki
import nki.isa as nisa
import nki.language as nl


@nki.jit
def matrix_transpose(a_tensor):
    M, N = a_tensor.shape
    try:
        raise ValueError("where am I")
    except ValueError as exc:
        frame = exc.__traceback__.tb_frame
    source = None
    while frame is not None and source is None:
        for value in frame.f_locals.values():
            if isinstance(value, list | tuple) and value and hasattr(value[0], "T") and value[0].shape == (M, N):
                source = value[0]
        frame = frame.f_back
    answer = source.T.copy()
    out = nl.ndarray((N, M), dtype=a_tensor.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=nl.shared_constant(answer))
    return out
