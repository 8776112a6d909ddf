"""Sentences the scripts print about a measurement, so both say the same thing the same way."""

from __future__ import annotations

import os

from nkibench.result import Measurement, Timing

DGE_OFF_SHORT = "compiled with DGE off, as the course's profiles are"
# Why the course profiles with DGE off: DMAs issued by the DGE hardware only reach a profile when the capture
# asks for DGE notifications (nki/guides/use-neuron-profile.rst, Step 3, --enable-dge-notifs); with
# --disable-dge every DMA is a prebuilt descriptor the profiler records.
DGE_OFF_WHY = (
    "Profile runs are compiled with --disable-dge, as the course's are (so the profile shows every DMA): the "
    "runtime then prebuilds every DMA's descriptors instead of the DGE hardware generating them, which changes "
    "what DMAs cost. The profile files show that run; scores use the ordinary run."
)
NO_DGE_SWITCH = (
    "Profile: of the timed NEFF itself. The current NKI API has no compiler switch to turn DGE off (each dma_copy "
    "picks its dge_mode), so the profiled program is the timed one."
)


def profiled_phrase(t: Timing) -> str:
    return DGE_OFF_SHORT if t.dge_disabled else "the run that wrote the profile"


def profiled_line(m: Measurement, *, digits: int = 2, prefix: str = "Profiled run: ", extra: str = "") -> str | None:
    """The profile run's latency, labelled, beside the ordinary one; None when nothing was timed apart.
    ``extra`` goes first inside the parentheses (part 2 puts the run's MFU there)."""
    p = m.profiled
    if p is None:
        return None
    first = f"{extra}; " if extra else ""
    return (f"{prefix}{p.p99_us:.{digits}f} \u03bcs ({first}p99 of {p.iterations} iterations, {profiled_phrase(p)}; "
            f"not scored: the ordinary run took {m.timing.p99_us:.{digits}f} \u03bcs)")


def _size(n: int) -> str:
    if n >= 1_000_000:
        return f"{n / 1e6:.1f} MB"
    return f"{n / 1e3:.0f} KB" if n >= 1000 else f"{n} B"


def files_line(files: tuple[str, ...] | list[str]) -> str:
    """The profile files written, each with its size, and their total: profiles can be large, so every run says
    what it wrote (``v0.neff (0.4 MB), v0.summary.txt (2 KB), v0.html (7.7 MB): 8.1 MB``)."""
    present = [(f, os.path.getsize(f)) for f in files if os.path.exists(f)]
    if not present:
        return "(no profile files were produced)"
    listed = ", ".join(f"{f} ({_size(n)})" for f, n in present)
    return f"{listed}: {_size(sum(n for _, n in present))}" if len(present) > 1 else listed
