"""Toolchain eras (issue 10, items 2-4): the 2024 (trn1) course toolchain's rules and spellings next to the 2025
(trn2) ones, the era setting itself, and nl.loop_reduce."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl
import numpy as np
import pytest
from nkisim_util import raises_rule

from nkisim.core import config, rules
from nkisim.core.runtime import run_kernel

RNG = np.random.default_rng(24)
W = RNG.standard_normal((3, 128, 128)).astype(np.float32)
X = RNG.standard_normal((3, 128, 96)).astype(np.float32)
REF = sum(W[j].astype(np.float64).T @ X[j] for j in range(3))


@pytest.fixture(autouse=True)
def _no_era_override(monkeypatch):
    monkeypatch.delenv(config.ERA_ENV, raising=False)


# ---------------------------------------------------------------------------------------------------------
# the era setting


def test_era_follows_the_target_and_the_environment_overrides_it(monkeypatch):
    assert config.toolchain_era("trn1") == "2024"
    assert config.toolchain_era("trn2") == "2025"
    monkeypatch.setenv(config.ERA_ENV, "2024")
    assert config.toolchain_era("trn2") == "2024"
    monkeypatch.setenv(config.ERA_ENV, "1999")
    with pytest.raises(ValueError, match="unknown toolchain era '1999'"):
        config.toolchain_era("trn2")


def test_info_shows_the_era():
    out = subprocess.run([sys.executable, "-m", "nkisim", "info"], capture_output=True, text=True, check=True,
                         env={"NEURON_PLATFORM_TARGET_OVERRIDE": "trn1", "PATH": ""}).stdout
    assert config.ERA_ENV in out
    from nkibench.detect import DEFAULT_API

    if DEFAULT_API == "nki":  # the default edition: today's API first, the legacy course year second
        assert f"toolchain era:  nki: {config.ERAS['nki']}" in out
        assert "(legacy neuronxcc.nki kernels: 2024: Fall 2024 course toolchain" in out
    else:
        assert "toolchain era:  2024" in out


def test_info_leads_with_the_editions_api(monkeypatch):
    """Issue 34: the current-API edition's `nkisim info` said only "Fall 2025 course toolchain (SDK 2.26)"."""
    from nkisim import fallback

    for api, first in (("nki", "toolchain era:  nki: the current nki API (NKI 0.6"),
                       ("legacy", "toolchain era:  2025: Fall 2025 course toolchain")):
        monkeypatch.setattr(fallback, "_edition_api", lambda api=api: api)
        monkeypatch.delenv(config.ERA_ENV, raising=False)
        monkeypatch.setenv("NEURON_PLATFORM_TARGET_OVERRIDE", "trn2")
        text = fallback.describe()
        era_line = next(line for line in text.splitlines() if line.startswith("toolchain era:"))
        assert era_line.startswith(first), era_line


def test_catalogue_lists_each_rules_era():
    md = rules.markdown()
    assert "| eras |" in md
    hbm = next(line for line in md.splitlines() if "`err_hbm_tensor_with_init_value_not_supported`" in line)
    assert "| 2025, nki |" in hbm and "2024: accepted" in hbm
    assert rules.applies("nkisim_psum_tile_fmax", "2024") and not rules.applies("nkisim_psum_tile_fmax", "2025")
    with open(Path(__file__).resolve().parent.parent / "docs" / "constraints.md") as f:
        assert f.read() == md, "docs/constraints.md is stale: python -m nkisim.core.rules > docs/constraints.md"


# ---------------------------------------------------------------------------------------------------------
# item 4: HBM tensors with an init value; PSUM tile free size


def _zeros_output(a):
    out = nl.zeros((128, 64), dtype=nl.float32, buffer=nl.hbm)
    nl.store(out[:, 0:32], nl.load(a[:, 0:32]))
    return out


def test_hbm_zeros_output_is_accepted_by_the_2024_toolchain():
    a = RNG.standard_normal((128, 64)).astype(np.float32)
    run = run_kernel(_zeros_output, (a,), target="trn1")
    np.testing.assert_array_equal(run.outputs[:, :32], a[:, :32])
    np.testing.assert_array_equal(run.outputs[:, 32:], 0)
    assert [i.attrs.get("via") for i in run.trace][0] == "hbm_init"  # the fill costs one DMA write


def test_hbm_zeros_is_rejected_by_the_2025_toolchain(monkeypatch):
    a = np.zeros((128, 64), np.float32)
    with raises_rule("err_hbm_tensor_with_init_value_not_supported"):
        run_kernel(_zeros_output, (a,), target="trn2")
    monkeypatch.setenv(config.ERA_ENV, "2025")
    with raises_rule("err_hbm_tensor_with_init_value_not_supported"):
        run_kernel(_zeros_output, (a,), target="trn1")


def test_psum_tile_free_size_is_a_2024_rule():
    def k():
        nl.ndarray((128, 1024), dtype=nl.float32, buffer=nl.psum)
        nl.ndarray((4, nl.par_dim(128), 512), dtype=nl.float32, buffer=nl.psum)  # blocks: four 2 KiB tiles

    with raises_rule("nkisim_psum_tile_fmax", "[128, 1024]", "1024 free elements", "psum_fmax (512"):
        run_kernel(k, (), target="trn1")
    run_kernel(k, (), target="trn2")


# ---------------------------------------------------------------------------------------------------------
# item 3: acc[...] = acc + nl.matmul(...)


def _acc_plus(w, x):
    out = nl.ndarray((128, 96), dtype=nl.float32, buffer=nl.hbm)
    acc = nl.zeros((128, 96), nl.float32, buffer=nl.psum)
    for j in nl.affine_range(3):
        acc[...] = acc + nl.matmul(nl.load(w[j]), nl.load(x[j]), transpose_x=True)
    nl.store(out, nl.copy(acc))
    return out


def _acc_iadd(w, x):
    out = nl.ndarray((128, 96), dtype=nl.float32, buffer=nl.hbm)
    acc = nl.zeros((128, 96), nl.float32, buffer=nl.psum)
    for j in nl.affine_range(3):
        acc += nl.matmul(nl.load(w[j]), nl.load(x[j]), transpose_x=True)
    nl.store(out, nl.copy(acc))
    return out


def test_acc_plus_matmul_is_psum_accumulation_in_2024():
    a = run_kernel(_acc_plus, (W, X), target="trn1")
    b = run_kernel(_acc_iadd, (W, X), target="trn1")
    np.testing.assert_allclose(a.outputs, REF, rtol=1e-4, atol=1e-4)
    np.testing.assert_array_equal(a.outputs, b.outputs)
    assert [(i.op, i.attrs.get("accumulate")) for i in a.trace] == [(i.op, i.attrs.get("accumulate"))
                                                                    for i in b.trace]


def test_acc_plus_matmul_is_rejected_in_2025():
    with raises_rule("nkisim_two_inputs_in_psum"):
        run_kernel(_acc_plus, (W, X), target="trn2")


def test_acc_plus_matmul_used_elsewhere_is_the_sum():
    def k(w, x):
        out = nl.ndarray((2, 128, 96), dtype=nl.float32, buffer=nl.hbm)
        acc = nl.zeros((128, 96), nl.float32, buffer=nl.psum)
        acc += nisa.nc_matmul(nl.load(w[0]), nl.load(x[0]))
        s = acc + nisa.nc_matmul(nl.load(w[1]), nl.load(x[1]))  # not assigned back: a real sum
        nl.store(out[0], nl.copy(s))
        nl.store(out[1], nl.copy(acc))  # acc is untouched
        return out

    out = run_kernel(k, (W, X), target="trn1").outputs
    one = W[0].astype(np.float64).T @ X[0]
    np.testing.assert_allclose(out[0], one + W[1].astype(np.float64).T @ X[1], rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(out[1], one, rtol=1e-4, atol=1e-4)


# ---------------------------------------------------------------------------------------------------------
# item 2: nl.loop_reduce


@pytest.mark.parametrize("op,np_op", [(np.add, np.add), (nl.maximum, np.maximum), (np.minimum, np.minimum)])
def test_loop_reduce_reduces_over_the_loop_into_the_destination(op, np_op):
    x = RNG.standard_normal((4, 128, 64)).astype(np.float32)

    def k(x):
        out = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.hbm)
        b = nl.zeros((128, 64), dtype=nl.float32, buffer=nl.sbuf) if op is np.add else nl.load(x[0])
        for k_i in nl.affine_range(4):
            a = nl.load(x[k_i])
            b = nl.loop_reduce(a, op=op, loop_indices=[k_i], dtype=nl.float32)
        nl.store(out, b)
        return out

    run = run_kernel(k, (x,), target="trn1")
    start = np.zeros((128, 64), np.float32) if op is np.add else x[0]
    ref = start
    for i in range(4):
        ref = np_op(ref, x[i])
    np.testing.assert_allclose(run.outputs, ref, rtol=1e-6)
    adds = [i for i in run.trace if i.op == "tensor_tensor"]
    assert len(adds) == 4 and all(i.dsts[0].region == adds[0].dsts[0].region for i in adds)  # in place


def test_loop_reduce_from_psum_and_into_an_indexed_destination():
    def k(w, x):
        out = nl.ndarray((128, 96), dtype=nl.float32, buffer=nl.hbm)
        b = nl.zeros((2, 128, 96), dtype=nl.float32, buffer=nl.sbuf)
        for j in nl.affine_range(3):
            ps = nisa.nc_matmul(nl.load(w[j]), nl.load(x[j]))
            b[1] = nl.loop_reduce(ps, op=np.add, loop_indices=(j,))
        nl.store(out, b[1])
        return out

    out = run_kernel(k, (W, X), target="trn1").outputs
    np.testing.assert_allclose(out, REF, rtol=1e-4, atol=1e-4)


def test_loop_reduce_needs_an_existing_destination():
    def k(x):
        for k_i in nl.affine_range(2):
            fresh_name = nl.loop_reduce(nl.load(x[k_i]), op=np.add, loop_indices=[k_i])
        return fresh_name

    with raises_rule("nkisim_bad_argument", "loop_reduce", "fresh_name"):
        run_kernel(k, (np.zeros((2, 128, 4), np.float32),))


def _conv2024(X, Wt, bias):
    """A 2024-style fused conv written the way that cohort wrote it (our own code): HBM output from nl.zeros,
    rows flattened onto the free axis, an over-long row window sliced back, index-expression PSUM accumulation."""
    B, C, H, Wd = X.shape
    K = Wt.shape[0]
    oh, ow = H - 2, Wd - 2
    X_out = nl.zeros((B, K, oh, ow), dtype=X.dtype, buffer=nl.hbm)
    i_p = nl.arange(128)[:, None]
    i_f = nl.arange(ow)[None, :]
    w_t = nl.ndarray((3, 3, nl.par_dim(128), 128), dtype=nl.float32, buffer=nl.sbuf)
    for fh in nl.affine_range(3):
        for fw in nl.affine_range(3):
            w_t[fh, fw] = nl.copy(nl.transpose(nl.load(Wt[:, :, fh, fw])))
    b_t = nl.load(bias.reshape((K, 1)))
    for b in nl.affine_range(B):
        x_flat = X[b].reshape((C, H * Wd))
        for r in nl.affine_range(oh):
            rows = nl.load(x_flat[:, r * Wd:(r + 3) * Wd])  # three input rows side by side
            res = nl.zeros((128, ow), nl.float32, buffer=nl.psum)
            for fw in nl.affine_range(3):
                win = rows[:, fw:fw + 3 * Wd]  # runs fw columns past the tile
                for fh in nl.affine_range(3):
                    rhs = win[:, fh * Wd:fh * Wd + ow]  # always inside it
                    res[i_p, i_f] += nl.matmul(w_t[fh, fw], rhs, transpose_x=True)
            nl.store(X_out[b, :, r, :], value=nl.add(res, b_t))
    return X_out


def test_2024_style_conv_matches_numpy_on_trn1():
    X = RNG.standard_normal((2, 128, 6, 8)).astype(np.float32)
    Wt = RNG.standard_normal((128, 128, 3, 3)).astype(np.float32)
    bias = RNG.standard_normal((128,)).astype(np.float32)
    out = run_kernel(_conv2024, (X, Wt, bias), target="trn1").outputs
    ref = np.zeros((2, 128, 4, 6))
    for fh in range(3):
        for fw in range(3):
            ref += np.einsum("kc,bchw->bkhw", Wt[:, :, fh, fw].astype(np.float64), X[:, :, fh:fh + 4, fw:fw + 6])
    ref += bias[None, :, None, None]
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-3)
