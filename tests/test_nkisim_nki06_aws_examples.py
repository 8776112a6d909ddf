"""AWS's own current-API example kernels (aws-neuron-sdk ``nki/examples``, NKI 0.6) run on nkisim from AWS's files.

Nothing of AWS's is copied here: each test reads the file from a copy of the aws-neuron-sdk repository (a checkout or
a bare git directory: ``NKISIM_AWS_NEURON_SDK``, default the staff machine's mirror), writes it to a scratch
directory, imports it through nkisim's ``nki`` and checks the kernel against a NumPy reference of our own; where the
file's ``__main__`` block needs only NumPy it runs too, with AWS's own assertions.  Without the repository every test
skips.  Files that need a device framework (torch_xla, jax) are driven with NumPy arrays instead, as
``nki.jit`` takes them ("np.ndarray: compiles and executes standalone kernel", nki/api/nki/__init__.py).
"""

from __future__ import annotations

import importlib.util
import os
import runpy
import shutil
import subprocess
import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from nkisim.core.rules import NKIError

SDK = Path(os.environ.get("NKISIM_AWS_NEURON_SDK", "/work/.mirror/aws-neuron+aws-neuron-sdk/repo"))
RNG = np.random.default_rng(6)
BF16 = ml_dtypes.bfloat16


def _source(rel: str) -> str | None:
    """The text of ``rel`` in the aws-neuron-sdk copy, or None when there is none."""
    if (SDK / rel).is_file():
        return (SDK / rel).read_text(encoding="utf-8")
    if (SDK / "HEAD").is_file() and shutil.which("git"):
        r = subprocess.run(["git", "-C", str(SDK), "show", f"HEAD:{rel}"], capture_output=True, text=True,
                           check=False)
        if r.returncode == 0:
            return r.stdout
    return None


@pytest.fixture
def aws_file(tmp_path, monkeypatch):
    """Write AWS's file ``rel`` into a scratch directory and return its path (skips without the repository).  The
    environment variables and ``sys.argv`` a file sets at import are restored afterwards."""
    monkeypatch.setenv("NEURON_PLATFORM_TARGET_OVERRIDE", os.environ.get("NEURON_PLATFORM_TARGET_OVERRIDE", "trn2"))
    monkeypatch.setattr(sys, "argv", ["example"])

    def get(rel: str) -> Path:
        text = _source(rel)
        if text is None:
            pytest.skip(f"aws-neuron-sdk not found at {SDK} (set NKISIM_AWS_NEURON_SDK)")
        path = tmp_path / Path(rel).name
        path.write_text(text, encoding="utf-8")
        return path

    return get


def _module(path: Path):
    spec = importlib.util.spec_from_file_location(f"aws_example_{path.stem.replace('-', '_')}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


# ---- the getting-started kernels and the simulator quick start -------------------------------------------------
@pytest.mark.parametrize("rel", ["nki/examples/getting_started_baremetal.py", "nki/examples/getting_started_jax.py",
                                 "nki/examples/getting_started_torch.py"])
def test_getting_started_tensor_add(aws_file, rel):
    mod = _module(aws_file(rel))
    a = RNG.normal(size=(128, 96)).astype(np.float16)
    b = RNG.normal(size=(128, 96)).astype(np.float16)
    out = mod.nki_tensor_add_kernel(a, b)
    np.testing.assert_array_equal(out, (a.astype(np.float32) + b.astype(np.float32)).astype(np.float16))


def test_getting_started_baremetal_main_runs(aws_file, capsys):
    runpy.run_path(str(aws_file("nki/examples/getting_started_baremetal.py")), run_name="__main__")
    assert "2." in capsys.readouterr().out  # prints ones + ones


def test_simulate_quick_start_runs_with_its_own_assertion(aws_file):
    """nki/guides/nki_simulator.rst's quick start: nki.simulate(kernel)(a, b) against a + b (the file asserts)."""
    runpy.run_path(str(aws_file("nki/examples/simulate/nki_simulate_example.py")), run_name="__main__")


def test_tensor_addition_tutorial(aws_file):
    mod = _module(aws_file("nki/examples/tensor_addition/tensor_addition_nki_kernels.py"))
    assert os.environ["NEURON_PLATFORM_TARGET_OVERRIDE"] == "trn1"  # the file targets trn1 at import
    a = RNG.normal(size=(256, 1024)).astype(np.float32)
    b = RNG.normal(size=(256, 1024)).astype(np.float32)
    np.testing.assert_array_equal(mod.nki_tensor_add(a, b), a + b)


# ---- tutorials: transpose2d, average pool, matrix multiplication, fused mamba -------------------------------------
def test_transpose2d_tutorial(aws_file):
    path = aws_file("nki/examples/transpose2d/transpose2d_nki_kernels.py")
    runpy.run_path(str(path), run_name="__main__")  # the file's own int8 (5, 12) case and assertion
    mod = _module(path)
    a = RNG.normal(size=(128, 8 * 6)).astype(np.float32)
    out = mod.tensor_transpose2D_kernel_(a, (8, 6))
    np.testing.assert_array_equal(out, a.reshape(128, 8, 6).transpose(0, 2, 1).reshape(128, 48))


def test_average_pool2d_tutorial(aws_file):
    path = aws_file("nki/examples/average_pool2d/average_pool2d_nki_kernels.py")
    runpy.run_path(str(path), run_name="__main__")  # exact equality with np.nanmean, fp16
    mod = _module(path)
    x = RNG.normal(size=(128, 12, 12)).astype(np.float32)
    np.testing.assert_allclose(mod.tensor_avgpool_kernel(x, 3), x.reshape(128, 4, 3, 4, 3).mean(axis=(2, 4)),
                               rtol=1e-5, atol=1e-6)


def _bf16(shape):
    return RNG.uniform(0, 1, size=shape).astype(BF16)


@pytest.mark.parametrize("kernel, kw, shapes", [
    ("nki_matmul_basic_", {}, ((128, 64), (128, 512))),
    ("nki_matmul_tiled_", {}, ((256, 256), (256, 1024))),
    ("nki_matmul_hoist_load_", {}, ((256, 256), (256, 1024))),
    ("nki_matmul_block_free_dimension_", {}, ((256, 256), (256, 1024))),
    ("nki_matmul_fully_optimized_", {"TILES_IN_BLOCK_M": 2, "TILES_IN_BLOCK_N": 1, "TILES_IN_BLOCK_K": 2},
     ((512, 512), (512, 1024))),
])
def test_matrix_multiplication_tutorial(aws_file, kernel, kw, shapes):
    """The tutorial's five versions (nki/guides/tutorials/matrix_multiplication.rst): result = lhsT.T @ rhs, bf16
    inputs, fp32 PSUM accumulation, bf16 result."""
    mod = _module(aws_file("nki/examples/matrix_multiplication/matrix_multiplication_nki_kernels.py"))
    lhsT, rhs = _bf16(shapes[0]), _bf16(shapes[1])
    out = getattr(mod, kernel)(lhsT, rhs, **kw)
    ref = lhsT.astype(np.float32).T @ rhs.astype(np.float32)
    assert out.dtype == BF16 and out.shape == ref.shape
    np.testing.assert_allclose(out.astype(np.float32), ref, rtol=1e-2, atol=1e-4)  # the torch driver's tolerance


def _mamba_ref(delta, u, A, B, C):
    """Mamba's selective scan in NumPy (fp64): state_t = exp(delta_t A) state_{t-1} + delta_t B_t u_t, out_t =
    sum over the state of C_t state_t."""
    delta, u, A, B, C = (x.astype(np.float64) for x in (delta, u, A, B, C))
    dA = np.exp(delta[:, :, None, :] * A[None, :, :, None])
    dBu = delta[:, :, None, :] * B[:, None, :, :] * u[:, :, None, :]
    state = np.zeros(dA.shape[:-1])
    out = np.empty(delta.shape)
    for t in range(delta.shape[-1]):
        state = dA[..., t] * state + dBu[..., t]
        out[..., t] = (C[:, None, :, t] * state).sum(axis=-1)
    return out


def test_fused_mamba_tutorial(aws_file):
    mod = _module(aws_file("nki/examples/fused_mamba/mamba_nki_kernels.py"))
    batch, channels, seq, state = 1, 256, 512, 8
    delta = RNG.uniform(0.01, 0.1, size=(batch, channels, seq)).astype(np.float32)
    u = RNG.normal(size=(batch, channels, seq)).astype(np.float32)
    A = -RNG.uniform(0.5, 2.0, size=(channels, state)).astype(np.float32)
    B = RNG.normal(size=(batch, state, seq)).astype(np.float32)
    C = RNG.normal(size=(batch, state, seq)).astype(np.float32)
    ref = _mamba_ref(delta, u, A, B, C)
    for version in ("mamba_v1", "mamba_v2", "mamba_v3"):
        out = getattr(mod, version)(delta, u, A, B, C)
        np.testing.assert_allclose(out, ref, rtol=1e-3, atol=1e-3, err_msg=version)


def test_fused_mamba_main_runs_with_its_own_assertion(aws_file, monkeypatch):
    """The file's accuracy check (v2 and v3 bit-equal to v1), at a sequence length a test can afford."""
    path = aws_file("nki/examples/fused_mamba/mamba_nki_kernels.py")
    monkeypatch.setattr(sys, "argv", [str(path), "--seq_len", "512", "--channels", "128"])
    runpy.run_path(str(path), run_name="__main__")


# ---- the programming guide's indexing and layout examples -----------------------------------------------------------
def test_index_case_1_split_even_odd_columns(aws_file):
    mod = _module(aws_file("nki/examples/index-case-1.py"))
    x = np.arange(4 * 5, dtype=np.float32).reshape(4, 5).astype(BF16)  # the file's torch driver: arange(20), bf16
    even, odd = mod.tensor_split_kernel_(x)
    np.testing.assert_array_equal(even, x[:, 0::2])
    np.testing.assert_array_equal(odd, x[:, 1::2])


def test_index_case_3_max_pool(aws_file):
    mod = _module(aws_file("nki/examples/index-case-3.py"))
    x = np.arange(2 * 6 * 6, dtype=np.float32).reshape(2, 6, 6).astype(BF16)
    out = mod.tensor_maxpool_kernel_(x, 2)
    np.testing.assert_array_equal(out, x.reshape(2, 3, 2, 3, 2).max(axis=(2, 4)))


def test_layout_pass_exp(aws_file):
    mod = _module(aws_file("nki/examples/layout-pass.py"))
    x = RNG.uniform(-2, 2, size=(128, 512)).astype(BF16)
    out = mod.tensor_exp_kernel_(x)
    np.testing.assert_allclose(out.astype(np.float32), np.exp(x.astype(np.float32)), rtol=1e-2)


def test_layout_violation_is_the_partition_limit(aws_file):
    """The programming guide's violation example: a [256, 512] tile has more than 128 partitions."""
    mod = _module(aws_file("nki/examples/layout-violation.py"))
    with pytest.raises(NKIError, match="128|partition"):
        mod.tensor_exp_kernel_(np.ones((256, 512), dtype=BF16))
