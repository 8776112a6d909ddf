"""tools/nkilib_conformance.py end to end on a tiny stand-in for an nki-library checkout (written here, none of the
library's code): the plugin's sorting of cases into passed, failed, out of scope (trn3-only, trace-only, multi-rank,
large shape, the test's own data out of memory), library defects and test modules that do not import, the report's
lines and totals, its JSON and exit status.  A MemoryError raised inside nkisim (the kernel's run: NumPy's, or an
SBUF capacity error, which is a MemoryError too) is a failure; only one raised by the test's own code before the
kernel runs is out of scope."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
TOOL = REPO / "tools" / "nkilib_conformance.py"

CONFTEST = '''
import pytest


def pytest_addoption(parser):
    parser.addoption("--test-mode", default="hardware")
    parser.addoption("--platform-target", default="trn2")
    parser.addoption("--output-directory", default=".")
    parser.addoption("--disable-no-tests-failure", action="store_true")


def pytest_configure(config):
    for name in ("fast", "platforms", "trace_only"):
        config.addinivalue_line("markers", f"{name}: stand-in marker")


def pytest_collection_modifyitems(config, items):
    target = config.getoption("--platform-target")
    kept = []
    for item in items:
        marker = item.get_closest_marker("platforms")
        if marker is not None and target in (marker.kwargs.get("exclude") or []):
            continue
        kept.append(item)
    items[:] = kept
'''

SIMULATION_SETUP = '''
"""Stand-in for the library's simulation module: the plugin replaces its two device-facing functions."""
SIMULATOR_AVAILABLE = False


def setup_simulation_mode():
    raise RuntimeError("the stand-in's own simulator: the plugin must replace this")


def simulate_kernel(kernel_func, kernel_input, lnc_count):
    raise RuntimeError("the stand-in's own simulator: the plugin must replace this")


def run_simulator_inference(kernel_under_test):
    setup_simulation_mode()
    return simulate_kernel(kernel_under_test.kernel, kernel_under_test.inputs, kernel_under_test.lnc)
'''

ORCHESTRATOR = '''
class Orchestrator:
    """Stand-in: the plugin gives the class a ``_compiled_kernel`` attribute."""
'''

TESTS = '''
from types import SimpleNamespace

import numpy as np
import pytest

import nki
import nki.isa as nisa
import nki.language as nl
from test.utils import simulation_setup as sim


@nki.jit
def add(a, b):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    ta = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
    tb = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=ta, src=a)
    nisa.dma_copy(dst=tb, src=b)
    nisa.tensor_tensor(dst=ta, data1=ta, data2=tb, op=nl.add)
    nisa.dma_copy(dst=out, src=ta)
    return out


@nki.jit
def huge_output(a, b):
    return nl.ndarray((128, 1 << 38), dtype=nl.float32, buffer=nl.shared_hbm)


@nki.jit
def sbuf_overflow(a, b):
    t = nl.ndarray((128, 1 << 20), dtype=nl.float32, buffer=nl.sbuf)
    out = nl.ndarray((128, 4), dtype=nl.float32, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=t[:, 0:4])
    return out


def infer(kernel, n=4, ranks=1):
    a = np.arange(n * 4, dtype=np.float32).reshape(n, 4)
    b = np.ones((n, 4), np.float32)
    kut = SimpleNamespace(kernel=kernel, inputs={"a": a, "b": b}, lnc=1,
                          inference_args=SimpleNamespace(collective_ranks=ranks),
                          compiler_input=SimpleNamespace(platform_target=SimpleNamespace(get_nc_gen=lambda: "gen3")))
    return a, b, sim.run_simulator_inference(kut)


@pytest.mark.fast
@pytest.mark.parametrize("n", [8, 4])
def test_add(n):
    a, b, (out,) = infer(add, n)
    np.testing.assert_allclose(out, a + b)


@pytest.mark.fast
def test_add_wrong_golden():
    a, b, (out,) = infer(add)
    np.testing.assert_allclose(out, a - b)


@pytest.mark.fast
def test_kernel_out_of_memory_in_nkisim():
    infer(huge_output)


@pytest.mark.fast
def test_kernel_sbuf_capacity_error():
    infer(sbuf_overflow)


@pytest.mark.fast
def test_inputs_out_of_memory():
    np.empty(1 << 44, dtype=np.float32)  # the test's own data: 64 TiB


@pytest.mark.fast
def test_library_defect_before_launch():
    {"a": 1}["a.must_alias_input"]


@pytest.mark.fast
@pytest.mark.platforms(exclude=["trn2"])
def test_trn3_only():
    raise AssertionError("never runs on trn2")


@pytest.mark.fast
@pytest.mark.trace_only
def test_trace_only():
    raise AssertionError("never runs in simulation")


@pytest.mark.fast
def test_multi_rank():
    infer(add, ranks=2)


@pytest.mark.fast
def test_large_shape():
    pytest.skip("Slow simulation: skipping a large shape")


def test_not_fast():
    raise AssertionError("not a fast test")
'''


@pytest.fixture(scope="module")
def conformance(tmp_path_factory):
    """The tool run once on the stand-in checkout: (exit status, stdout, {nodeid: record})."""
    base = tmp_path_factory.mktemp("nkilib-standin")
    lib = base / "checkout"
    files = {
        "conftest.py": CONFTEST,
        "test/__init__.py": "",
        "test/utils/__init__.py": "",
        "test/utils/simulation_setup.py": SIMULATION_SETUP,
        "test/utils/test_orchestrator.py": ORCHESTRATOR,
        "test/integration/__init__.py": "",
        "test/integration/test_kernels.py": TESTS,
        # a module that names an instruction nkisim lacks (nkisim's failure) and one that does not parse (the
        # library's own defect)
        "test/integration/test_missing_api.py": "from nki.isa import no_such_instruction  # noqa\n",
        "test/integration/test_broken_source.py": "def test_x(:\n",
    }
    for rel, text in files.items():
        (lib / rel).parent.mkdir(parents=True, exist_ok=True)
        (lib / rel).write_text(textwrap.dedent(text).lstrip())
    env = base / "env"
    (env / "bin").mkdir(parents=True)
    (env / "bin" / "python").write_text(f"#!/bin/sh\nexec {sys.executable} \"$@\"\n")
    (env / "bin" / "python").chmod(0o755)
    (env / ".nkisim-nkilib-ready").write_text("ok\n")
    out = base / "cases.json"
    proc = subprocess.run([sys.executable, str(TOOL), "--nkilib", str(lib), "--env", str(env), "--json", str(out),
                           "--timeout", "300", "--memory-gib", "16"],
                          capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})
    cases = {c["nodeid"].split("::")[-1] if "::" in c["nodeid"] else c["nodeid"]: c
             for c in json.loads(out.read_text())["cases"]} if out.exists() else {}
    return proc.returncode, proc.stdout + proc.stderr, cases


def test_each_case_is_sorted_with_its_reason(conformance):
    status, output, cases = conformance
    outcome = {name: c["outcome"] for name, c in cases.items()}
    assert outcome == {
        "test_add[4]": "passed",  # the smallest case of the function only
        "test_add_wrong_golden": "failed",
        "test_kernel_out_of_memory_in_nkisim": "failed",
        "test_kernel_sbuf_capacity_error": "failed",
        "test_inputs_out_of_memory": "out-of-scope",
        "test_library_defect_before_launch": "library-defect",
        "test_trn3_only": "out-of-scope",
        "test_trace_only": "out-of-scope",
        "test_multi_rank": "out-of-scope",
        "test_large_shape": "out-of-scope",
        "test/integration/test_missing_api.py": "import-error",
        "test/integration/test_broken_source.py": "library-defect",
    }, output
    reason = {name: c["reason"] for name, c in cases.items()}
    # the 128 TiB output is refused by nkisim's HBM capacity rule (nkisim_hbm_capacity), whose NKICapacityError is a
    # MemoryError raised inside nkisim: a failure of the case, never out of scope
    assert "NKICapacityError" in reason["test_kernel_out_of_memory_in_nkisim"]
    assert "SBUF over-subscribed" in reason["test_kernel_sbuf_capacity_error"]
    assert reason["test_inputs_out_of_memory"].startswith("out of scope: the test's own data needs more memory")
    assert "KeyError" in reason["test_library_defect_before_launch"]
    assert reason["test_trn3_only"] == "trn3-only (platforms exclude trn2)"
    assert "trace-only" in reason["test_trace_only"] and "multi-rank" in reason["test_multi_rank"]
    assert reason["test_large_shape"] == "large shape (the harness's slow-simulation skip)"
    assert "no_such_instruction" in reason["test/integration/test_missing_api.py"]
    assert "SyntaxError" in reason["test/integration/test_broken_source.py"]


def test_the_report_counts_and_exit_status(conformance):
    status, output, _ = conformance
    assert status == 1, output  # failures and a module that does not import
    assert "1 passed, 3 failed of 4 in-scope fast cases (25.0%); 1 test modules that do not import; 7 out of scope" \
        in output, output
    assert "PASS " in output and "test_add[4]" in output and "FAIL " in output
    assert "IMPORT ERROR test/integration/test_missing_api.py" in output
    assert "(address space limited to 16.0 GiB)" in output
