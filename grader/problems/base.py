"""What every graded problem shares: the kernel call (``Invocation``), the ``Problem`` protocol, input seeds, the
reference-precision rule and the HBM-traffic facts of a trace.  No grader imports: the bottom of the problems
package (grader/problems/__init__.py is the registry, generic.py the default behaviour, one module per problem).
Of nkisim only its BLAS thread limiter (``one_blas_thread``: one per process, nkisim/core/blas.py).

The parent generates every input from a seeded generator and computes the expected output itself, independently
of nkisim, in the precision the tolerances call for (reference_precision): a kernel is judged against arithmetic it
cannot influence.
"""

from __future__ import annotations

import contextvars
import hashlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np

from nkisim.core import blas

DTYPES = {"float32": np.float32, "float16": np.float16}


@dataclass
class Invocation:
    """One kernel call: positional array arguments, keyword constants, and the expected output's shape/dtype."""

    args: list[np.ndarray]
    kwargs: dict[str, Any]
    out_shape: tuple[int, ...]
    out_dtype: np.dtype
    flops: float  # useful floating-point operations (2 per multiply-add), for MFU


class SharedInvocation:
    """An invocation whose arrays are read-only and shared, with the digests that address its references.

    A digest may be given as a maker (grader/refcache.py ``ArrayDigest``: called, it returns the digest; its
    ``token`` names the array object in this process).  The digest is made when :attr:`digests` is first read, i.e.
    when a reference is looked up in a store whose entries outlive the process, never when the inputs are generated:
    SHA-256 of a 224x224 batch-4 X (196 MiB) is about 0.11 CPU s, and the largest inputs are generated while the
    critical group's calls are specialized, whose cores it took.  A store in memory only addresses references by
    the tokens (:meth:`keys`) and makes no digest at all (ArrayDigest says why that is the same)."""

    __slots__ = ("inv", "_digests", "_resolved")

    def __init__(self, inv: Invocation, digests: Sequence[str | Callable[[], str]]) -> None:
        self.inv = inv
        self._digests = tuple(digests)
        self._resolved: tuple[str, ...] | None = None

    @property
    def digests(self) -> tuple[str, ...]:
        """The SHA-256 content digests (made now if not yet: once per maker, whichever threads ask)."""
        resolved = self._resolved
        if resolved is None:
            resolved = self._resolved = tuple(d if isinstance(d, str) else d() for d in self._digests)
        return resolved

    def keys(self, content: bool) -> tuple[str, ...]:
        """What addresses this call's references: the content :attr:`digests` (``content``: the entries outlive this
        process), else each maker's ``token`` (a digest given as a string is its own key)."""
        if content:
            return self.digests
        return tuple(d if isinstance(d, str) else getattr(d, "token", None) or d() for d in self._digests)


@runtime_checkable
class Problem(Protocol):
    """Everything the grader knows about one graded problem (a rubric test's ``problem``).

    A problem is one module of this package defining ``PROBLEM`` (an object with these members; subclass
    :class:`grader.problems.generic.ProblemBase` for the defaults) and nothing else: the pipeline, the
    calibration, the rubric check and the report views ask it through this protocol, never by name.
    """

    name: str
    #: rubric ``thresholds.source`` values this problem computes targets for, besides "fixed" and "reference"
    threshold_sources: tuple[str, ...]

    def invocation(self, case: dict[str, Any], seed: int) -> Invocation:
        """The inputs of ``case`` from ``seed`` (and the useful flops, for MFU)."""
        ...

    def shared_invocation(self, case: dict[str, Any], seed: int) -> SharedInvocation:
        """``invocation`` memoised per process, read-only, with the digests that address its references."""
        ...

    def input_fields(self, case: dict[str, Any]) -> dict[str, Any]:
        """The fields of ``case`` its inputs' random stream depends on (cases equal on them share a seed: the same
        arrays, or where a problem says so more, e.g. conv2d's batch prefixes)."""
        ...

    def input_elements(self, case: dict[str, Any]) -> int:
        """Elements of every input array, known without generating them (the resource-limit size measure)."""
        ...

    def stand_in(self, case: dict[str, Any]) -> Invocation | None:
        """The call without its values: arguments of the inputs' shapes and dtypes holding zeros (read-only views
        of one element each) and the call's keyword constants, all a specializing child is given; None when they
        are not known without generating the inputs.  Lets a grading specialize a call while its inputs are
        generated (grader/pipeline.py, docs/grading.md round 8)."""
        ...

    def accumulated_terms(self, case: dict[str, Any]) -> int:
        """Terms summed per output value (0: the reference is exact, e.g. a copy or one rounding)."""
        ...

    def reference(self, inv: Invocation, precision: str = "float64") -> np.ndarray:
        """The expected output, computed with NumPy in ``precision`` (see reference_precision)."""
        ...

    def expected(self, store: Any, shared: SharedInvocation, precision: str) -> np.ndarray:
        """The expected output through the shared reference store (grader/refcache.py)."""
        ...

    def judged(self, store: Any, shared: SharedInvocation, precision: str) -> Any:
        """What the judge compares an output with: :meth:`expected`'s array, or a grader.judge.Expected that makes
        the same values slice by slice."""
        ...

    def describe(self, case: dict[str, Any]) -> str:
        """The case in a failing test's message."""
        ...

    def rubric_text(self, case: dict[str, Any]) -> str:
        """The case in the rubric table of docs/grading.md."""
        ...

    def timing_keys(self, spec: Mapping[str, Any], case: dict[str, Any], test_id: str) -> dict[str, str]:
        """Staff-kernel variant ("optimized", "relaxed") -> its key in the reference timings."""
        ...

    def targets(
        self, spec: Mapping[str, Any], case: dict[str, Any], backend: str, target: str, *, factor: float,
        timings: Mapping[str, float],
    ) -> tuple[float, float]:
        """(relaxed_us, optimized_us) of a performance test whose ``thresholds.source`` is not "fixed"."""
        ...

    def work_problem(self, trace: Any, inv: Invocation) -> str | None:
        """Why a traced run cannot have computed its output (None when it plausibly did)."""
        ...


def submission_seed(salt: int, content_hash: str) -> int:
    """Default input seed: derived from the submission's content, so no kernel can be tuned to known inputs
    (changing the file changes the inputs) while a regrade of the same files is bit-for-bit reproducible."""
    digest = hashlib.sha256(f"{salt}|{content_hash}".encode()).digest()
    return int.from_bytes(digest[:4], "little") & 0x7FFFFFFF


def case_seed(seed: int, test_id: str, case_index: int) -> int:
    """Independent, reproducible stream per (seed, test, case)."""
    digest = hashlib.sha256(f"{seed}|{test_id}|{case_index}".encode()).digest()
    return int.from_bytes(digest[:8], "little")


def case_dtype(case: dict[str, Any]) -> type:
    """The NumPy dtype a case names (float32 when it names none)."""
    name = case.get("dtype", "float32")
    if name not in DTYPES:
        raise ValueError(f"unsupported dtype {name!r} in rubric case {case}; use one of {sorted(DTYPES)}")
    return DTYPES[name]


# ------------------------------------------------------------------------------------- reference precision ----
# The references are sums of products of non-negative inputs (U(0, 1), as the course harness draws them).  For
# such sums the computed value of n terms in a precision with unit roundoff u has a relative error of at most
# gamma_n = n u / (1 - n u), whatever the order of summation (Higham, "Accuracy and Stability of Numerical
# Algorithms", 2nd ed., section 3.1, bound (3.5) with sum |x_i y_i| = |sum x_i y_i| for non-negative terms).
# A float32 reference is used where that bound stays within PRECISION_SHARE of the output dtype's rtol: the
# float16 tests (rtol 1e-2: gamma_2305 = 1.4e-4 in float32).  Float32 outputs (rtol 1e-5) keep float64
# accumulation (gamma_2305 = 2.6e-13).  Products of float16 values are exact in float32 (11 + 11 < 24 bits).
ACCUMULATORS = {"float32": np.float32, "float64": np.float64}
UNIT_ROUNDOFF = {"float32": 2.0**-24, "float64": 2.0**-53}
PRECISION_SHARE = 0.1
DEFAULT_TOLERANCE = (1e-5, 1e-8)  # np.allclose's defaults, for a dtype the rubric does not list


# The references' products take one BLAS thread (the same values on any machine, whatever its cores; cheaper beside
# the kernel processes): nkisim's process-wide limiter, shared with the emulator's runs and grouped runs in this
# process (nkisim/core/blas.py says why it calls OpenBLAS directly, reference-counted across threads).
one_blas_thread = blas.one_blas_thread


# Where a large input's values are drawn: the grading's input file for it when the grading asks (inputs_into), so
# that the values are written once, into the file's pages, instead of into fresh memory and then copied into the
# file (grader/runner.py KernelServers.input_array says why and when).
_INPUT_ARRAYS: contextvars.ContextVar[Callable[[tuple[int, ...], np.dtype], np.ndarray] | None] = (
    contextvars.ContextVar("grader_input_arrays", default=None))


@contextmanager
def inputs_into(make: Callable[[tuple[int, ...], np.dtype], np.ndarray] | None) -> Iterator[None]:
    """In this thread, :func:`new_input` asks ``make(shape, dtype)`` for its arrays (None: plain memory)."""
    token = _INPUT_ARRAYS.set(make)
    try:
        yield
    finally:
        _INPUT_ARRAYS.reset(token)


def new_input(shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    """An uninitialised C-ordered array for an input the caller fills completely before anyone else sees it: from
    the maker :func:`inputs_into` set in this thread, else ``np.empty``.  The values do not depend on where."""
    make = _INPUT_ARRAYS.get()
    shape = tuple(int(n) for n in shape)
    return make(shape, np.dtype(dtype)) if make is not None else np.empty(shape, dtype)


def accumulation_error_bound(terms: int, precision: str) -> float:
    """gamma_n: the relative error bound of a sum of ``terms`` non-negative products in ``precision``."""
    nu = terms * UNIT_ROUNDOFF[precision]
    return nu / (1.0 - nu) if nu < 1 else float("inf")


def precision_for(terms: int, dtype: str, tolerances: Mapping[str, tuple[float, float]]) -> str:
    """'exact', 'float32' or 'float64': the cheapest accumulation whose error bound is small next to the
    tolerance the output is judged with (see the comment above)."""
    if terms == 0:
        return "exact"
    rtol, _ = tolerances.get(dtype, DEFAULT_TOLERANCE)
    if accumulation_error_bound(terms, "float32") <= PRECISION_SHARE * rtol:
        return "float32"
    return "float64"


def hbm_traffic(trace: Any) -> tuple[int, int]:
    """(bytes read from HBM, bytes written to HBM) by the instructions of a trace (computed by the parent)."""
    read = written = 0
    for ins in trace.instrs:
        for opd in ins.srcs:
            if int(opd.region.buf) == 0:  # Buf.HBM
                read += opd.itemsize * opd.partitions * opd.free_elems
        for opd in ins.dsts:
            if int(opd.region.buf) == 0:
                written += opd.itemsize * opd.partitions * opd.free_elems
    return read, written


def io_bytes(inv: Invocation) -> int:
    """Bytes a correct kernel must move at least: every input read once and the output written once."""
    out_bytes = int(np.prod(inv.out_shape)) * inv.out_dtype.itemsize
    return sum(a.nbytes for a in inv.args) + out_bytes
