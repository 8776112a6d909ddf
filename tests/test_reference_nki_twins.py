"""The staff references of the two editions, current API (grader/reference) and legacy (grader/reference/legacy),
compute the same bits, emit the same instructions and have the same modelled latency (within 1%).  Staff only:
skipped in the student release, which has neither."""

from __future__ import annotations

import numpy as np
import pytest
from nki_equivalence import REPO, compare, load_file

REFERENCE = REPO / "grader" / "reference" / "legacy"
TWINS = REPO / "grader" / "reference"
pytestmark = pytest.mark.skipif(
    not (TWINS / "part2" / "conv2d.py").is_file() or not (REFERENCE / "part2" / "conv2d.py").is_file(),
    reason="staff reference solutions are not part of the student release")


@pytest.fixture(scope="module")
def kernels():
    return {
        "transpose": (load_file(REFERENCE / "part1" / "kernels.py", "nkisim_test_ref_part1").matrix_transpose,
                      load_file(TWINS / "part1" / "kernels.py", "nkisim_test_ref_nki_part1").matrix_transpose),
        "conv": (load_file(REFERENCE / "part2" / "conv2d.py", "nkisim_test_ref_conv").fused_conv2d_maxpool,
                 load_file(TWINS / "part2" / "conv2d.py", "nkisim_test_ref_nki_conv").fused_conv2d_maxpool),
        # the relaxed conv (the partial-credit bar where the optimized kernel cannot run): one per API since issue 34
        "relaxed": (load_file(REFERENCE / "relaxed" / "part2" / "conv2d.py",
                              "nkisim_test_rel_conv").fused_conv2d_maxpool,
                    load_file(TWINS / "relaxed" / "part2" / "conv2d.py",
                              "nkisim_test_rel_nki_conv").fused_conv2d_maxpool),
    }


@pytest.mark.parametrize("target", ["trn2", "trn1"])
@pytest.mark.parametrize("shape", [(256, 384), (1024, 1024)])
def test_transpose_twins(kernels, shape, target):
    a = np.random.default_rng(1).random(shape).astype(np.float32)
    r = compare(*kernels["transpose"], (a,), target=target)
    assert r["values_equal"]
    assert r["ops"][0] == r["ops"][1]
    assert abs(r["ratio"] - 1) < 0.01, r


@pytest.mark.parametrize("which", ["conv", "relaxed"])
@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("pool", [1, 2])
@pytest.mark.parametrize("hw", [(10, 9), (32, 16)])
def test_conv_twins_values_and_latency(kernels, hw, pool, dtype, which):
    """Small images (values and latency), both pool sizes and dtypes, the generic and the fused pooling paths."""
    rng = np.random.default_rng(2)
    cin = 128 if hw == (10, 9) else 256
    args = (rng.random((1, cin, *hw)).astype(dtype), rng.random((cin, cin, 3, 3)).astype(dtype),
            rng.random(cin).astype(dtype))
    r = compare(*kernels[which], args, {"pool_size": pool})
    assert r["values_equal"]
    assert r["ops"][0] == r["ops"][1]
    assert abs(r["ratio"] - 1) < 0.01, r


@pytest.mark.slow
@pytest.mark.parametrize("which", ["conv", "relaxed"])
@pytest.mark.parametrize("target", ["trn2", "trn1"])
@pytest.mark.parametrize("pool", [1, 2])
def test_conv_twins_latency_on_the_course_shape(kernels, pool, target, which):
    """The 224x224 performance case the grader scores (timing mode only: the model never reads values)."""
    args = (np.zeros((1, 256, 224, 224), np.float16), np.zeros((256, 256, 3, 3), np.float16), np.zeros(256, np.float16))
    r = compare(*kernels[which], args, {"pool_size": pool}, target=target, values=False)
    assert r["ops"][0] == r["ops"][1]
    assert abs(r["ratio"] - 1) < 0.01, r


def _placement(trace) -> list:
    """Every operand's physical placement, buffer ids numbered by first use (each front end's own numbering also
    counts the ids its provisional results took, which no instruction names)."""
    ids: dict = {}
    out = []
    for ins in trace.instrs:
        row = [ins.op]
        for o in ins.srcs + ins.dsts:
            r = o.region
            key = (int(r.buf), r.phys)
            row.append((int(r.buf), ids.setdefault(key, len(ids)), r.p_lo, r.p_hi, r.b_lo, r.b_hi))
        out.append(row)
    return out


@pytest.mark.parametrize("target", ["trn1", "trn2"])
@pytest.mark.parametrize("which", ["conv", "relaxed"])
@pytest.mark.parametrize("pool", [1, 2])
def test_conv_twins_get_the_same_placement(kernels, pool, which, target):
    """Automatic allocation is the core's (core.buffers, core.memory): both front ends' kernels get the same
    physical buffers, partitions and bytes for the same instruction stream, on either target's capacity.  The one
    difference is the relaxed pool-2 kernels' own layout of their conv rows (legacy (P, pool, width), current API
    (P, width, pool), so that its row max reduces a trailing axis): the current API's strided row writes span
    interleaved bytes, and that alone is the 4% between the twins on trn1 (issue 33, stop 38)."""
    from nkisim.core.runtime import run_kernel

    rng = np.random.default_rng(2)
    args = (rng.random((1, 256, 32, 16)).astype(np.float16), rng.random((256, 256, 3, 3)).astype(np.float16),
            rng.random(256).astype(np.float16))
    legacy, current = kernels[which]
    a = _placement(run_kernel(legacy, args, {"pool_size": pool}, mode="timing", target=target).trace)
    b = _placement(run_kernel(current, args, {"pool_size": pool}, mode="timing", target=target).trace)
    assert len(a) == len(b)
    differ = [(i, x, y) for i, (x, y) in enumerate(zip(a, b)) if x != y]
    if which == "relaxed" and pool == 2:
        strip = [(i, [e if isinstance(e, str) else e[:4] for e in x], [e if isinstance(e, str) else e[:4] for e in y])
                 for i, x, y in differ]
        assert all(x == y for _, x, y in strip), strip[:3]  # same buffers and partitions, other bytes
        # the bias adds that write the conv rows, every one of them: nothing else differs
        assert [i for i, _, _ in differ] == [i for i, r in enumerate(a) if r[0] == "tensor_scalar"]
    else:
        assert not differ, differ[:3]
