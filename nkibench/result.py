"""What a timing run produces, whatever the backend: :class:`Timing` (one set of timed iterations) and
:class:`Measurement` (the ordinary timing, plus the profiled run's when a profile was asked for)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType

# Which backend produced a figure.  "neuron-nki" is the current SDK (NKI 0.4+, ``import nki``) timed by the
# Neuron runtime's Python API; "neuron-legacy" is ``neuronxcc.nki``'s nki.benchmark (SDK <= 2.29).
BACKENDS = ("nkisim", "neuron-legacy", "neuron-nki")
APIS = ("legacy", "nki")


def nearest_rank(samples: Sequence[float], p: float) -> float:
    """The p-th percentile as one of the samples (nearest rank, as neuron-bench and nki.benchmark report it)."""
    if not samples:
        raise ValueError("no samples")
    s = sorted(samples)
    k = min(len(s) - 1, max(0, math.ceil(p * len(s) / 100) - 1)) if p > 0 else 0
    return float(s[k])


def check_latency(value: float, what: str) -> float:
    """A latency must be a positive finite number: a zero or NaN means nothing was timed."""
    v = float(value)
    if not math.isfinite(v) or v <= 0:
        raise ValueError(f"{what} is {value!r}: not a positive finite latency")
    return v


@dataclass(frozen=True)
class Timing:
    """One set of timed iterations of one kernel on one input.

    ``samples_us`` holds every iteration's time when the backend reports them (the runtime's device timings;
    nkisim's deterministic model gives the same value for each); nki.benchmark reports percentiles only, so it
    is empty there.  ``dge_disabled``: compiled with ``--disable-dge`` (what the course's profile runs do).
    ``profiled``: the timed iterations are those of a run that wrote profile files.
    """

    p50_us: float
    p99_us: float
    warmup: int
    iterations: int
    backend: str
    label: str
    target: str
    api: str
    versions: Mapping[str, str] = field(default_factory=dict)
    dge_disabled: bool = False
    profiled: bool = False
    measured: bool = True  # False for a model's estimate
    samples_us: tuple[float, ...] = ()
    profile_files: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.backend not in BACKENDS:
            raise ValueError(f"unknown backend {self.backend!r}")
        if self.api not in APIS:
            raise ValueError(f"unknown API {self.api!r}")
        check_latency(self.p50_us, "p50 latency")
        check_latency(self.p99_us, "p99 latency")
        if self.warmup < 0 or self.iterations < 1:
            raise ValueError(f"warmup {self.warmup} / iterations {self.iterations}: need warmup >= 0, iterations >= 1")
        object.__setattr__(self, "versions", MappingProxyType(dict(self.versions)))

    def __reduce__(self):
        # the read-only versions mapping does not pickle: rebuild from a plain dict (timings travel back from the
        # harness's worker processes, nkibench.forkpool)
        fields = {f: getattr(self, f) for f in self.__dataclass_fields__}
        fields["versions"] = dict(self.versions)
        return _timing, (fields,)

    def version_text(self) -> str:
        return ", ".join(f"{k} {v}" for k, v in self.versions.items())

    def as_dict(self) -> dict:
        return {
            "p50_us": self.p50_us, "p99_us": self.p99_us, "warmup": self.warmup, "iterations": self.iterations,
            "backend": self.backend, "label": self.label, "target": self.target, "api": self.api,
            "versions": dict(self.versions), "dge_disabled": self.dge_disabled, "profiled": self.profiled,
            "measured": self.measured, "samples_us": list(self.samples_us), "profile_files": list(self.profile_files),
        }


def _timing(fields: dict) -> Timing:
    return Timing(**fields)


@dataclass(frozen=True)
class Measurement:
    """The ordinary timing (the one that is scored) and, when a profile was asked for, the profile run.

    ``profiled`` is the timing of the run that wrote the profile when that run was compiled differently from the
    ordinary one (the course profiles with DGE off), else None.  ``profile_files`` lists every file written;
    ``notes`` are sentences the scripts print as they are (how the profile relates to the ordinary timing).
    """

    timing: Timing
    profiled: Timing | None = None
    profile_files: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
