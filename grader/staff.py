"""Where the staff kernels live and which version of them is present (no grader imports: the bottom layer).

The runner hides this directory from student code, thresholds hashes it into its cache entries, and calibrate
runs its kernels; keeping the lookup here lets those modules depend on it without depending on each other.

There is one staff reference per NKI API (``nki``: the current ``import nki`` API, ``legacy``: ``neuronxcc.nki``),
and a submission is timed against the one of its own API.  Layout (relative to :func:`reference_dir`)::

    part1/kernels.py, part2/conv2d.py                  the current API (the default edition)
    legacy/part1/kernels.py, legacy/part2/conv2d.py    the legacy API
    relaxed/part2/conv2d.py, legacy/relaxed/...        the relaxed conv (the unoptimised-but-reasonable tier)

:func:`reference_file` is the one lookup; it reads each candidate's imports (nkibench.detect, the same
detection the grader applies to submissions) and only returns a file written in the API asked for, so a tree
that still has the legacy kernels at the top level (before the current-API edition) serves the legacy API from
there and has no current-API reference, instead of timing one API against the other's kernel.
"""

from __future__ import annotations

import functools
import hashlib
import os
from pathlib import Path

from nkibench.detect import MixedAPIError, api_of_source

APIS = ("nki", "legacy")  # nkibench.detect's API keys (= nkisim.frontends' keys)
# where each API's staff kernels sit, in order of preference
_LAYOUT = {"nki": ("",), "legacy": ("legacy", "")}
# The rubric's files (part1/kernels.py, part2/conv2d.py): what reference_fingerprint hashes.
STAFF_FILES = ("part1/kernels.py", "part2/conv2d.py")
RELAXED_CONV = "part2/conv2d.py"


def reference_dir() -> Path:
    """The staff solutions (GRADER_REFERENCE_DIR overrides: on Gradescope they stay in the root-only source tree)."""
    env = os.environ.get("GRADER_REFERENCE_DIR")
    return Path(env) if env else Path(__file__).with_name("reference")


def _check_api(api: str) -> None:
    if api not in APIS:
        raise ValueError(f"unknown NKI API {api!r} (expected one of {', '.join(APIS)})")


@functools.lru_cache(maxsize=64)
def _api_of_file(path: str, mtime_ns: int) -> str | None:
    try:
        return api_of_source(Path(path).read_text(encoding="utf-8", errors="replace"), path)
    except MixedAPIError:
        return None


def file_api(path: Path) -> str | None:
    """The API a staff file is written in ('nki' / 'legacy'; None: no NKI import, both, or no such file)."""
    try:
        return _api_of_file(str(path), path.stat().st_mtime_ns)
    except OSError:
        return None


def reference_file(api: str, rel_file: str, *, relaxed: bool = False) -> Path | None:
    """The staff kernel for the rubric's ``rel_file`` (``part1/kernels.py``, ``part2/conv2d.py``) in ``api``, or the
    relaxed one; None when this tree has none in that API (the student release has none at all)."""
    _check_api(api)
    ref = reference_dir()
    for sub in _LAYOUT[api]:
        base = ref / sub if sub else ref
        path = base / "relaxed" / rel_file if relaxed else base / rel_file
        if file_api(path) == api:
            return path
    return None


def relaxed_conv_file(api: str) -> Path | None:
    """The unoptimised-but-reasonable staff conv of ``api`` (the relaxed latency tier), if shipped."""
    return reference_file(api, RELAXED_CONV, relaxed=True)


def reference_available(api: str | None = None) -> bool:
    """Whether this tree has ``api``'s staff conv (the kernel every reference-based target comes from); without
    ``api``: any API's (the staff tree, as opposed to the student release)."""
    if api is None:
        return bool(available_apis())
    return reference_file(api, RELAXED_CONV) is not None


def available_apis() -> tuple[str, ...]:
    return tuple(api for api in APIS if reference_file(api, RELAXED_CONV) is not None)


def reference_fingerprint(api: str) -> str | None:
    """Hash of ``api``'s staff kernels the targets come from (None where they are not shipped, e.g. the release)."""
    if not reference_available(api):
        return None
    ref = reference_dir()
    files = [reference_file(api, f) for f in STAFF_FILES] + [relaxed_conv_file(api)]
    h = hashlib.sha256()
    for f in files:
        if f is not None:
            h.update(f.relative_to(ref).as_posix().encode() + b"\0")
            h.update(f.read_bytes())
    return h.hexdigest()[:12]
