"""pytest plugin that runs aws-neuron/nki-library's own tests on nkisim (loaded by tools/nkilib_conformance.py).

nki-library's harness (test/utils/test_orchestrator.py) has a CPU-simulation mode (``--test-mode simulation``): it
skips compilation, calls ``test.utils.simulation_setup.run_simulator_inference`` for the "run on the device" step,
then validates the outputs against the test's torch golden with the test's own atol/rtol.  That module expects AWS's
``nki_cpu_simulator`` package; this plugin replaces exactly two of its functions and nothing else of the library:

* ``setup_simulation_mode``: instead of aliasing ``nki.*`` to AWS's simulator modules, installs nkisim's import
  fallback, so kernels' ``import nki`` / ``import nki.isa.constants`` / ``nki.dtype`` resolve to nkisim's own
  package layout (a missing module or name is then nkisim's failure, as it should be);
* ``simulate_kernel``: launches ``kernel[lnc](**inputs)`` on nkisim with the compiler's checks on (what the
  hardware run stands for), targeting the NeuronCore generation the harness asked for (``NKI_NC_VERSION``).

It also sorts cases into scope (``nkilib_scope``): trn3-only tests (``platforms(exclude=[trn2])``), trace-only
tests, multi-rank tests (``collective_ranks > 1``, skipped when the harness reaches inference) and the harness's own
large-shape simulation skips are out of scope, each with its reason.  Every case's outcome and time go to the JSON
lines file named by ``NKILIB_CONFORMANCE_OUT``.
"""

from __future__ import annotations

import importlib.machinery
import json
import os
import sys
import time
import types

import pytest

OUT_ENV = "NKILIB_CONFORMANCE_OUT"
CASES_ENV = "NKILIB_CONFORMANCE_CASES"  # 'smallest' (one case per test function, the default) or 'all'
MULTI_RANK = "out of scope: multi-rank (collective_ranks > 1)"


def _install_nkisim() -> None:
    from nkisim import _hook

    _hook.install()
    import nki

    if not getattr(nki, "__nkisim_fallback__", False):
        raise RuntimeError(f"'import nki' resolved to {nki.__file__}, not nkisim: run in an environment without the "
                           "real nki package")


def _simulate_kernel(kernel_func, kernel_input: dict, lnc_count: int) -> list:
    """The harness's ``simulate_kernel`` contract on nkisim: run the kernel, return its outputs as a list."""
    import nki

    _LAUNCHED[0] = True
    cleaned = {k.removesuffix(".must_alias_input"): v for k, v in kernel_input.items()}
    kernel = kernel_func if hasattr(kernel_func, "nki_frontend") else nki.jit(kernel_func)
    result = kernel[int(lnc_count)](**cleaned)
    if result is None:
        return []
    if isinstance(result, (list, tuple)):
        return list(result)
    return [result]


def _patch_harness() -> None:
    import test.utils.simulation_setup as sim

    original_inference = sim.run_simulator_inference

    def run_simulator_inference(kernel_under_test):
        if kernel_under_test.inference_args.collective_ranks > 1:
            pytest.skip(MULTI_RANK)
        # NKI_NC_VERSION is what AWS's simulator reads (set by the harness from --platform-target); nkisim reads
        # NEURON_PLATFORM_TARGET_OVERRIDE, which accepts the same genN spellings
        os.environ["NEURON_PLATFORM_TARGET_OVERRIDE"] = (
            kernel_under_test.compiler_input.platform_target.get_nc_gen())
        return original_inference(kernel_under_test)

    # The orchestrator reads ``_compiled_kernel`` after inference (to rename NEFF outputs); only the compilation
    # step sets it, and simulation skips compilation: no compiled kernel, the outputs already carry their names.
    from test.utils.test_orchestrator import Orchestrator

    if not hasattr(Orchestrator, "_compiled_kernel"):
        Orchestrator._compiled_kernel = None

    sim.SIMULATOR_AVAILABLE = True
    sim.setup_simulation_mode = _install_nkisim
    sim.simulate_kernel = _simulate_kernel
    sim.run_simulator_inference = run_simulator_inference


class _PrivateStandIn:
    """Serves the harness modules the public nki-library omits, when the checkout lacks them: conftest imports
    ``test.utils.scripts.remote_lock_scripts`` (the remote Trainium hosts' core-lock helpers) and
    ``test.utils.perf_analysis_private`` (trace analysis after a profiled hardware run).  Their names exist for
    the import only: a simulated run never locks a remote host nor analyses a device trace, so using one is an
    error.  The finder is appended to ``sys.meta_path``: a real module in the checkout is always found first."""

    MODULES = {"test.utils.scripts": (), "test.utils.scripts.remote_lock_scripts": ("LockResult", "LockStatus"),
               "test.utils.perf_analysis_private": ("analyze_trace",)}

    def find_spec(self, fullname, path=None, target=None):
        if fullname not in self.MODULES:
            return None
        return importlib.machinery.ModuleSpec(fullname, self, is_package=fullname == "test.utils.scripts")

    def create_module(self, spec):
        module = types.ModuleType(spec.name, "nkisim conformance stand-in for a harness module the public "
                                             "nki-library does not ship (hardware runs only)")
        for name in self.MODULES[spec.name]:
            module.__dict__[name] = _unavailable(name)
        return module

    def exec_module(self, module) -> None:
        return None


def _unavailable(name: str):
    class _Unavailable:
        def __init__(self, *args, **kwargs):
            raise RuntimeError(f"{name}: hardware-run harness code, not part of a simulated run")

        def __init_subclass__(cls, **kwargs):
            raise RuntimeError(f"{name}: hardware-run harness code, not part of a simulated run")

    _Unavailable.__name__ = name
    return _Unavailable


sys.meta_path.append(_PrivateStandIn())
_install_nkisim()


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config) -> None:
    _CONFIG[0] = config
    _patch_harness()
    config._nkilib_scope = {}  # nodeid -> reason it is out of scope
    config._nkilib_out = open(os.environ[OUT_ENV], "a", encoding="utf-8") if os.environ.get(OUT_ENV) else None


def _write(config, record: dict) -> None:
    out = getattr(config, "_nkilib_out", None)
    if out is not None:
        out.write(json.dumps(record) + "\n")
        out.flush()


@pytest.hookimpl(hookwrapper=True)
def pytest_collection_modifyitems(session, config, items):
    """Record the fast cases that the harness or the platform filter drops, with the reason."""
    fast = [item for item in items if item.get_closest_marker("fast")]
    yield
    kept = {item.nodeid for item in items}
    for item in fast:
        if item.nodeid in kept:
            continue
        marker = item.get_closest_marker("platforms")
        excluded = {getattr(p, "value", p) for p in (marker.kwargs.get("exclude") or [])} if marker else set()
        if "trn2" in excluded:
            reason = "trn3-only (platforms exclude trn2)"
        elif item.get_closest_marker("trace_only"):
            reason = "trace-only"
        else:
            reason = "deselected"
        _write(config, {"nodeid": item.nodeid, "outcome": "out-of-scope", "reason": reason, "seconds": 0.0})
    for item in items:
        if item.get_closest_marker("trace_only"):
            item.add_marker(pytest.mark.skip(reason="out of scope: trace-only test"))
    if os.environ.get(CASES_ENV, "smallest") == "smallest":
        _keep_smallest(config, items)


def _size(item) -> tuple:
    """How big a case is, from its parameters: the product of its positive integer parameters (shapes, counts),
    then its position (ties keep the harness's order)."""
    params = getattr(getattr(item, "callspec", None), "params", {}) or {}
    product = 1
    for value in params.values():
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            product *= value
    return (product,)


def _keep_smallest(config, items) -> None:
    """One case per test function: the smallest that the harness runs (not skipped as a large shape)."""
    groups: dict[str, list] = {}
    for item in items:
        groups.setdefault(item.nodeid.split("[", 1)[0], []).append(item)
    keep = set()
    for group in groups.values():
        runnable = [it for it in group if not any(m.name == "skip" for m in it.iter_markers())] or group
        keep.add(min(runnable, key=lambda it: (_size(it), group.index(it))).nodeid)
    dropped = [it for it in items if it.nodeid not in keep]
    items[:] = [it for it in items if it.nodeid in keep]
    if dropped:
        config.hook.pytest_deselected(items=dropped)


def pytest_collectreport(report) -> None:
    """A test module that does not import: its cases cannot be counted, so the module is reported whole."""
    if report.failed and _CONFIG[0] is not None:
        text = str(report.longrepr)
        last = [line for line in text.splitlines() if line.startswith("E ")]
        reason = last[-1][1:].strip() if last else text.strip().splitlines()[-1]
        # the library's own defects at the pinned commit: a source that does not parse, a module it imports that
        # does not exist, a name its test module uses without importing it (test_qkv_tkg: Platforms)
        library = any(s in text for s in ("IndentationError", "SyntaxError", "No module named 'nkilib_src",
                                          "NameError")) and f"{os.sep}nkisim{os.sep}" not in text
        _write(_CONFIG[0], {"nodeid": report.nodeid, "outcome": "library-defect" if library else "import-error",
                            "reason": reason[:300], "seconds": 0.0})


def _reason(report) -> str:
    if report.skipped and isinstance(report.longrepr, tuple):
        return str(report.longrepr[2])
    crash = getattr(getattr(report, "longrepr", None), "reprcrash", None)
    if crash is not None:
        return crash.message.strip().splitlines()[-1][:300] if crash.message.strip() else ""
    return str(report.longrepr)[-300:] if report.longrepr else ""


_started: dict = {}


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item) -> None:
    _started[item.nodeid] = time.perf_counter()
    _LAUNCHED[0] = False


_LAUNCHED = [False]  # whether the current case reached the kernel launch
_DEFECT: dict[str, str] = {}  # nodeid -> why its failure is the library's own


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A case that fails before its kernel is launched, with no nkisim frame in the traceback, fails in the
    library's own test code (at d2ad3a5: gen_mask_tkg's output descriptor reads a key its input generator spells
    with the must-alias suffix): out of scope, reported with the exception."""
    outcome = yield
    report = outcome.get_result()
    if call.when != "call" or not report.failed or call.excinfo is None:
        return
    paths = [str(entry.path) for entry in call.excinfo.traceback]
    in_nkisim = any(f"{os.sep}nkisim{os.sep}" in p for p in paths)
    # Out of memory in the test's own code (its inputs or torch golden: nki-library's cross-entropy at Qwen3-8B
    # size needs 15.8 GiB) is the machine's limit, out of scope.  Raised inside nkisim (the kernel's run: a NumPy
    # allocation, or an SBUF capacity error, which is a MemoryError too) it is nkisim's result: a failure.
    if not in_nkisim and (call.excinfo.errisinstance(MemoryError) or "MemoryError" in str(call.excinfo.value)[:2000]):
        _DEFECT[item.nodeid] = ("out of scope: the test's own data needs more memory than this machine allows the "
                                "run (MemoryError outside nkisim under tools/nkilib_conformance.py --memory-gib)")
        return
    if _LAUNCHED[0] or in_nkisim:
        return
    last = paths[-1] if paths else "?"
    _DEFECT[item.nodeid] = (f"library defect: fails in its test code before the kernel runs ({os.path.basename(last)}: "
                            f"{call.excinfo.typename}: {str(call.excinfo.value)[:120]})")


def pytest_runtest_logreport(report) -> None:
    config = _CONFIG[0]
    if report.when == "call" or (report.when == "setup" and (report.skipped or report.failed)):
        seconds = time.perf_counter() - _started.get(report.nodeid, time.perf_counter())
        if report.skipped:
            reason = _reason(report)
            outcome = "out-of-scope" if ("out of scope" in reason or "slow simulation" in reason.lower()) else "skipped"
            if "slow simulation" in reason.lower():
                reason = "large shape (the harness's slow-simulation skip)"
        elif report.nodeid in _DEFECT:
            reason = _DEFECT[report.nodeid]
            outcome = "out-of-scope" if reason.startswith("out of scope") else "library-defect"
        else:
            outcome, reason = report.outcome, "" if report.passed else _reason(report)
        _write(config, {"nodeid": report.nodeid, "outcome": outcome, "reason": reason, "seconds": round(seconds, 3)})


_CONFIG: list = [None]




def pytest_unconfigure(config) -> None:
    out = getattr(config, "_nkilib_out", None)
    if out is not None:
        out.close()
