"""Hostile (grading security, defence in depth): inputs_in_child_nki in the legacy API (``neuronxcc.nki``).

Past the screen (``exc.__traceback__``, SANDBOX-INTROSPECTION), the kernel walks the frames above it to the
launcher's argument list, transposes the input on the host and ships the answer as an ``nl.shared_constant``.
Until the legacy API was recorded and replayed, the legacy child's own outputs were judged (a frame walk could do
anything there); since then the parent replays its program, and the specializing child holds zero-filled
stand-ins of the inputs, never their data (docs/grading-security.md L3): the constant is zeros."""

import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl


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
    answer = nl.shared_constant(source.T.copy())
    out = nl.ndarray((N, M), dtype=a_tensor.dtype, buffer=nl.shared_hbm)
    P = nl.tile_size.pmax
    for i in nl.affine_range(N // P):
        tile = nl.ndarray((P, M), dtype=a_tensor.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=tile, src=answer[i * P : (i + 1) * P, :])
        nisa.dma_copy(dst=out[i * P : (i + 1) * P, :], src=tile)
    return out
