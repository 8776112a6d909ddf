"""part1/run_benchmark.py: the course's command line, its printed lines, exit codes and profile files, in the default
edition (current `import nki` API) and, on fewer cases, in the legacy one (the same script next to
editions/legacy/part1/kernels.py, as `make release API=legacy` ships it)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "part1" / "run_benchmark.py"

CORRECTNESS = re.compile(r"^Correctness passed\? (True|False)$", re.M)
LATENCY = re.compile(r"^Execution Time: ([0-9]+\.[0-9]+) \u03bcs \(p99 of 10 iterations, (.+)\)$", re.M)
BACKEND = re.compile(r"^Backend: (Trainium \(.+\)|nkisim estimate, trn[12]) \[(.+)\]$", re.M)
PROFILED = re.compile(r"^Profiled run: ([0-9]+\.[0-9]+) \u03bcs \(p99 of 10 iterations, compiled with DGE off, as the "
                      r"course's profiles are; not scored: the ordinary run took ([0-9]+\.[0-9]+) \u03bcs\)$", re.M)


API_LINE = {"nki": "Kernel API: current NKI (`import nki`; NKI 0.4+, Neuron SDK 2.30+)",
            "legacy": "Kernel API: legacy NKI (`import neuronxcc.nki`; Neuron SDK 2.29 or older)"}


def run(args: list[str], cwd: Path, script: Path = SCRIPT) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(script), *args], cwd=cwd, capture_output=True, text=True, timeout=300, encoding="utf-8"
    )


@pytest.fixture(scope="module")
def legacy_script(tmp_path_factory) -> Path:
    """part1/ of the legacy edition: the same script beside the legacy starters."""
    part1 = tmp_path_factory.mktemp("legacy_edition") / "part1"
    part1.mkdir()
    shutil.copy2(SCRIPT, part1 / "run_benchmark.py")
    shutil.copy2(REPO / "editions" / "legacy" / "part1" / "kernels.py", part1 / "kernels.py")
    return part1 / "run_benchmark.py"


@pytest.fixture(params=["nki", "legacy"])
def edition(request) -> tuple[str, Path]:
    return request.param, SCRIPT if request.param == "nki" else request.getfixturevalue("legacy_script")


@pytest.mark.parametrize("cwd", [REPO, REPO / "part1"], ids=["repo-root", "part1"])
def test_stream_prints_correctness_latency_and_backend(cwd):
    proc = run(["--kernel", "stream", "-n", "25600"], cwd)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "vector_add_stream" in out and "(25600,)" in out
    assert CORRECTNESS.search(out).group(1) == "True"
    latency = LATENCY.search(out)
    assert latency is not None, out
    assert float(latency.group(1)) > 0
    backend = BACKEND.search(out)
    assert backend.group(1) == latency.group(2) == "nkisim estimate, trn2"
    assert re.fullmatch(r"nkisim [0-9.]+", backend.group(2))  # every output names the tool version
    assert "Profiled run" not in out  # no profile asked: one latency, the ordinary one
    assert API_LINE["nki"] in out


def test_both_editions_check_and_time_the_stream_kernel_alike(edition):
    """The same command in either edition: the API is said, and the modelled latency is the same (same model)."""
    api, script = edition
    proc = run(["--kernel", "stream", "-n", "25600"], script.parent, script)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert API_LINE[api] in proc.stdout and CORRECTNESS.search(proc.stdout).group(1) == "True"
    reference = run(["--kernel", "stream", "-n", "25600"], REPO)
    assert LATENCY.search(proc.stdout).group(1) == LATENCY.search(reference.stdout).group(1)


def test_target_override_is_reported(monkeypatch):
    monkeypatch.setenv("NEURON_PLATFORM_TARGET_OVERRIDE", "trn1")
    proc = run(["--kernel", "naive", "-n", "128"], REPO)
    assert proc.returncode == 0, proc.stderr
    assert "Backend: nkisim estimate, trn1" in proc.stdout


@pytest.mark.slow
def test_profile_name_writes_the_files_and_says_where(tmp_path):
    proc = run(["--kernel", "stream", "-n", "2560", "--profile_name", "stream_small"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("Profile written: "))
    # each file with its size, then the total: "NAME.neff (12 KB), ...: 1.5 MB"
    listed = re.findall(r"(\S+) \((\d+(?:\.\d)?) (B|KB|MB)\)", line.removeprefix("Profile written: "))
    written = [Path(p) for p, _, _ in listed]
    assert {p.name for p in written} == {"stream_small.neff", "stream_small.summary.txt", "stream_small.html"}
    assert all(p.is_file() and p.parent == tmp_path for p in written)
    from nkibench.labels import _size

    assert [f"{size} {unit}" for _, size, unit in listed] == [_size(p.stat().st_size) for p in written]
    assert line.endswith(f": {_size(sum(p.stat().st_size for p in written))}")
    assert not (tmp_path / "file.neff").exists() and not (tmp_path / "stream_small.ntff").exists()
    assert "--perfetto also writes the Perfetto trace" in proc.stdout
    # --perfetto: the trace as well
    proc = run(["--kernel", "stream", "-n", "2560", "--profile_name", "stream_small", "--perfetto"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "stream_small.ntff").is_file() and "stream_small.ntff (" in proc.stdout


@pytest.mark.slow
def test_a_current_api_profile_is_of_the_timed_program_and_says_so(tmp_path):
    """The current API has no DGE compiler switch: one latency, and the script says the profile is of it."""
    proc = run(["--kernel", "stream", "-n", "25600", "--profile_name", "s"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "Profiled run" not in proc.stdout and LATENCY.search(proc.stdout) is not None
    assert "Profile: of the timed NEFF itself" in proc.stdout


@pytest.mark.slow
def test_a_profiled_latency_is_labelled_and_printed_beside_the_ordinary_one(tmp_path, legacy_script):
    """Issue 26: the DGE-off profile run's latency (the legacy course's profiles) never stands alone or unlabelled;
    the ordinary one is scored."""
    plain = run(["--kernel", "stream", "-n", "25600"], tmp_path, legacy_script)
    proc = run(["--kernel", "stream", "-n", "25600", "--profile_name", "s"], tmp_path, legacy_script)
    assert plain.returncode == proc.returncode == 0, proc.stderr
    ordinary = float(LATENCY.search(proc.stdout).group(1))
    assert ordinary == float(LATENCY.search(plain.stdout).group(1))  # profiling does not move the ordinary figure
    profiled = PROFILED.search(proc.stdout)
    assert profiled is not None, proc.stdout
    assert float(profiled.group(2)) == ordinary
    assert float(profiled.group(1)) != ordinary  # DGE off changes what this stream's DMAs cost on trn2
    assert "--disable-dge" in proc.stdout
    for page in ("s.summary.txt", "s.html"):  # the files say it too, with the ordinary latency
        text = (tmp_path / page).read_text(encoding="utf-8").replace("&#x27;", "'")
        assert "compiled with DGE off (--disable-dge)" in text
        assert f"an ordinary run of this kernel takes {ordinary:.2f} us" in text


def test_naive_beyond_128_reports_failure_without_timing():
    proc = run(["--kernel", "naive", "-n", "256"], REPO)
    assert proc.returncode == 1
    assert CORRECTNESS.search(proc.stdout).group(1) == "False"
    assert "exceed architecture limitation of 128" in proc.stdout
    assert LATENCY.search(proc.stdout) is None


def test_transpose_stub_fails_with_the_intended_message(edition):
    api, script = edition
    proc = run(["--kernel", "transpose", "-n", "256", "-m", "128"], REPO, script)
    assert API_LINE[api] in proc.stdout
    assert proc.returncode == 1
    assert "(128, 256)" in proc.stdout
    assert "Correctness passed? False" in proc.stdout
    assert "NotImplementedError: matrix_transpose is not implemented yet" in proc.stdout


@pytest.mark.parametrize(
    "args",
    [
        ["--kernel", "bogus", "-n", "4"],
        ["--kernel", "stream", "-n", "0"],
        ["--kernel", "stream", "-n", "256", "-m", "4"],
        ["--kernel", "stream", "-n", "1024", "--profile_name", "/nonexistent/dir/x"],
    ],
)
def test_bad_command_lines_are_rejected(args):
    proc = run(args, REPO)
    assert proc.returncode == 2
    assert "error:" in proc.stderr


def _run_benchmark_module():
    import importlib.util

    spec = importlib.util.spec_from_file_location("part1_run_benchmark_under_test", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(SCRIPT.parent))
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(SCRIPT.parent))
    return module


def test_a_failed_correctness_check_says_why():
    import neuronxcc.nki.language as nl  # helpers in the legacy API (nl.load / nl.store) are enough here
    import numpy as np

    rb = _run_benchmark_module()
    a = np.arange(128 * 64, dtype=np.float32).reshape(128, 64)

    def returns_none(x):
        return None

    def half_written(x):
        out = nl.ndarray((128, 128), dtype=x.dtype, buffer=nl.shared_hbm)
        nl.store(out[0:64], nl.load(x[0:64]))
        return out

    def copies(x):
        out = nl.ndarray((128, 64), dtype=x.dtype, buffer=nl.shared_hbm)
        nl.store(out, nl.load(x))
        return out

    def exits(x):
        sys.exit(0)

    assert rb.check_correctness(returns_none, "transpose", (a,)) == (
        False, "the kernel returned no output tensor (return the HBM tensor it writes)")
    square = np.ones((128, 128), dtype=np.float32)
    ok, why = rb.check_correctness(half_written, "transpose", (square,))
    assert not ok and why.startswith(f"the output holds {square.size // 2} NaN value(s)"), why
    ok, why = rb.check_correctness(copies, "transpose", (a,))
    assert not ok and why == "output shape (128, 64), expected (64, 128)"
    with pytest.raises(RuntimeError, match=r"the kernel called sys.exit\(0\) instead of returning its output"):
        rb.check_correctness(exits, "transpose", (a,))
