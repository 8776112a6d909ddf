"""Which NKI API each submitted file is written in, and how the reports name it.

A file's imports say its API (``import nki`` / ``from nki...``: the current API; ``neuronxcc.nki``: the legacy
one).  The detection is nkibench.detect's -- the one the timing layer and the course scripts use -- with the
names and titles of nkisim's front-end registry, so the grader cannot disagree with either about a file.
Each file is detected on its own: part1 and part2 may be written in different APIs (each is then timed against
the staff kernel of its own API).  A file importing both namespaces cannot compile under either toolchain: its
tests score 0 with a message naming both imports; the other file is graded as usual.

Layering: depends on nkibench.detect and nkisim.frontends (pure data), nothing of the grader.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from nkibench.detect import DEFAULT_API, MixedAPIError, api_of_source, toolchain

MIXED = "mixed"
NONE = "none"  # the file imports no NKI namespace


@dataclass(frozen=True)
class FileAPI:
    """``found``: 'nki', 'legacy', 'mixed' or 'none' (as recorded); ``api``: the API it is graded and timed as
    ('nki' / 'legacy'; the default API when the file imports none; None for a mixed file)."""

    found: str
    api: str | None
    error: str | None = None


def detect_file(name: str, data: bytes) -> FileAPI:
    """The API of one submitted file (a file that does not parse counts as importing none: the static screen and
    the import check report why it cannot run)."""
    try:
        api = api_of_source(data.decode("utf-8", errors="replace"), name)
    except MixedAPIError as exc:
        # the first line is what the console table and CI annotations show: the problem and its cost
        return FileAPI(MIXED, None, f"{name} mixes the two NKI APIs (NKI-MIXED-NAMESPACES): this file scores 0\n"
                                    f"{exc}; use one namespace for every import (the handout's kernels use "
                                    "`import nki`)")
    if api is None:
        return FileAPI(NONE, DEFAULT_API)
    return FileAPI(api, api)


def detect_files(files: Mapping[str, bytes]) -> dict[str, FileAPI]:
    return {name: detect_file(name, data) for name, data in sorted(files.items())}


def namespace(api: str) -> str:
    """What kernels of ``api`` import (``nki`` / ``neuronxcc.nki``), from nkisim's front-end registry."""
    from nkisim.frontends import get

    return get(api).namespace


def label(found: str) -> str:
    """Short label for tables: ``nki``, ``neuronxcc.nki (legacy)``, ``mixed``, ``no NKI import``."""
    if found == MIXED:
        return "mixed (both namespaces)"
    if found == NONE:
        return "no NKI import"
    return "nki" if found == "nki" else f"{namespace(found)} (legacy)"


def summary(apis: Mapping[str, str]) -> str:
    """One phrase for every report: ``API nki (part1/kernels.py, part2/conv2d.py)`` or per file when they differ."""
    if not apis:
        return "API unknown"
    groups: dict[str, list[str]] = {}
    for name, found in sorted(apis.items()):
        groups.setdefault(found, []).append(name)
    return "API " + "; ".join(f"{label(found)} ({', '.join(names)})" for found, names in groups.items())


def toolchains(apis: Mapping[str, str], backend: str) -> dict[str, dict[str, str]]:
    """For every API the submission uses: which timing backend ran its kernels and the SDK version (result.json's
    ``toolchains``; every report prints it): ``{"backend": "nkisim" | "neuron-nki" | "neuron-legacy" | "none",
    "sdk": "nkisim 0.1.0" | "nki 0.6.0" | "neuronx-cc 2.21.0", "detail": ...}``."""
    out: dict[str, dict[str, str]] = {}
    for found in sorted(set(apis.values())):
        api = DEFAULT_API if found == NONE else found
        if api == MIXED or api in out:
            continue
        if backend == "nkisim":
            import nkisim

            out[api] = {"backend": "nkisim", "sdk": f"nkisim {nkisim.__version__}",
                        "detail": "nkisim's performance model (estimates, not measurements)"}
            continue
        tc = toolchain(api)
        real = tc.kind == "neuron"
        out[api] = {
            "backend": {"legacy": "neuron-legacy", "nki": "neuron-nki"}[api] if real else "none",
            "sdk": (f"neuronx-cc {tc.version}" if api == "legacy" else f"nki {tc.version}") if real else "",
            "detail": tc.detail,
        }
    return out


def toolchain_summary(chains: Mapping[str, Mapping[str, str]]) -> str:
    """``modelled by nkisim 0.1.0`` / ``timed on Trainium by neuron-nki (nki 0.6.0)``; one clause per API."""
    parts = []
    for api, tc in sorted(chains.items()):
        if tc["backend"] == "nkisim":
            clause = f"modelled by {tc['sdk']}"
        elif tc["backend"] == "none":
            clause = "no toolchain on this machine"
        else:
            clause = f"timed on Trainium by {tc['backend']} ({tc['sdk']})"
        parts.append(f"{api}: {clause}" if len(chains) > 1 else clause)
    return "; ".join(parts)
