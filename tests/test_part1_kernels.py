"""part1/kernels.py, in both editions (the default current-API starters and editions/legacy/): the starter vector
adds are correct, hit the limits the handout asks about, and the transpose stub fails with the intended message.
The legacy edition runs the same checks on fewer cases."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import nkibench
from nkibench.detect import api_of_kernel

REPO = Path(__file__).resolve().parents[1]
STARTERS = {"nki": REPO / "part1" / "kernels.py", "legacy": REPO / "editions" / "legacy" / "part1" / "kernels.py"}
# The decorators each edition's kernels carry (the legacy course also kept the compiler from reordering loops).
DECORATORS = {"nki": ["@nki.jit"], "legacy": ["@nki.compiler.skip_middle_end_transformations", "@nki.jit"]}


def load_module(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


KERNELS = {api: load_module(path, f"part1_kernels_under_test_{api}") for api, path in STARTERS.items()}
kernels = KERNELS["nki"]


@pytest.fixture(params=list(STARTERS))
def edition(request):
    return request.param, KERNELS[request.param]


def run(kernel, *args):
    """One run, as part1/run_benchmark.py does it (nkibench picks the kernel's API)."""
    return np.asarray(nkibench.launch(kernel, args))


def vectors(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.random(n, dtype=np.float32), rng.random(n, dtype=np.float32)


def test_each_edition_speaks_its_api_and_carries_its_decorators(edition):
    api, module = edition
    source = STARTERS[api].read_text()
    for name in ("vector_add_naive", "vector_add_tiled", "vector_add_stream", "matrix_transpose"):
        assert api_of_kernel(getattr(module, name)) == api, name
        depth = len(DECORATORS[api])
        head = source[: source.index(f"def {name}(")].rstrip().splitlines()[-depth:]
        assert head == DECORATORS[api], (api, name)


def test_the_editions_differ_only_in_api_spelling():
    """Same kernels, same docstrings, same knobs: only the module header and the API calls differ."""
    import ast

    trees = {api: ast.parse(path.read_text()) for api, path in STARTERS.items()}
    for api, tree in trees.items():
        names = [n.name for n in tree.body if isinstance(n, ast.FunctionDef)]
        assert names == ["vector_add_naive", "vector_add_tiled", "vector_add_stream", "matrix_transpose"], api
    docs = {api: [ast.get_docstring(n) for n in t.body if isinstance(n, ast.FunctionDef)] for api, t in trees.items()}
    assert docs["nki"] == docs["legacy"]


@pytest.mark.parametrize("api,n", [("nki", 1), ("nki", 64), ("nki", 128), ("legacy", 128)])
def test_naive_adds_up_to_128_elements(api, n):
    a, b = vectors(n)
    np.testing.assert_allclose(run(KERNELS[api].vector_add_naive, a, b), a + b, rtol=1e-6)


def test_naive_fails_beyond_128_with_the_partition_error(edition):
    a, b = vectors(256)
    with pytest.raises(Exception, match="exceed architecture limitation of 128"):
        run(edition[1].vector_add_naive, a, b)


@settings(max_examples=5, deadline=None)
@given(st.integers(min_value=1, max_value=300))
def test_tiled_with_row_chunk_1_adds_any_length(n):
    a, b = vectors(n, seed=n)
    np.testing.assert_allclose(run(kernels.vector_add_tiled, a, b), a + b, rtol=1e-6)


def test_legacy_tiled_with_row_chunk_1():
    a, b = vectors(300)
    np.testing.assert_allclose(run(KERNELS["legacy"].vector_add_tiled, a, b), a + b, rtol=1e-6)


@pytest.mark.parametrize("api,n", [("nki", 256), ("nki", 25600), ("legacy", 25600)])
def test_stream_adds_multiples_of_256(api, n):
    a, b = vectors(n)
    out = run(KERNELS[api].vector_add_stream, a, b)
    assert out.shape == (n,)
    np.testing.assert_allclose(out, a + b, rtol=1e-6)


def test_stream_rejects_lengths_that_do_not_tile(edition):
    a, b = vectors(200)
    with pytest.raises(AssertionError, match="multiple of 128"):
        run(edition[1].vector_add_stream, a, b)


def test_starter_knobs_are_where_the_handout_says(edition):
    source = STARTERS[edition[0]].read_text()
    assert "    ROW_CHUNK = 1\n" in source
    assert "    FREE_DIM = 2\n" in source


def test_transpose_stub_raises_the_not_implemented_message(edition):
    a = np.zeros((256, 128), dtype=np.float32)
    with pytest.raises(NotImplementedError, match="matrix_transpose is not implemented yet.*nc_transpose"):
        run(edition[1].matrix_transpose, a)
