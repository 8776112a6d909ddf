"""Part 1's matrix transpose: ``matrix_transpose(a)`` of an (M, N) matrix returns its (N, M) transpose.

A rubric case is ``{shape = [M, N], dtype = "float32"}``; the input is U(0, 1) like the course harness's.  The
reference is an exact copy, so its precision is 'exact'.  The extra credit's target (``thresholds.source =
"reference"``) is the handout's 700 us on hardware (PUBLISHED_US) or a multiple of the staff transpose's modelled
latency (grader/problems/generic.py).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from grader.problems.base import Invocation, case_dtype
from grader.problems.generic import ProblemBase

# Handout: transpose extra credit, 4096x4096 float32 under 700 us on hardware (trn2).
PUBLISHED_US = 700.0
TILE = 256  # the reference copies TILE x TILE blocks: 256 KiB of float32 read and written per block


def transposed(a: np.ndarray) -> np.ndarray:
    """``np.ascontiguousarray(a.T)``, copied block by block: the plain copy walks ``a`` down its columns, a new
    cache line per value, and takes 0.13 CPU s for 4096x4096 float32 here against 0.06 s in blocks (the same
    values: a copy)."""
    rows, cols = a.shape
    out = np.empty((cols, rows), dtype=a.dtype)
    for i in range(0, rows, TILE):
        for j in range(0, cols, TILE):
            out[j : j + TILE, i : i + TILE] = a[i : i + TILE, j : j + TILE].T
    return out


class Transpose(ProblemBase):
    name = "transpose"

    def invocation(self, case: dict[str, Any], seed: int) -> Invocation:
        rows, cols = (int(v) for v in case["shape"])
        a = np.random.default_rng(seed).random((rows, cols), dtype=np.float32).astype(case_dtype(case), copy=False)
        return Invocation([a], {}, (cols, rows), a.dtype, 0.0)

    def reference(self, inv: Invocation, precision: str = "float64") -> np.ndarray:
        return transposed(inv.args[0])

    def input_elements(self, case: dict[str, Any]) -> int:
        return int(np.prod([int(v) for v in case["shape"]]))


PROBLEM = Transpose()
