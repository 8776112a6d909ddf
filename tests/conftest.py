"""Shared test setup: make ``import neuronxcc.nki`` resolve to nkisim for the whole session.

``make setup`` installs the project (editable) and the import fallback as a .pth file; a bare checkout or a venv
made without them has neither, so put the repository on sys.path when nkisim is not importable and install the
same finder here.  The finder is appended last to sys.meta_path, so a real neuronx-cc still wins.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import pytest

if importlib.util.find_spec("nkisim") is None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from nkisim import _hook  # noqa: E402

_hook.install()


@pytest.fixture(autouse=True, scope="session")
def _grader_state_of_the_session(tmp_path_factory):
    """The grader's registry of private directories (grader/seeds.py: every batch's secret seed and reference cache)
    lives in a directory of this session, not the user's ~/.cache/asst4-grader: each kernel process of every later
    grading on the machine masks each registered directory that still exists with a mount of its own, and pytest keeps
    its last runs' directories, so a suite run left dozens (60-87 on the development machine: 2-5 ms of CPU and as
    many mount system calls per kernel process).  A test that sets GRADER_STATE_DIR itself keeps its own."""
    if os.environ.get("GRADER_STATE_DIR"):
        yield
        return
    os.environ["GRADER_STATE_DIR"] = str(tmp_path_factory.mktemp("grader-state"))
    try:
        yield
    finally:
        os.environ.pop("GRADER_STATE_DIR", None)


def pytest_terminal_summary(terminalreporter) -> None:
    """Say loudly, at the end of the run, when the HTML profile's browser tests could not run."""
    from nkisim.perf.browser import unavailable_reason

    reason = unavailable_reason()
    if reason:
        terminalreporter.write_sep("!", reason, yellow=True, bold=True)
