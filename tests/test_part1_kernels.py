"""part1/kernels.py: the starter vector adds are correct, hit the limits the handout asks about, and the
transpose stub fails with the intended message."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import neuronxcc.nki as nki
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

REPO = Path(__file__).resolve().parents[1]


def load_module(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


kernels = load_module(REPO / "part1" / "kernels.py", "part1_kernels_under_test")


def vectors(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.random(n, dtype=np.float32), rng.random(n, dtype=np.float32)


def test_every_kernel_carries_the_course_decorators():
    for name in ("vector_add_naive", "vector_add_tiled", "vector_add_stream", "matrix_transpose"):
        source = (REPO / "part1" / "kernels.py").read_text()
        head = source[: source.index(f"def {name}(")].rstrip().splitlines()[-2:]
        assert head == ["@nki.compiler.skip_middle_end_transformations", "@nki.jit"], name


@pytest.mark.parametrize("n", [1, 64, 128])
def test_naive_adds_up_to_128_elements(n):
    a, b = vectors(n)
    np.testing.assert_allclose(nki.baremetal(kernels.vector_add_naive)(a, b), a + b, rtol=1e-6)


def test_naive_fails_beyond_128_with_the_partition_error():
    a, b = vectors(256)
    with pytest.raises(Exception, match="exceed architecture limitation of 128"):
        nki.baremetal(kernels.vector_add_naive)(a, b)


@settings(max_examples=5, deadline=None)
@given(st.integers(min_value=1, max_value=300))
def test_tiled_with_row_chunk_1_adds_any_length(n):
    a, b = vectors(n, seed=n)
    np.testing.assert_allclose(nki.baremetal(kernels.vector_add_tiled)(a, b), a + b, rtol=1e-6)


@pytest.mark.parametrize("n", [256, 25600])
def test_stream_adds_multiples_of_256(n):
    a, b = vectors(n)
    out = nki.baremetal(kernels.vector_add_stream)(a, b)
    assert out.shape == (n,)
    np.testing.assert_allclose(out, a + b, rtol=1e-6)


def test_stream_rejects_lengths_that_do_not_tile():
    a, b = vectors(200)
    with pytest.raises(AssertionError, match="multiple of 128"):
        nki.baremetal(kernels.vector_add_stream)(a, b)


def test_starter_knobs_are_where_the_handout_says():
    source = (REPO / "part1" / "kernels.py").read_text()
    assert "    ROW_CHUNK = 1\n" in source
    assert "    FREE_DIM = 2\n" in source


def test_transpose_stub_raises_the_not_implemented_message():
    a = np.zeros((256, 128), dtype=np.float32)
    with pytest.raises(NotImplementedError, match="matrix_transpose is not implemented yet.*nc_transpose"):
        nki.baremetal(kernels.matrix_transpose)(a)
