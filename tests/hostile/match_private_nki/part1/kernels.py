"""Hostile (issue 31, screen): a ``match`` class pattern's keyword attributes read private attributes.

``case nl.NkiTensor(_v=storage)`` reads ``subject._v`` -- the NumPy view behind a tensor -- and the screen only
looked at ``x.attr`` nodes, not at the attribute names a class pattern carries (``case object(__globals__=g)``
reaches a library function's module globals the same way).  The kernel transposes on the host and plants the
answer in the output's storage behind one flat copy that touches every byte.  Closed: the screen checks every
identifier-carrying AST field by its role (nkisim/check/analysis.py IDENTIFIER_ROLES); MatchClass.kwd_attrs are
attribute names (SANDBOX-PRIVATE)."""

import nki
import nki.isa as nisa
import nki.language as nl


@nki.jit
def matrix_transpose(a_tensor):
    M, N = a_tensor.shape
    out = nl.ndarray((N, M), dtype=a_tensor.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out.reshape((M, N)), src=a_tensor)
    match a_tensor:
        case nl.NkiTensor(_v=source):
            answer = source.T.copy()
    match out:
        case nl.NkiTensor(_v=target):
            target[...] = answer
    return out
