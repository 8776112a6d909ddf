"""Helpers shared by the tests/test_nkisim_*.py files (the emulator's own test suite)."""

from __future__ import annotations

import contextlib
import importlib.util
import sys
from pathlib import Path

import pytest

from nkisim.core.rules import RULES, NKIError

KERNELS_DIR = Path(__file__).resolve().parent / "kernels"


def load_kernels(name: str):
    """Import tests/kernels/<name>.py under a private module name (part1/kernels.py may also be importable)."""
    modname = f"nkisim_test_kernels_{name}"
    mod = sys.modules.get(modname)
    if mod is None:
        spec = importlib.util.spec_from_file_location(modname, KERNELS_DIR / f"{name}.py")
        mod = importlib.util.module_from_spec(spec)
        sys.modules[modname] = mod
        spec.loader.exec_module(mod)
    return mod


def load_repo_module(rel: str, name: str):
    """Import the file at ``rel`` (relative to the repository's root: a staff kernel, a test's kernels) as module
    ``name``, registered in sys.modules (kernels whose functions are looked up by module, e.g. for pickling)."""
    spec = importlib.util.spec_from_file_location(name, KERNELS_DIR.parents[1] / rel)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


@contextlib.contextmanager
def raises_rule(code: str, *fragments: str):
    """Expect the catalogue error ``code``; each fragment must appear in its message.

    test_nkisim_constraints.py scans the test sources for ``raises_rule("<code>"`` to check that every rule of
    the catalogue is exercised, so always spell the code as a string literal.
    """
    assert code in RULES, f"unknown rule code {code}"
    with pytest.raises(NKIError) as info:
        yield info
    assert info.value.code == code, f"expected {code}, got {info.value.code}: {info.value}"
    msg = str(info.value)
    for frag in fragments:
        assert frag in msg, f"{frag!r} not in {msg!r}"
    if RULES[code].official:
        assert msg.endswith(f"#{code.replace('_', '-')}"), msg
