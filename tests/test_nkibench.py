"""nkibench, the one timing layer of the scripts: backend choice, the nkisim backend against nki.benchmark, and the
two hardware backends against fakes of AWS's toolchains (tests/fixtures/nkibench: written from the documented
APIs; we have no Trainium).  The hardware paths must fail loudly, never time a stub or report a zero."""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import json
import math
import os
import shutil
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import nkibench
from nkibench import detect, envcheck
from nkibench.labels import NO_DGE_SWITCH
from nkibench.result import Measurement, Timing, nearest_rank

REPO = Path(__file__).resolve().parents[1]
FIX = REPO / "tests" / "fixtures" / "nkibench"
NEURON_VARS = ("NEURON_RT_VISIBLE_CORES", "NEURON_RT_NUM_CORES", "NEURON_RT_EXEC_TIMEOUT", "NEURON_RT_INSPECT_ENABLE",
               "NEURON_LOGICAL_NC_CONFIG", "NEURON_PLATFORM_TARGET_OVERRIDE", "NKI_ARTIFACTS_DIR", "NRTPY_PYTHON")

NKI_KERNELS = '''
import nki
import nki.language as nl


@nki.jit
def vector_add(a_input, b_input):
    return a_input + b_input


@nki.jit
def scaled_add(a_input, b_input, scale=2):
    return a_input + scale * b_input


@nki.jit
def broken(a_input, b_input):
    raise ValueError("tile too large for SBUF")


def undecorated(a_input, b_input):
    return a_input + b_input


def make_nested():
    @nki.jit
    def nested(a_input, b_input):
        return a_input - b_input
    return nested
'''


def _calls(log: Path) -> list[dict]:
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def _tool(path: Path, body: str) -> Path:
    path.write_text(body)
    path.chmod(0o755)
    return path


def _profiler(bin_dir: Path, name: str) -> Path:
    """The fake profiler CLI installed as ``name`` (neuron-explorer, or the older neuron-profile)."""
    script = FIX / "fake_profiler.py"
    return _tool(bin_dir / name, f'#!/bin/sh\nFAKE_PROFILER_NAME={name} exec "{sys.executable}" "{script}" "$@"\n')


@pytest.fixture
def fake_device(tmp_path, monkeypatch):
    """The fake NeuronDevice (core reservation) and the call log the fakes append to."""
    dev = tmp_path / "device"
    dev.mkdir()
    log = tmp_path / "calls.jsonl"
    monkeypatch.setenv("FAKE_NEURON_DEVICE", str(dev))
    monkeypatch.setenv("FAKE_NEURON_LOG", str(log))
    for var in NEURON_VARS:
        monkeypatch.delenv(var, raising=False)
    return log


@pytest.fixture
def new_sdk(tmp_path, monkeypatch, fake_device):
    """A Trainium machine with the current SDK: AWS's nki in this environment, nrtpy in its own environment
    (NRTPY_PYTHON, as the nrtpy docs require), neuron-explorer on PATH."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    _profiler(bin_dir, "neuron-explorer")
    nrtpy_python = _tool(bin_dir / "nrtpy-python",
                         f'#!/bin/sh\nPYTHONPATH="{FIX / "nrtpy_env"}" exec "{sys.executable}" "$@"\n')
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("NRTPY_PYTHON", str(nrtpy_python))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(FIX / "nki_env"), str(REPO)]))
    monkeypatch.syspath_prepend(str(FIX / "nki_env"))
    for name in [m for m in sys.modules if m == "nki" or m.startswith("nki.")]:
        monkeypatch.delitem(sys.modules, name)
    importlib.invalidate_caches()
    nkibench._BACKENDS.clear()
    kernels_file = tmp_path / "nki_kernels.py"
    kernels_file.write_text(NKI_KERNELS)
    spec = importlib.util.spec_from_file_location("nkibench_test_nki_kernels", kernels_file)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    yield module
    nkibench._BACKENDS.clear()
    for name in [m for m in sys.modules if m == "nki" or m.startswith("nki.")]:
        del sys.modules[name]


def _ab(n: int = 4096, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.random(n, dtype=np.float32), rng.random(n, dtype=np.float32)


# ---------------------------------------------------------------------------------------------------------------
# Result type
# ---------------------------------------------------------------------------------------------------------------
@settings(max_examples=100, deadline=None)
@given(st.lists(st.floats(0.1, 1e5, allow_nan=False), min_size=1, max_size=60), st.sampled_from([0, 1, 10, 50,
                                                                                                  90, 99, 100]))
def test_percentiles_are_nki_benchmarks_nearest_rank(samples, p):
    from nkisim.perf.benchmark import LatencyStats

    assert nearest_rank(samples, p) == LatencyStats(samples).get_latency_percentile(p)
    assert nearest_rank(samples, p) in samples


@pytest.mark.parametrize("bad", [0.0, -1.0, math.nan, math.inf])
def test_a_timing_never_holds_a_zero_or_invalid_latency(bad):
    good = {"p50_us": 1.0, "p99_us": 2.0, "warmup": 1, "iterations": 10, "backend": "nkisim", "label": "x",
            "target": "trn2", "api": "legacy"}
    assert Timing(**good).versions == {}
    with pytest.raises(ValueError, match="latency"):
        Timing(**{**good, "p99_us": bad})
    with pytest.raises(ValueError, match="iterations"):
        Timing(**{**good, "iterations": 0})
    with pytest.raises(ValueError, match="backend"):
        Timing(**{**good, "backend": "gpu"})


# ---------------------------------------------------------------------------------------------------------------
# Which API, which path
# ---------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("source", "api"),
    [
        ("import nki\n", "nki"),
        ("import nki.language as nl\n", "nki"),
        ("from nki import isa\n", "nki"),
        ("import neuronxcc.nki as nki\n", "legacy"),
        ("from neuronxcc import nki\n", "legacy"),
        ("from neuronxcc.nki import language as nl\n", "legacy"),
        ("def f():\n    import neuronxcc.nki.isa as nisa\n", "legacy"),  # an import anywhere in the file counts
        ("import numpy as np\nimport nkisim\nimport nki_samples\n", None),
        ("def broken(:\n", None),
    ],
)
def test_a_kernel_files_imports_say_its_api(source, api):
    assert detect.api_of_source(source) == api


def test_a_file_importing_both_apis_is_an_error_naming_both_lines():
    with pytest.raises(detect.MixedAPIError, match=r"k\.py imports both .*line 3.*line 1"):
        detect.api_of_source("import neuronxcc.nki as nki\nimport numpy\nimport nki.isa as nisa\n", "k.py")


def test_a_file_importing_neither_api_takes_the_editions_and_the_line_says_so(tmp_path, monkeypatch):
    """Issue 34's decision: no NKI import means the edition's API (DEFAULT_API, which `make release API=legacy`
    rewrites), said on the Kernel API line; a file that imports an API is never second-guessed."""
    path = tmp_path / "helper_kernel.py"
    path.write_text("def kernel(a):\n    return a\n")
    spec = importlib.util.spec_from_file_location("nkibench_test_no_import", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    for edition in ("nki", "legacy"):
        monkeypatch.setattr(detect, "DEFAULT_API", edition)
        assert detect.api_of_kernel(module.kernel) == edition
        assert detect.api_line(module.kernel) == (
            f"Kernel API: {detect.API_NAMES[edition]}, taken as this edition's: helper_kernel.py imports neither "
            "`nki` nor `neuronxcc.nki`")
    path.write_text("import nki\n\ndef kernel(a):\n    return a\n")
    assert detect.api_line(module.kernel) == f"Kernel API: {detect.API_NAMES['nki']}"


@pytest.mark.slow
def test_the_course_kernels_take_the_model_here_and_the_info_command_says_so(tmp_path):
    sys.path.insert(0, str(REPO / "part1"))
    try:
        import kernels
    finally:
        sys.path.remove(str(REPO / "part1"))
    assert detect.api_of_kernel(kernels.vector_add_stream) == detect.DEFAULT_API == "nki"
    assert detect.api_line(kernels.vector_add_stream).startswith("Kernel API: current NKI (`import nki`")
    assert nkibench.backend_for(kernels.vector_add_stream).name == "nkisim"
    spec = importlib.util.spec_from_file_location("nkibench_test_legacy_part1",
                                                  REPO / "editions" / "legacy" / "part1" / "kernels.py")
    legacy = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(legacy)
    assert detect.api_of_kernel(legacy.vector_add_stream) == "legacy"
    assert "Neuron SDK 2.29 or older" in detect.api_line(legacy.vector_add_stream)
    assert nkibench.backend_for(legacy.vector_add_stream).name == "nkisim"
    out = subprocess.run([sys.executable, "-m", "nkisim", "info"], cwd=tmp_path, capture_output=True, text=True,
                         timeout=120, check=True).stdout
    assert "timing paths:\n  neuronxcc.nki kernels: nkisim's performance model" in out
    nki_line = next(line for line in out.splitlines() if "`import nki` kernels:" in line)
    assert ("performance model" in nki_line) == (detect.nki_toolchain().kind == "nkisim")


def test_the_current_sdk_is_detected_from_what_is_importable(new_sdk):
    tc = detect.nki_toolchain()
    assert (tc.kind, tc.version) == ("neuron", "0.6.0")
    assert detect.api_of_kernel(new_sdk.vector_add) == "nki"
    assert nkibench.backend_for(new_sdk.vector_add).name == "neuron-nki"
    paths = detect.describe_paths()
    assert "`import nki` kernels: Trainium via the Neuron runtime (nki 0.6.0; timed by nrtpy under NRTPY_PYTHON" in \
        paths[1]
    assert "profiles by neuron-explorer" in paths[1]


@pytest.mark.parametrize(
    ("var", "value", "api"),
    [
        ("NEURON_RT_VISIBLE_CORES", "zero", "legacy"),
        ("NEURON_RT_VISIBLE_CORES", "3-1", "nki"),
        ("NEURON_RT_NUM_CORES", "all", "nki"),
        ("NEURON_RT_EXEC_TIMEOUT", "-5", "legacy"),
        ("NEURON_RT_INSPECT_ENABLE", "1", "nki"),
        ("NEURON_PLATFORM_TARGET_OVERRIDE", "trn9", "nki"),
        ("NEURON_LOGICAL_NC_CONFIG", "2", "nki"),
    ],
)
def test_a_misconfigured_neuron_environment_is_named(var, value, api):
    with pytest.raises(nkibench.HardwareError, match=var):
        envcheck.check_runtime_env({var: value}, api=api)


def test_a_sane_neuron_environment_passes():
    envcheck.check_runtime_env({"NEURON_RT_VISIBLE_CORES": "0-1,3", "NEURON_RT_NUM_CORES": "1",
                                "NEURON_LOGICAL_NC_CONFIG": "1", "NEURON_PLATFORM_TARGET_OVERRIDE": "trn2",
                                "NEURON_RT_INSPECT_ENABLE": "0"})
    assert envcheck.target_from_env({"NEURON_PLATFORM_TARGET_OVERRIDE": "gen3"}) == "trn2"


# ---------------------------------------------------------------------------------------------------------------
# nkisim
# ---------------------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def part1():
    """The legacy edition's part 1 starters: what nki.benchmark (and its DGE-off profile runs) time."""
    spec = importlib.util.spec_from_file_location("nkibench_test_legacy_part1_kernels",
                                                  REPO / "editions" / "legacy" / "part1" / "kernels.py")
    kernels = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(kernels)
    return kernels


def test_nkisim_gives_what_nki_benchmark_gives_ordinary_and_profiled(part1, tmp_path):
    import neuronxcc.nki as nki

    a, b = _ab(25600)
    kernel = part1.vector_add_stream
    m = nkibench.measure(kernel, (a, b), warmup=1, iterations=10, profile=nkibench.ProfileRequest(str(tmp_path / "s")))

    def bench(**opts):
        bm = nki.benchmark(kernel, warmup=1, iters=10, **opts)
        bm(a, b)
        return bm.benchmark_result.nc_latency.get_latency_percentile(99)

    assert m.timing.p99_us == m.timing.p50_us == bench()
    # DGE off changes what the DMAs cost, in either direction: with model round 3 this kernel's 8-byte rows
    # (FREE_DIM=2) are cheaper as pre-built static descriptors than through the DGE.
    assert m.profiled.p99_us == bench(additional_compile_opt="--disable-dge") != m.timing.p99_us
    t, p = m.timing, m.profiled
    assert (t.backend, t.label, t.api, t.measured, t.dge_disabled, t.profiled) == (
        "nkisim", "nkisim estimate, trn2", "legacy", False, False, False)
    assert set(t.versions) == {"nkisim"} and t.samples_us == (t.p99_us,) * 10
    assert p.dge_disabled and p.profiled and p.profile_files == m.profile_files
    assert [Path(f).name for f in m.profile_files] == ["s.neff", "s.summary.txt", "s.html"]  # no .ntff unasked
    np.testing.assert_array_equal(nkibench.launch(kernel, (a, b)), a + b)


@pytest.mark.slow
def test_profile_files_say_they_are_a_dge_off_run_and_name_the_ordinary_latency(part1, tmp_path):
    a, b = _ab(25600)
    m = nkibench.measure(part1.vector_add_stream, (a, b), warmup=1, iterations=10,
                         profile=nkibench.ProfileRequest(str(tmp_path / "s")))
    note = f"an ordinary run of this kernel takes {m.timing.p99_us:.2f} us (nc_latency)"
    summary = (tmp_path / "s.summary.txt").read_text()
    assert summary.splitlines()[2] == "profile run, not an ordinary run:" and note in summary
    from nkisim.perf.summary import parse_summary

    assert parse_summary(summary)["nc_latency"] == pytest.approx(m.profiled.p99_us, abs=1e-3)  # still parseable
    assert note in (tmp_path / "s.html").read_text().replace("&#x27;", "'")
    # the profile command re-renders the page from the .neff and keeps the note (the trace carries it)
    subprocess.run([sys.executable, "-m", "nkisim.profile", "html", "s.neff", "-o", "again.html"], cwd=tmp_path,
                   check=True, capture_output=True, timeout=300)
    assert note in (tmp_path / "again.html").read_text()


@pytest.mark.slow
@pytest.mark.parametrize("umask", [0o022, 0o027, 0o077])
def test_profile_files_are_written_with_the_users_umask(part1, tmp_path, umask):
    a, b = _ab(1280)
    old = os.umask(umask)
    try:
        m = nkibench.measure(part1.vector_add_tiled, (a, b), warmup=1, iterations=10,
                             profile=nkibench.ProfileRequest(str(tmp_path / "t"), perfetto=True))
    finally:
        os.umask(old)
    assert len(m.profile_files) == 4  # with the Perfetto trace, asked for
    for f in m.profile_files:
        assert stat.S_IMODE(os.stat(f).st_mode) == 0o666 & ~umask, f
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".nkisim-")]  # no temporary file left behind


@pytest.mark.slow
def test_an_explicit_dge_choice_overrides_the_apis_practice(part1, tmp_path):
    a, b = _ab(2560)
    m = nkibench.measure(part1.vector_add_tiled, (a, b), warmup=1, iterations=10,
                         profile=nkibench.ProfileRequest(str(tmp_path / "t"), dge_off=False))
    assert m.profiled is None and m.notes[0] == NO_DGE_SWITCH
    assert "profile run" not in (tmp_path / "t.summary.txt").read_text()


@pytest.mark.parametrize("stem", ["", "out/"])
def test_a_bad_profile_name_is_refused(stem):
    with pytest.raises(ValueError, match="profile name"):
        nkibench.ProfileRequest(stem)


def test_part2_scores_the_ordinary_latency_and_labels_the_profiled_one(tmp_path):
    """Issue 26: with --profile the harness prints both latencies, each labelled; the score uses the ordinary."""
    sys.path.insert(0, str(REPO / "part2"))
    import test_harness as harness

    kernel_file = tmp_path / "conv2d.py"
    kernel_file.write_text(textwrap.dedent('''
        import neuronxcc.nki as nki
        import neuronxcc.nki.language as nl


        @nki.jit
        def fused_conv2d_maxpool(X, W, bias, pool_size=1):
            out = nl.ndarray((128, 16), dtype=X.dtype, buffer=nl.shared_hbm)
            for i in nl.affine_range(8):
                nl.store(out, nl.load(X[0, 0:128, i, 0:16]))
            return out
    '''))
    kernel = harness.load_kernel(kernel_file)
    test = harness.PerformanceTest("small", harness.ConvCase(1, 256, 256, 32, 16), 1.25, extra_credit=True)
    bank = harness.InputBank(3)
    lines: list[str] = []
    stem = str(tmp_path / "p")
    [result] = harness.run_performance(kernel, [test], bank, profile=stem, log=lines.append)
    plain = harness.measure_latency(kernel, test.case, bank, None)
    assert plain.profiled is None and result.latency_us == plain.timing.p99_us
    profiled = next(line for line in lines if line.startswith("  profiled run: p99 latency "))
    assert "compiled with DGE off, as the course's profiles are; not scored: the ordinary run took" in profiled
    assert f"the ordinary run took {plain.timing.p99_us:.1f}" in profiled
    assert any("--disable-dge" in line for line in lines) and not result.profile_error


# ---------------------------------------------------------------------------------------------------------------
# Current SDK (nki.jit + nrtpy + neuron-explorer), against fakes
# ---------------------------------------------------------------------------------------------------------------
def test_a_launch_compiles_in_its_own_process_and_returns_the_outputs(new_sdk, fake_device, tmp_path):
    a, b = _ab()
    out = nkibench.launch(new_sdk.vector_add, (a, b))
    np.testing.assert_array_equal(out, a + b)
    np.testing.assert_array_equal(nkibench.launch(new_sdk.scaled_add, (a, b), {"scale": 3}), a + 3 * b)
    calls = _calls(fake_device)
    assert [c["call"] for c in calls] == ["nki.jit", "nki.jit"]
    assert all(c["artifacts"] for c in calls)  # NKI_ARTIFACTS_DIR was set before nki was imported
    assert not (tmp_path / "device" / "reserved").exists()  # the process that ran it is gone: the core is free


def test_measure_times_the_kept_neff_with_the_runtimes_device_benchmark(new_sdk, fake_device):
    a, b = _ab()
    c, d = _ab(seed=1)
    nkibench.launch(new_sdk.vector_add, (a, b))
    m = nkibench.measure(new_sdk.vector_add, (c, d), warmup=5, iterations=20)  # same shapes: the NEFF is reused
    calls = _calls(fake_device)
    assert [c["call"] for c in calls] == ["nki.jit", "nrtpy.benchmark"]  # compiled once, reused for timing
    bench = calls[1]
    assert (bench["warmup_iter"], bench["benchmark_iter"], bench["mode"]) == (5, 20, "device")
    assert bench["inputs"] == ["a_input", "b_input"]  # NEFF inputs named after the kernel's parameters
    assert bench["input_sums"] == {"a_input": pytest.approx(float(c.sum(dtype=np.float64))),
                                   "b_input": pytest.approx(float(d.sum(dtype=np.float64)))}  # this call's values
    samples = sorted(d * 1000.0 for d in bench["durations_ms"])
    t = m.timing
    assert t.samples_us == tuple(d * 1000.0 for d in bench["durations_ms"])
    assert t.p50_us == samples[9] and t.p99_us == samples[19]  # nearest rank of 20: the 10th and 20th
    assert (t.backend, t.api, t.label, t.measured, t.dge_disabled) == (
        "neuron-nki", "nki", "Trainium (nki 0.6.0)", True, False)
    assert dict(t.versions) == {"nki": "0.6.0", "nrtpy": "2.34.10"}
    assert m.profiled is None and m.profile_files == ()


def test_a_profile_is_the_timed_neff_captured_with_the_documented_command(new_sdk, fake_device, tmp_path):
    a, b = _ab()
    stem = str(tmp_path / "prof")
    m = nkibench.measure(new_sdk.vector_add, (a, b), warmup=1, iterations=10, profile=nkibench.ProfileRequest(stem))
    assert m.profile_files == (f"{stem}.neff", f"{stem}.ntff")
    assert json.loads(Path(f"{stem}.ntff").read_text())["dge_notifs"] is True
    assert not list(tmp_path.glob("prof_exec_*.ntff"))  # NAME_exec_2.ntff became NAME.ntff
    capture = [c for c in _calls(fake_device) if c["call"] == "neuron-explorer"]
    assert len(capture) == 1
    argv = capture[0]["argv"]
    assert argv[:7] == ["capture", "-n", f"{stem}.neff", "-s", f"{stem}.ntff", "--profile-nth-exec=2",
                        "--enable-dge-notifs"]
    assert argv[7::2] == ["a_input", "b_input"] and all(p.endswith(".npy") for p in argv[8::2])
    assert m.profiled is None and NO_DGE_SWITCH in m.notes
    assert any(n.startswith(f"View it with: neuron-explorer view -n {stem}.neff -s {stem}.ntff") for n in m.notes)
    with pytest.raises(nkibench.HardwareError, match="no compiler switch"):
        nkibench.measure(new_sdk.vector_add, (a, b), warmup=1, iterations=10,
                         profile=nkibench.ProfileRequest(stem, dge_off=True))


@pytest.mark.slow
def test_a_capture_failing_with_dge_notifications_is_retried_without_and_says_so(new_sdk, fake_device, tmp_path,
                                                                                  monkeypatch):
    monkeypatch.setenv("FAKE_CAPTURE_DGE_FAILS", "1")
    a, b = _ab()
    m = nkibench.measure(new_sdk.vector_add, (a, b), warmup=1, iterations=10,
                         profile=nkibench.ProfileRequest(str(tmp_path / "prof")))
    assert json.loads((tmp_path / "prof.ntff").read_text())["dge_notifs"] is False
    assert m.notes[0].startswith("DGE DMA events are not in this profile")
    assert len([c for c in _calls(fake_device) if c["call"] == "neuron-explorer"]) == 2


def test_the_kernels_own_error_comes_back_with_its_type_and_traceback(new_sdk):
    a, b = _ab()
    with pytest.raises(nkibench.KernelError) as info:
        nkibench.launch(new_sdk.broken, (a, b))
    assert nkibench.error_text(info.value) == ("ValueError", "tile too large for SBUF")
    assert 'raise ValueError("tile too large for SBUF")' in info.value.traceback_text


def test_simulate_runs_nki_simulate_on_the_cpu_in_process(new_sdk, fake_device, tmp_path):
    a, b = _ab()
    np.testing.assert_array_equal(nkibench.launch(new_sdk.vector_add, (a, b), simulate=True), a + b)
    assert [c["call"] for c in _calls(fake_device)] == ["nki.simulate"]
    assert not (tmp_path / "device" / "reserved").exists()


def _hold_device(tmp_path: Path) -> subprocess.Popen:
    code = (f"import sys, time; sys.path.insert(0, {str(FIX)!r}); from _load_device import device; "
            "device().reserve(); print('held', flush=True); time.sleep(60)")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "held"
    return proc


@pytest.mark.parametrize(
    ("setup", "error", "message"),
    [
        ({"FAKE_NKI_NO_NEFF": "1"}, nkibench.HardwareError, "no NEFF was written"),
        ({"NRTPY_PYTHON": None}, nkibench.HardwareError, "nrtpy.*NRTPY_PYTHON"),
        ({"NRTPY_PYTHON": "/nonexistent/python"}, nkibench.HardwareError, "not an executable interpreter"),
        ({"FAKE_NRT_LIBNRT_MISSING": "1"}, nkibench.HardwareError, "libnrt(.|\n)*LD_LIBRARY_PATH"),
        ({"FAKE_NKI_INPUT_PREFIX": "x_"}, nkibench.HardwareError, r"inputs are \['x_a_input', 'x_b_input'\]"),
        ({"FAKE_NRT_NO_EVENTS": "1"}, nkibench.HardwareError, "no device execution events(.|\n)*2.32"),
        ({"FAKE_NRT_DURATIONS": "zero"}, nkibench.HardwareError, "non-positive"),
        ({"FAKE_NRT_DURATIONS": "short"}, nkibench.HardwareError, "19 timings for 20 iterations"),
        ({"NEURON_LOGICAL_NC_CONFIG": "2"}, nkibench.HardwareError, "NEURON_LOGICAL_NC_CONFIG"),
        ({"NEURON_RT_INSPECT_ENABLE": "1"}, nkibench.HardwareError, "NEURON_RT_INSPECT_ENABLE"),
        ({"PATH": "/usr/bin:/bin"}, nkibench.ProfileError, "neither neuron-explorer nor neuron-profile"),
        ("held", nkibench.HardwareError, "reserved by process"),
    ],
    ids=["no-neff", "no-nrtpy", "bad-nrtpy-python", "no-libnrt", "input-names", "no-device-events",
         "zero-durations", "missing-durations", "lnc2", "inspect-on", "no-profiler", "core-held"],
)
def test_the_hardware_path_fails_loudly(new_sdk, fake_device, tmp_path, monkeypatch, setup, error, message):
    holder = None
    a, b = _ab()
    if setup == "held":  # compiled first; then another process takes the NeuronCore before the timing
        nkibench.launch(new_sdk.vector_add, (a, b))
        holder = _hold_device(tmp_path)
    else:
        for var, value in setup.items():
            if value is None:
                monkeypatch.delenv(var, raising=False)
            else:
                monkeypatch.setenv(var, value)
    a, b = _ab()
    try:
        with pytest.raises(error, match=message) as info:
            nkibench.measure(new_sdk.vector_add, (a, b), warmup=2, iterations=20,
                             profile=nkibench.ProfileRequest(str(tmp_path / "prof")))
    finally:
        if holder is not None:
            holder.kill()
            holder.wait()
    if error is nkibench.ProfileError:  # the timing was taken and stands; only the profile is missing
        assert info.value.measurement.timing.p99_us > 0 and info.value.measurement.timing.backend == "neuron-nki"
    if setup in ({"NEURON_LOGICAL_NC_CONFIG": "2"}, {"NEURON_RT_INSPECT_ENABLE": "1"}):
        assert _calls(fake_device) == []  # refused before anything ran


def test_a_runtime_error_while_the_kernel_runs_is_reported_as_the_kernel_run_s(new_sdk, tmp_path):
    """A failure inside the nki.jit call (here: the NeuronCore held by another process) comes back with the
    runtime's own message, as the call in-process would raise it."""
    holder = _hold_device(tmp_path)
    try:
        with pytest.raises(nkibench.KernelError, match="NRT_FAILURE.*reserved by process"):
            nkibench.launch(new_sdk.vector_add, _ab())
    finally:
        holder.kill()
        holder.wait()


def test_kernels_that_cannot_be_compiled_apart_are_refused(new_sdk):
    a, b = _ab()
    with pytest.raises(nkibench.HardwareError, match="no NEFF was written(.|\n)*@nki.jit"):
        nkibench.launch(new_sdk.undecorated, (a, b))
    with pytest.raises(nkibench.HardwareError, match="not a top-level function"):
        nkibench.launch(new_sdk.make_nested(), (a, b))


def test_the_fakes_follow_the_documented_signatures():
    """The fixtures' API shapes, checked against the signatures transcribed from AWS's pages (neuron-runtime/
    nrtpy/model.rst and tensor.rst; nki/api/nki/__init__.py), so a drifting fake fails here."""
    documented = {
        "NrtpyModel.load_from_neff": "(neff_path, name=None, core_id=0, cc_enabled=False, rank_id=0, world_size=1)",
        "NrtpyModel.__call__": "(self, inputs, outputs=None, save_trace=False, ntff_name=None)",
        "NrtpyModel.benchmark": "(self, inputs, outputs=None, warmup_iter=5, benchmark_iter=5, mode='device')",
        "NrtpyTensor.from_numpy": "(array, name=None, core_id=0)",
        "NrtpyTensor.__init__": "(self, tensor_ref, shape, dtype, name=None)",
        "configure": "(visible_cores=None)",
    }
    code = ("import inspect, json, nrtpy\n"
            f"names = {sorted(documented)!r}\n"
            "def get(n):\n    obj = nrtpy\n    for part in n.split('.'):\n        obj = getattr(obj, part)\n"
            "    return str(inspect.signature(obj))\n"
            "out = {n: get(n) for n in names}\n"
            "out['BenchmarkResult'] = list(nrtpy.BenchmarkResult.__dataclass_fields__)\n"
            "out['errors'] = [issubclass(nrtpy.NrtError, RuntimeError), issubclass(nrtpy.NrtpyError, RuntimeError)]\n"
            "print(json.dumps(out))\n")
    env = {**os.environ, "PYTHONPATH": str(FIX / "nrtpy_env")}
    got = json.loads(subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                                    check=True, timeout=120).stdout)
    for name, sig in documented.items():
        assert got[name] == sig, name
    assert got["BenchmarkResult"] == ["mean_ms", "min_ms", "max_ms", "std_dev_ms", "iterations", "warmup_iterations",
                                      "durations_ms"]
    assert got["errors"] == [True, True]
    spec = importlib.util.spec_from_file_location("fake_nki_for_signature", FIX / "nki_env" / "nki" / "__init__.py")
    fake_nki = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fake_nki)
    assert str(inspect.signature(fake_nki.jit)) == "(fn=None, *, compile_config=None, specialization_config=None, " \
                                                   "**kwargs)"
    with pytest.raises(NotImplementedError, match="nki.benchmark"):
        fake_nki.benchmark  # noqa: B018 - NKI 2.32: the removed APIs raise a message naming themselves


# ---------------------------------------------------------------------------------------------------------------
# Legacy SDK (neuronxcc.nki), against a fake: the scripts make the course's calls, bit for bit
# ---------------------------------------------------------------------------------------------------------------
def _legacy_env(tmp_path: Path, fake_device: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in NEURON_VARS}
    env["PYTHONPATH"] = os.pathsep.join([str(FIX / "legacy"), str(REPO)])
    env.update(extra)
    return env


def _part1(args: list[str], tmp_path: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    """part1/run_benchmark.py as the legacy edition ships it: next to the legacy starters."""
    script_dir = tmp_path / "legacy_part1"
    script_dir.mkdir(exist_ok=True)
    shutil.copy2(REPO / "part1" / "run_benchmark.py", script_dir / "run_benchmark.py")
    shutil.copy2(REPO / "editions" / "legacy" / "part1" / "kernels.py", script_dir / "kernels.py")
    return subprocess.run([sys.executable, str(script_dir / "run_benchmark.py"), *args], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)


def test_part1_on_legacy_hardware_makes_the_courses_nki_benchmark_calls(tmp_path, fake_device):
    proc = _part1(["--kernel", "stream", "-n", "2560", "--profile_name", "s"], tmp_path,
                  _legacy_env(tmp_path, fake_device))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    assert "Backend: Trainium (neuronx-cc 2.21.0.fake)\n" in out and "Correctness passed? True" in out
    calls = _calls(fake_device)
    assert [(c["call"], c["kernel"]) for c in calls] == [("baremetal", "vector_add_stream")] + [
        ("benchmark", "vector_add_stream")] * 2
    assert calls[1]["options"] == {"warmup": 1, "iters": 10}
    assert calls[2]["options"] == {"warmup": 1, "iters": 10, "save_neff_name": "file.neff",
                                   "save_trace_name": "s.ntff", "additional_compile_opt": "--disable-dge"}
    assert (tmp_path / "s.neff").is_file() and not (tmp_path / "file.neff").exists()
    ordinary = 1.02 * (2.0 + 2 * 2560 * 4 / 65536)  # the fake device's p99
    assert f"Execution Time: {ordinary:.2f} \u03bcs (p99 of 10 iterations, Trainium (neuronx-cc 2.21.0.fake))" in out
    assert f"Profiled run: {1.3 * ordinary:.2f} \u03bcs (p99 of 10 iterations, compiled with DGE off" in out
    assert "View it with: neuron-profile view -n s.neff -s s.ntff" in out


def test_part1_says_loudly_when_the_profile_was_not_written_and_keeps_both_latencies(tmp_path, fake_device):
    proc = _part1(["--kernel", "stream", "-n", "2560", "--profile_name", "s"], tmp_path,
                  _legacy_env(tmp_path, fake_device, FAKE_LEGACY_NO_TRACE="1"))
    assert proc.returncode == 1
    lines = proc.stdout.splitlines()
    heads = [line.split(":")[0] for line in lines]
    order = [heads.index(h) for h in ("Execution Time", "Profiled run", "Profile NOT written")]
    assert order == sorted(order)
    assert "no profile trace s.ntff was written" in lines[order[-1]]


@pytest.mark.parametrize(("knob", "message"), [
    ({"FAKE_LEGACY_P99": "0"}, "Execution Time: not measured: timing: nki.benchmark reported p50=0.0, p99=0.0 us: "
                               "nothing was timed"),
    ({"FAKE_LEGACY_NO_BENCHMARK": "1"}, "Execution Time: not measured: timing: this neuronxcc.nki has no "
                                        "nki.benchmark"),
    ({"NEURON_RT_VISIBLE_CORES": "first"}, "Correctness not checked: checking the Neuron environment: "
                                           "NEURON_RT_VISIBLE_CORES='first'"),
])
def test_part1_on_legacy_hardware_never_prints_a_latency_it_did_not_measure(tmp_path, fake_device, knob, message):
    proc = _part1(["--kernel", "stream", "-n", "2560"], tmp_path, _legacy_env(tmp_path, fake_device, **knob))
    assert proc.returncode == 1
    assert message in proc.stdout
    assert not [line for line in proc.stdout.splitlines() if line.startswith("Execution Time: ") and "\u03bcs" in line]


PART2_LEGACY = '''
import json, sys
sys.path.insert(0, {part2!r})
import test_harness as harness
kernel = harness.load_kernel({kernel!r})
test = harness.PerformanceTest("small", harness.ConvCase(1, 256, 256, 32, 16), 1.25, extra_credit=True)
lines = []
[r] = harness.run_performance(kernel, [test], harness.InputBank(1), profile="conv", log=lines.append)
print(json.dumps({{"latency": r.latency_us, "points": r.points, "profile_error": r.profile_error, "log": lines}}))
'''


@pytest.mark.parametrize("profiler", [True, False], ids=["neuron-profile", "no-profiler"])
def test_part2_on_legacy_hardware_captures_with_neuron_profile_as_the_course_did(tmp_path, fake_device, profiler):
    kernel = tmp_path / "conv2d.py"
    kernel.write_text("import neuronxcc.nki as nki\n\n\n@nki.jit\ndef fused_conv2d_maxpool(X, W, bias, pool_size=1):"
                      "\n    raise AssertionError('the fake device does not run kernels')\n")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    if profiler:
        _profiler(bin_dir, "neuron-profile")
    env = _legacy_env(tmp_path, fake_device, PATH=f"{bin_dir}{os.pathsep}/usr/bin{os.pathsep}/bin")
    code = PART2_LEGACY.format(part2=str(REPO / "part2"), kernel=str(kernel))
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout.splitlines()[-1])
    calls = _calls(fake_device)
    benches = [c["options"] for c in calls if c["call"] == "benchmark"]
    assert benches == [{"warmup": 5, "iters": 20},
                       {"warmup": 5, "iters": 20, "save_neff_name": "conv_float32_smaller.neff",
                        "additional_compile_opt": "--disable-dge"}]
    assert all(c["kwargs"] == ["pool_size"] for c in calls if c["call"] == "benchmark")
    nbytes = (256 * 32 * 16 + 256 * 256 * 9 + 256) * 4
    assert got["latency"] == pytest.approx(1.02 * (2.0 + nbytes / 65536))  # the ordinary run is scored
    assert got["points"] == 1.25
    assert any(line.startswith("  profiled run: p99 latency ") for line in got["log"])
    if profiler:
        capture = [c for c in calls if c["call"] == "neuron-profile"]
        assert [c["argv"] for c in capture] == [["capture", "-n", "conv_float32_smaller.neff", "-s",
                                                 "conv_float32_smaller.ntff"]]
        assert not got["profile_error"] and (tmp_path / "conv_float32_smaller.ntff").is_file()
    else:
        assert "neuron-profile is not installed" in got["profile_error"]
        assert any(line.startswith("  profile NOT written: ") for line in got["log"])


def test_measurement_defaults():
    t = Timing(1.0, 1.0, 0, 1, "nkisim", "x", "trn2", "nki")
    assert Measurement(t).notes == () and Measurement(t).profiled is None


def test_detect_imports_no_package_metadata_until_a_version_is_asked():
    """nkibench.detect is imported by every grader start: importlib.metadata (email, zipfile, csv: 15-30 ms) is
    imported only when a real toolchain's version is looked up."""
    code = ("import sys, nkibench.detect as d; print('importlib.metadata' in sys.modules); "
            "d._dist_version('numpy'); print('importlib.metadata' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["False", "True"], out
