"""Hostile (grading security): a stream that asks the grader's replay for the simulator's rules.

The parent replays the program the specializing child ships, and took from the stream's header whether to run it
as ``nki.simulate`` does: under the simulator a compiler error such as the start-partition rule (G10) or the SBUF
capacity check is only a warning (NKI 0.6 release notes; AWS's simulator runs such kernels).  A graded program is
compiled, never simulated, yet a child past the screen (``exc.__traceback__``, SANDBOX-INTROSPECTION) set the flag
on its run and in the recorder's header: this honest transpose with one copy at an illegal start partition (an
error when compiled) scored full credit.  Closed: a graded replay refuses a stream that asks for the simulator
(docs/grading-security.md L4)."""

import nki
import nki.isa as nisa
import nki.language as nl


def _simulated():
    try:
        raise ValueError("where am I")
    except ValueError as exc:
        frame = exc.__traceback__.tb_frame
    while frame is not None:
        names = frame.f_locals
        if "ctx" in names and "stream" in names and names["stream"] is not None:
            names["ctx"].mem.simulate = True
            names["stream"].header["simulate"] = True
            return
        frame = frame.f_back


@nki.jit
def matrix_transpose(a_tensor):
    _simulated()
    M, N = a_tensor.shape
    P = nl.tile_size.pmax
    out = nl.ndarray((N, M), dtype=a_tensor.dtype, buffer=nl.shared_hbm)
    scratch = nl.ndarray((P, P), dtype=a_tensor.dtype, buffer=nl.sbuf)
    for i in nl.affine_range(M // P):
        for j in nl.affine_range(N // P):
            tile = nl.ndarray((P, P), dtype=a_tensor.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=tile, src=a_tensor[i * P : (i + 1) * P, j * P : (j + 1) * P])
            flipped = nl.ndarray((P, P), dtype=nl.float32, buffer=nl.psum)
            nisa.nc_transpose(dst=flipped, data=tile)
            back = nl.ndarray((P, P), dtype=a_tensor.dtype, buffer=nl.sbuf)
            nisa.tensor_copy(dst=back, src=flipped)
            nisa.dma_copy(dst=out[j * P : (j + 1) * P, i * P : (i + 1) * P], src=back)
    # 32 partitions starting at 5: an error when compiled (start 0, 32, 64 or 96), a warning when simulated
    nisa.tensor_copy(dst=scratch[5:37, :], src=scratch[0:32, :])
    return out
