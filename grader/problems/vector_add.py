"""Part 1's vector addition: ``vector_add_*(a, b)`` of two 1-D vectors of length N returns ``a + b``.

A rubric case is ``{shape = [N], dtype = "float32"}`` (``vector_add_stream`` needs N a multiple of 128 x its
FREE_DIM); inputs are U(0, 1) like the course harness's.  One addition per element, rounded once: NumPy's sum in
the output dtype is the value a VectorE add (fp32 arithmetic, one rounding to the output dtype) produces, so the
reference is 'exact'.  The rubric does not grade it (the handout asks for measurements, not a score); a rubric
entry with ``problem = "vector_add"`` grades it like the transpose, on correctness and, with
``thresholds.source = "fixed"`` or ``"reference"``, latency.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from grader.problems.base import Invocation
from grader.problems.generic import ProblemBase, random_inputs


class VectorAdd(ProblemBase):
    name = "vector_add"

    def invocation(self, case: dict[str, Any], seed: int) -> Invocation:
        shape = tuple(int(v) for v in case["shape"])
        if len(shape) != 1:
            raise ValueError(f"vector_add: shape must be [N], got {case['shape']}")
        rng = np.random.default_rng(seed)
        a, b = random_inputs(shape, case, rng), random_inputs(shape, case, rng)
        return Invocation([a, b], {}, shape, a.dtype, 0.0)

    def reference(self, inv: Invocation, precision: str = "float64") -> np.ndarray:
        a, b = inv.args
        return np.add(a, b, dtype=a.dtype)

    def input_elements(self, case: dict[str, Any]) -> int:
        return 2 * int(np.prod([int(v) for v in case["shape"]]))


PROBLEM = VectorAdd()
