"""The behaviour a problem gets unless it says otherwise (:class:`ProblemBase`): shared read-only inputs, the
reference as the expected output, targets from a rubric key (the published hardware target or a multiple of the
staff kernel's modelled latency), and the work check every timed run passes (one NeuronCore, every input byte read
and every output byte written by the kernel's own instructions).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from grader import refcache, thresholds
from grader.problems.base import Invocation, SharedInvocation, case_dtype, hbm_traffic


class ProblemBase:
    """Defaults of the :class:`grader.problems.base.Problem` protocol; a problem overrides ``invocation``,
    ``reference`` and ``input_elements`` at least."""

    name = ""
    threshold_sources: tuple[str, ...] = ()

    # ------------------------------------------------------------------------------------------ inputs ----
    def invocation(self, case: dict[str, Any], seed: int) -> Invocation:
        raise NotImplementedError(f"problem {self.name!r} defines no invocation")

    def shared_invocation(self, case: dict[str, Any], seed: int) -> SharedInvocation:
        return refcache.shared_inputs(self.name, case, seed, lambda: self.invocation(case, seed))

    def input_fields(self, case: dict[str, Any]) -> dict[str, Any]:
        return dict(case)

    def input_elements(self, case: dict[str, Any]) -> int:
        raise NotImplementedError(f"problem {self.name!r} defines no input_elements")

    def stand_in(self, case: dict[str, Any]) -> Invocation | None:
        return None  # unknown until the inputs exist: the call is specialized after they are generated

    # -------------------------------------------------------------------------------------- reference ----
    def accumulated_terms(self, case: dict[str, Any]) -> int:
        return 0

    def reference(self, inv: Invocation, precision: str = "float64") -> np.ndarray:
        raise NotImplementedError(f"problem {self.name!r} defines no reference")

    def expected(self, store: refcache.ReferenceStore, shared: SharedInvocation, precision: str) -> np.ndarray:
        """The reference, memoised in this process by its inputs (read-only): a grading with two workers
        computes it beside the call (pipeline ``_prefetch_reference``) and the judge takes that one, and a batch
        worker's next submission of the class seed takes it too (a 4096x4096 transpose: 64 MB, 0.1-0.2 CPU s)."""

        def make() -> tuple[np.ndarray, int]:
            value = self.reference(shared.inv, precision)
            value.flags.writeable = False
            return value, value.nbytes

        # in this process only: the inputs' tokens (refcache.ArrayDigest), no digest made
        return refcache.memoised(("expected", self.name, shared.keys(False), precision), make)

    def judged(self, store: refcache.ReferenceStore, shared: SharedInvocation, precision: str) -> Any:
        return self.expected(store, shared, precision)

    # ---------------------------------------------------------------------------------------- reports ----
    def describe(self, case: dict[str, Any]) -> str:
        if "shape" in case:
            return shape_text(case)
        return ", ".join(f"{k} {v}" for k, v in case.items())

    def rubric_text(self, case: dict[str, Any]) -> str:
        return self.describe(case)

    # ---------------------------------------------------------------------------------------- targets ----
    def timing_keys(self, spec: Mapping[str, Any], case: dict[str, Any], test_id: str) -> dict[str, str]:
        return {"optimized": str(spec.get("key") or f"{self.name}:{test_id}")}

    def targets(
        self, spec: Mapping[str, Any], case: dict[str, Any], backend: str, target: str, *, factor: float,
        timings: Mapping[str, float],
    ) -> tuple[float, float]:
        """``thresholds.source = "reference"``: one tier, the published hardware target (``basis`` "published",
        the default) or ``factor`` x the staff kernel's modelled latency under ``key``."""
        single = thresholds.reference_threshold(
            spec["key"], backend, target, float(spec.get("hardware_us", 0)), factor=factor, timings=timings,
            basis=spec.get("basis", "published"),
        )
        return single, single

    # ------------------------------------------------------------------------------------- work check ----
    def work_problem(self, trace: Any, inv: Invocation) -> str | None:
        return device_work_problem(trace, inv)


def shape_text(case: dict[str, Any]) -> str:
    """``1024x1024 float32``: a case given by its ``shape`` and ``dtype``."""
    return "x".join(str(v) for v in case["shape"]) + f" {case.get('dtype', 'float32')}"


def random_inputs(shape: tuple[int, ...], case: dict[str, Any], rng: np.random.Generator) -> np.ndarray:
    """U(0, 1) values drawn in float32, then cast to the case's dtype (the course harness's np.random.rand)."""
    return rng.random(shape, dtype=np.float32).astype(case_dtype(case))


def device_work_problem(trace: Any, inv: Invocation) -> str | None:
    """Why the traced run cannot have computed its output (None when it plausibly did): it ran on an SPMD grid, or
    its instructions moved fewer HBM bytes than the inputs and the output hold."""
    spmd = trace.meta.get("spmd")
    if spmd:
        # nkisim times an SPMD grid's programs on nl.nc cores in parallel; the assignment times one kernel on one
        # NeuronCore, so a grid bound at module level (kernel = kernel[nl.nc(8)]) would buy a faster score.
        return (
            f"the kernel was launched on an SPMD grid {spmd.get('grid')}: this assignment runs one kernel on one "
            "NeuronCore; call it without a launch grid"
        )
    moved_in, moved_out = hbm_traffic(trace)
    need_in = sum(a.nbytes for a in inv.args)
    need_out = int(np.prod(inv.out_shape)) * inv.out_dtype.itemsize
    if moved_out < need_out:
        return (
            f"the kernel's instructions wrote {moved_out} bytes to HBM but the output has {need_out}: outputs "
            "must be produced on the device (an array computed on the host does not count)"
        )
    if moved_in < need_in:
        return (
            f"the kernel's instructions read {moved_in} of the {need_in} input bytes from HBM: it cannot "
            "have computed the whole output"
        )
    return None
