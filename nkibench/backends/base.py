"""The one interface every timing backend implements, and the profile request the scripts pass to it."""

from __future__ import annotations

import math
import os
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from nkibench.result import Measurement

LEGACY_STYLES = ("benchmark", "capture")


@dataclass(frozen=True)
class ProfileRequest:
    """Write profile files ``STEM.*`` (STEM may carry a directory, which must exist).

    ``dge_off``: compile the profile run with DGE off.  None means the course's practice for the kernel's API:
    the legacy course profiles with ``--disable-dge`` (so the profiler sees every DMA); the current API has no
    such compiler switch (each ``dma_copy`` chooses its ``dge_mode``), so the profile is of the timed NEFF.
    ``legacy_style`` (legacy hardware only, kept as each script always did it): "benchmark" lets nki.benchmark
    write the NTFF (part 1), "capture" runs ``neuron-profile capture`` on the saved NEFF (part 2).
    ``html``: nkisim also writes the offline HTML page.
    ``perfetto``: nkisim also writes ``STEM.ntff``, the timeline as Perfetto JSON: about 1.5 KB per instruction
    (62 MB for the handout's Part 2 starting point at 224x224), so only when asked (``python -m nkisim.profile
    trace STEM.neff -o STEM.json`` makes it later from the .neff).  The hardware backends always write their NTFF:
    there it is the profile.
    """

    stem: str
    dge_off: bool | None = None
    legacy_style: str = "benchmark"
    html: bool = True
    perfetto: bool = False

    def __post_init__(self) -> None:
        if not self.stem or self.stem.endswith(os.sep):
            raise ValueError(f"profile name {self.stem!r}: give a file stem such as 'conv' or 'out/conv'")
        if self.legacy_style not in LEGACY_STYLES:
            raise ValueError(f"legacy_style must be one of {LEGACY_STYLES}, not {self.legacy_style!r}")
        directory = os.path.dirname(os.path.abspath(self.stem))
        if not os.path.isdir(directory):
            raise ValueError(f"profile name {self.stem!r}: the directory {directory} does not exist")


def check_counts(warmup: Any, iterations: Any) -> tuple[int, int]:
    for name, v, least in (("warmup", warmup, 0), ("iterations", iterations, 1)):
        if isinstance(v, bool) or not isinstance(v, int) or v < least:
            raise ValueError(f"{name} must be an integer >= {least}, not {v!r}")
    return warmup, iterations


def call_kernel(fn: Callable[[], Any]) -> Any:
    """Run a launch; a kernel calling sys.exit would end the script silently, so it becomes an error."""
    try:
        return fn()
    except SystemExit as exc:
        raise RuntimeError(f"the kernel called sys.exit({exc.code!r}) instead of returning its output") from None


def positive(value: Any) -> bool:
    try:
        v = float(value)
    except (TypeError, ValueError):
        return False
    return math.isfinite(v) and v > 0


class Launch:
    """One launch's outputs, and the timing of the same kernel on the same inputs (``nkibench.launch_once``).

    ``measure`` takes ``warmup``, ``iterations`` and ``profile`` as :meth:`Backend.measure` does.  A backend whose
    launch already holds everything a timing needs (nkisim: the run's instruction trace) times that launch
    instead of running the kernel again."""

    __slots__ = ("outputs", "_measure")

    def __init__(self, outputs: Any, measure: Callable[..., Measurement]) -> None:
        self.outputs = outputs
        self._measure = measure

    def measure(self, *, warmup: int, iterations: int, profile: ProfileRequest | None = None) -> Measurement:
        return self._measure(warmup=warmup, iterations=iterations, profile=profile)


class Backend(ABC):
    """Runs kernels of one NKI API on one toolchain: ``launch`` for outputs, ``measure`` for latency."""

    name: str = ""

    def __init__(self, api: str) -> None:
        self.api = api

    @abstractmethod
    def versions(self) -> dict[str, str]:
        """Tool name -> version, in the order they are worth printing."""

    @abstractmethod
    def target(self) -> str:
        """The NeuronCore generation timed or modelled (trn2, trn1, ...)."""

    @abstractmethod
    def label(self) -> str:
        """Short label printed beside every latency ("nkisim estimate, trn2", "Trainium (...)")."""

    def describe(self) -> str:
        """The label with every tool version not already in it: the scripts' ``Backend:`` line."""
        label = self.label()
        extra = [f"{k} {v}" for k, v in self.versions().items() if f"{k} {v}" not in label]
        return f"{label} [{', '.join(extra)}]" if extra else label

    @abstractmethod
    def launch(self, kernel, args: tuple, kwargs: Mapping[str, Any] | None = None, *, simulate: bool = False):
        """Run the kernel once on ``args`` and return its output(s) as NumPy arrays."""

    @abstractmethod
    def measure(self, kernel, args: tuple, kwargs: Mapping[str, Any] | None = None, *, warmup: int,
                iterations: int, profile: ProfileRequest | None = None) -> Measurement:
        """Time the kernel (and write profile files when asked); never returns a zero or a stub's timing."""

    def launch_once(self, kernel, args: tuple, kwargs: Mapping[str, Any] | None = None) -> Launch:
        """Run the kernel for its outputs and keep what timing it needs: here a launch, then a timing of its own
        (hardware runs the NEFF again either way); nkisim overrides it to cost the launch's own trace."""
        outputs = self.launch(kernel, args, kwargs)

        def measure(*, warmup: int, iterations: int, profile: ProfileRequest | None = None) -> Measurement:
            return self.measure(kernel, args, kwargs, warmup=warmup, iterations=iterations, profile=profile)

        return Launch(outputs, measure)
