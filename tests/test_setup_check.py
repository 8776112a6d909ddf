"""The installation check: what `make test` runs in the student release (and, with everything else, here).

It checks that the environment and the course's tools work for the edition's NKI API (the scripts' default,
``nkibench.detect.DEFAULT_API``: the current ``import nki`` API, or ``neuronxcc.nki`` in the legacy edition): the
packages, the API's backend (the real toolchain or nkisim), a kernel of its own run and timed through nkibench
(the scripts' timing layer), the hardware rules, the part 1 and part 2 scripts, the autograder's sandbox and the
static screen, the HTML profile.  It never reads the student's files (part1/kernels.py, part2/conv2d.py):
whatever state they are in, this passes on a working installation.  `make grade` is how a student checks their
kernels.  Budget: well under a minute on 2 cores.
"""

from __future__ import annotations

import importlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import nkibench
from nkibench import detect

REPO = Path(__file__).resolve().parents[1]
API = detect.DEFAULT_API

# Kernels of this check's own (never the student's), in each API.  The vector adds are the starter's, with the
# knobs set.
VECTOR_ADDS = {
    "nki": '''
import nki
import nki.isa as nisa
import nki.language as nl


@nki.jit
def vector_add_naive(a_vec, b_vec):
    out = nl.ndarray(a_vec.shape, dtype=a_vec.dtype, buffer=nl.shared_hbm)
    a = nl.ndarray((a_vec.shape[0], 1), dtype=a_vec.dtype, buffer=nl.sbuf)
    b = nl.ndarray((b_vec.shape[0], 1), dtype=b_vec.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=a, src=a_vec)
    nisa.dma_copy(dst=b, src=b_vec)
    nisa.tensor_scalar(dst=a, data=a, op0=nl.add, operand0=b)
    nisa.dma_copy(dst=out, src=a)
    return out


@nki.jit
def vector_add_stream(a_vec, b_vec):
    FREE_DIM = 200
    P = nl.tile_size.pmax
    (N,) = a_vec.shape
    cols = N // P
    a_mat = a_vec.reshape((P, cols))
    b_mat = b_vec.reshape((P, cols))
    out = nl.ndarray((P, cols), dtype=a_vec.dtype, buffer=nl.shared_hbm)
    for t in nl.affine_range(cols // FREE_DIM):
        lo = t * FREE_DIM
        a = nl.ndarray((P, FREE_DIM), dtype=a_vec.dtype, buffer=nl.sbuf)
        b = nl.ndarray((P, FREE_DIM), dtype=b_vec.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=a, src=a_mat[:, lo : lo + FREE_DIM])
        nisa.dma_copy(dst=b, src=b_mat[:, lo : lo + FREE_DIM])
        nisa.tensor_tensor(dst=a, data1=a, data2=b, op=nl.add)
        nisa.dma_copy(dst=out[:, lo : lo + FREE_DIM], src=a)
    return out.reshape(a_vec.shape)


vector_add_tiled = vector_add_naive
''',
    "legacy": '''
import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl


@nki.compiler.skip_middle_end_transformations
@nki.jit
def vector_add_naive(a_vec, b_vec):
    out = nl.ndarray(shape=a_vec.shape, dtype=a_vec.dtype, buffer=nl.hbm)
    a = nl.ndarray(shape=(a_vec.shape[0], 1), dtype=a_vec.dtype, buffer=nl.sbuf)
    b = nl.ndarray(shape=(b_vec.shape[0], 1), dtype=b_vec.dtype, buffer=nl.sbuf)
    nisa.dma_copy(src=a_vec, dst=a)
    nisa.dma_copy(src=b_vec, dst=b)
    nisa.dma_copy(src=nisa.tensor_scalar(a, nl.add, b), dst=out)
    return out


@nki.compiler.skip_middle_end_transformations
@nki.jit
def vector_add_stream(a_vec, b_vec):
    FREE_DIM = 200
    P = nl.tile_size.pmax
    (N,) = a_vec.shape
    cols = N // P
    a_mat = a_vec.reshape((P, cols))
    b_mat = b_vec.reshape((P, cols))
    out = nl.ndarray(shape=(P, cols), dtype=a_vec.dtype, buffer=nl.hbm)
    for t in nl.affine_range(cols // FREE_DIM):
        lo = t * FREE_DIM
        a = nl.ndarray(shape=(P, FREE_DIM), dtype=a_vec.dtype, buffer=nl.sbuf)
        b = nl.ndarray(shape=(P, FREE_DIM), dtype=b_vec.dtype, buffer=nl.sbuf)
        nisa.dma_copy(src=a_mat[:, lo : lo + FREE_DIM], dst=a)
        nisa.dma_copy(src=b_mat[:, lo : lo + FREE_DIM], dst=b)
        nisa.dma_copy(src=nisa.tensor_tensor(a, b, op=nl.add), dst=out[:, lo : lo + FREE_DIM])
    return out.reshape(a_vec.shape)


vector_add_tiled = vector_add_naive
''',
}

# A transpose that is wrong on purpose (it copies one block everywhere): the grader must run it and say so.
WRONG_TRANSPOSE = {
    "nki": '''
import nki
import nki.isa as nisa
import nki.language as nl


@nki.jit
def matrix_transpose(a_tensor):
    M, N = a_tensor.shape
    out = nl.ndarray((N, M), dtype=a_tensor.dtype, buffer=nl.shared_hbm)
    tile = nl.ndarray((128, 128), dtype=a_tensor.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=tile, src=a_tensor[0:128, 0:128])
    for i in nl.affine_range(N // 128):
        for j in nl.affine_range(M // 128):
            nisa.dma_copy(dst=out[i * 128 : (i + 1) * 128, j * 128 : (j + 1) * 128], src=tile)
    return out
''',
    "legacy": '''
import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl


@nki.jit
def matrix_transpose(a_tensor):
    M, N = a_tensor.shape
    out = nl.ndarray((N, M), dtype=a_tensor.dtype, buffer=nl.hbm)
    tile = nl.ndarray((128, 128), dtype=a_tensor.dtype, buffer=nl.sbuf)
    nisa.dma_copy(src=a_tensor[0:128, 0:128], dst=tile)
    for i in nl.affine_range(N // 128):
        for j in nl.affine_range(M // 128):
            nisa.dma_copy(src=tile, dst=out[i * 128 : (i + 1) * 128, j * 128 : (j + 1) * 128])
    return out
''',
}

# A conv "kernel" that writes zeros of the right shape: the part 2 harness must judge it wrong, cleanly.
ZEROS_CONV = {
    "nki": '''
import nki
import nki.isa as nisa
import nki.language as nl


@nki.jit
def fused_conv2d_maxpool(X, W, bias, pool_size=1):
    batch, _, height, width = X.shape
    out_channels, _, k, _ = W.shape
    out_h, out_w = (height - k + 1) // pool_size, (width - k + 1) // pool_size
    X_out = nl.ndarray((batch, out_channels, out_h, out_w), dtype=X.dtype, buffer=nl.shared_hbm)
    for b in nl.affine_range(batch):
        for co in nl.affine_range(out_channels // 128):
            zeros = nl.ndarray((128, out_h, out_w), dtype=X.dtype, buffer=nl.sbuf)
            nisa.memset(dst=zeros, value=0.0)
            nisa.dma_copy(dst=X_out[b, co * 128 : (co + 1) * 128, :, :], src=zeros)
    return X_out
''',
    "legacy": '''
import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl


@nki.jit
def fused_conv2d_maxpool(X, W, bias, pool_size=1):
    batch, _, height, width = X.shape
    out_channels, _, k, _ = W.shape
    out_h, out_w = (height - k + 1) // pool_size, (width - k + 1) // pool_size
    X_out = nl.ndarray((batch, out_channels, out_h, out_w), dtype=X.dtype, buffer=nl.hbm)
    for b in nl.affine_range(batch):
        for co in nl.affine_range(out_channels // 128):
            zeros = nl.zeros((128, out_h, out_w), dtype=X.dtype, buffer=nl.sbuf)
            nisa.dma_copy(src=zeros, dst=X_out[b, co * 128 : (co + 1) * 128, :, :])
    return X_out
''',
}


def _run(args: list[str], cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, *args], cwd=cwd, capture_output=True, text=True, timeout=timeout, encoding="utf-8"
    )


def _module_from(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(module)
    return module


def _on_nkisim() -> bool:
    return nkibench.backend_for(api=API).name == "nkisim"


@pytest.fixture(scope="module")
def own_kernels(tmp_path_factory):
    path = tmp_path_factory.mktemp("kernels") / "setup_check_kernels.py"
    path.write_text(VECTOR_ADDS[API])
    return _module_from(path, "setup_check_kernels")


def test_python_and_the_packages_the_course_needs():
    assert sys.version_info >= (3, 10), f"Python {sys.version.split()[0]}: the course needs 3.10 or newer"
    for name in ("numpy", "ml_dtypes", "tabulate", "threadpoolctl", "bokeh", "nkisim", "grader", "nkibench"):
        importlib.import_module(name)


def test_the_nki_backend_is_reported():
    proc = _run(["-m", "nkisim", "info"], REPO)
    assert proc.returncode == 0, proc.stderr
    assert "backend:" in proc.stdout
    # the real toolchain where installed, else nkisim through the import hook
    nki = importlib.import_module("nki" if API == "nki" else "neuronxcc.nki")
    assert callable(nki.jit)
    print(f"edition: {detect.API_NAMES[API]}; backend: {nkibench.backend_for(api=API).describe()}")


def test_a_kernel_runs_and_matches_numpy(own_kernels):
    rng = np.random.default_rng(0)
    a, b = rng.random(25600, dtype=np.float32), rng.random(25600, dtype=np.float32)
    assert detect.api_of_kernel(own_kernels.vector_add_stream) == API
    out = nkibench.launch(own_kernels.vector_add_stream, (a, b))
    np.testing.assert_allclose(np.asarray(out), a + b)


def test_the_hardware_rules_are_enforced(own_kernels):
    ones = np.ones(256, dtype=np.float32)
    with pytest.raises(Exception, match="partition"):  # a (256, 1) tile: more partitions than the 128 there are
        nkibench.launch(own_kernels.vector_add_naive, (ones, ones))


def test_a_kernel_is_timed(own_kernels):
    a = np.ones(25600, dtype=np.float32)
    timing = nkibench.measure(own_kernels.vector_add_stream, (a, a), warmup=1, iterations=2).timing
    assert timing.p99_us > 0


def test_part1_script_checks_and_times_a_kernel(tmp_path):
    shutil.copy2(REPO / "part1" / "run_benchmark.py", tmp_path / "run_benchmark.py")
    (tmp_path / "kernels.py").write_text(VECTOR_ADDS[API])  # the script imports the kernels.py next to it
    proc = _run([str(tmp_path / "run_benchmark.py"), "--kernel", "stream", "-n", "25600"], tmp_path)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "Correctness passed? True" in proc.stdout
    assert f"Kernel API: {detect.API_NAMES[API]}" in proc.stdout
    assert "nkisim estimate" in proc.stdout or "Trainium" in proc.stdout


def test_part2_harness_judges_a_kernel(tmp_path):
    sys.path.insert(0, str(REPO / "part2"))
    try:
        harness = importlib.import_module("test_harness")
    finally:
        sys.path.remove(str(REPO / "part2"))
    (tmp_path / "conv2d.py").write_text(ZEROS_CONV[API])
    kernel = harness.load_kernel(tmp_path / "conv2d.py")
    case = harness.ConvCase(1, 128, 128, 8, 7)
    test = harness.CorrectnessTest("setup check", (case,), 2.5)
    (result,) = harness.run_correctness(kernel, [test], harness.InputBank(1), log=lambda _: None)
    assert not result.passed and "wrong output (max abs error" in result.detail
    relaxed, optimized, _ = harness.conv_thresholds("float16", 224, 1)
    assert 0 < optimized <= relaxed


def test_autograder_grades_a_submission_in_its_sandbox(tmp_path):
    sub = tmp_path / "submission"
    (sub / "part1").mkdir(parents=True)
    (sub / "part2").mkdir()
    (sub / "part1" / "kernels.py").write_text(WRONG_TRANSPOSE[API])
    (sub / "part2" / "conv2d.py").write_text(ZEROS_CONV[API])
    out = tmp_path / "report"
    proc = _run(["-m", "grader", "grade", str(sub), "--out", str(out), "--only", "part1.transpose"], REPO, 180)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    result = json.loads((out / "results.json").read_text())
    (test,) = [t for t in result["tests"] if t["number"] == "part1.transpose"]
    assert test["score"] == 0 and "differ from the reference" in test["output"]
    assert "points (out of" in proc.stdout


def test_static_screen_names_a_forbidden_call(tmp_path):
    bad = tmp_path / "kernels.py"
    bad.write_text(WRONG_TRANSPOSE[API] + "\n\ndef leak():\n    return open('/etc/passwd').read()\n")
    proc = _run(["-m", "nkisim", "check", str(bad)], REPO)
    assert proc.returncode == 1 and "open" in proc.stdout, proc.stdout + proc.stderr


def test_html_profile_is_written(tmp_path, own_kernels):
    if not _on_nkisim():
        pytest.skip("the HTML profile is nkisim's; on Trainium use neuron-profile")
    a = np.ones(25600, dtype=np.float32)
    stem = str(tmp_path / "profile")
    measured = nkibench.measure(own_kernels.vector_add_stream, (a, a), warmup=1, iterations=2,
                                profile=nkibench.ProfileRequest(stem))
    assert stem + ".html" in measured.profile_files
    text = Path(stem + ".html").read_text(encoding="utf-8")
    assert text.lstrip().lower().startswith("<!doctype html") and "vector_add_stream" in text
