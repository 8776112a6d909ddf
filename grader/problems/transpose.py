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


class Transpose(ProblemBase):
    name = "transpose"

    def invocation(self, case: dict[str, Any], seed: int) -> Invocation:
        rows, cols = (int(v) for v in case["shape"])
        a = np.random.default_rng(seed).random((rows, cols), dtype=np.float32).astype(case_dtype(case))
        return Invocation([a], {}, (cols, rows), a.dtype, 0.0)

    def reference(self, inv: Invocation, precision: str = "float64") -> np.ndarray:
        return np.ascontiguousarray(inv.args[0].T)

    def input_elements(self, case: dict[str, Any]) -> int:
        return int(np.prod([int(v) for v in case["shape"]]))


PROBLEM = Transpose()
