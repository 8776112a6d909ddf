"""Shared test setup: make ``import neuronxcc.nki`` resolve to nkisim for the whole session.

``make setup`` installs the project (editable) and the import fallback as a .pth file; a bare checkout or a venv
made without them has neither, so put the repository on sys.path when nkisim is not importable and install the
same finder here.  The finder is appended last to sys.meta_path, so a real neuronx-cc still wins.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

if importlib.util.find_spec("nkisim") is None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from nkisim import _hook  # noqa: E402

_hook.install()


def pytest_terminal_summary(terminalreporter) -> None:
    """Say loudly, at the end of the run, when the HTML profile's browser tests could not run."""
    from nkisim.perf.browser import unavailable_reason

    reason = unavailable_reason()
    if reason:
        terminalreporter.write_sep("!", reason, yellow=True, bold=True)
