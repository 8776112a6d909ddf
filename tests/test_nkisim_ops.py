"""Every supported op against an independent NumPy computation, over shapes and dtypes.

References are written with plain NumPy on fp32/fp64 copies of the inputs and rounded once to the output dtype
(the engines compute in fp32 and round once: trainium arch guide, "All arithmetic is done in FP32").
"""

from __future__ import annotations

import ml_dtypes
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nkisim.core.runtime import run_kernel

BF16 = ml_dtypes.bfloat16
F16, F32 = np.float16, np.float32
FLOATS = [F32, F16, BF16]
SETTINGS = settings(max_examples=25, deadline=None, derandomize=True)
PER_OP = settings(max_examples=8, deadline=None, derandomize=True)  # parametrized per op: every op is exercised


def run(kernel, *args, **kwargs):
    return run_kernel(kernel, args, kwargs).outputs


def _rand(shape, dtype, lo=0.5, hi=2.0, seed=0):
    rng = np.random.default_rng(seed)
    return rng.uniform(lo, hi, size=shape).astype(np.float32).astype(dtype)


def _f32(x):
    return np.asarray(x).astype(np.float32)


def _store(r):
    out = nl.ndarray(r.shape, dtype=r.dtype, buffer=nl.hbm)
    nl.store(out, r)
    return out


# ---------------------------------------------------------------------------------------------------------
# nl binary element-wise ops (tile x tile and tile x scalar) with NKI promotion

def _binary_kernel(a, b, fn=None):
    return _store(fn(nl.load(a), nl.load(b)))


def _scalar_kernel(a, fn=None, scalar=None, left=False):
    t = nl.load(a)
    return _store(fn(scalar, t) if left else fn(t, scalar))


BINARY = {
    "add": (nl.add, np.add),
    "subtract": (nl.subtract, np.subtract),
    "multiply": (nl.multiply, np.multiply),
    "divide": (nl.divide, np.divide),
    "power": (nl.power, np.power),
    "maximum": (nl.maximum, np.maximum),
    "minimum": (nl.minimum, np.minimum),
    "fmod": (nl.fmod, np.fmod),
    "mod": (nl.mod, np.mod),
}
COMPARE = {
    "equal": (nl.equal, np.equal),
    "not_equal": (nl.not_equal, np.not_equal),
    "greater": (nl.greater, np.greater),
    "greater_equal": (nl.greater_equal, np.greater_equal),
    "less": (nl.less, np.less),
    "less_equal": (nl.less_equal, np.less_equal),
}
# NKI type promotion of two float dtypes (nki.api.shared "NKI Type Promotion"): the wider one, fp16+bf16 -> fp32
PROMOTE = {
    (F32, F32): F32, (F16, F16): F16, (BF16, BF16): BF16, (F32, F16): F32, (F16, F32): F32,
    (F32, BF16): F32, (BF16, F32): F32, (F16, BF16): F32, (BF16, F16): F32,
}


@pytest.mark.parametrize("op", sorted(BINARY))
@PER_OP
@given(p=st.integers(1, 128), f=st.integers(1, 48), da=st.sampled_from(FLOATS), db=st.sampled_from(FLOATS))
def test_nl_binary_tile_tile(op, p, f, da, db):
    nki_fn, np_fn = BINARY[op]
    a, b = _rand((p, f), da, seed=1), _rand((p, f), db, seed=2)
    out = run(_binary_kernel, a, b, fn=nki_fn)
    want_dt = PROMOTE[(da, db)]
    assert out.dtype == want_dt
    np.testing.assert_array_equal(out, np_fn(_f32(a), _f32(b)).astype(want_dt))


@pytest.mark.parametrize("op", sorted(BINARY))
@PER_OP
@given(p=st.integers(1, 128), f=st.integers(1, 48), dt=st.sampled_from(FLOATS),
       scalar=st.floats(0.25, 4.0, width=32), left=st.booleans())
def test_nl_binary_tile_python_float(op, p, f, dt, scalar, left):
    """A Python float is weakly typed as fp32: fp16/bf16 tile (op) float -> fp32 (NKI, unlike NumPy 2)."""
    nki_fn, np_fn = BINARY[op]
    a = _rand((p, f), dt, seed=3)
    out = run(_scalar_kernel, a, fn=nki_fn, scalar=scalar, left=left)
    assert out.dtype == F32
    s = np.float32(scalar)
    want = np_fn(s, _f32(a)) if left else np_fn(_f32(a), s)
    np.testing.assert_array_equal(out, want.astype(F32))


@pytest.mark.parametrize("op", sorted(COMPARE))
def test_nl_comparisons_default_to_bool(op):
    nki_fn, np_fn = COMPARE[op]
    a = np.array([[1, 2, 3], [4, 5, 6]], dtype=F32)
    b = np.array([[1, 3, 2], [4, 4, 7]], dtype=F32)
    out = run(_binary_kernel, a, b, fn=nki_fn)
    assert out.dtype == np.bool_
    np.testing.assert_array_equal(out, np_fn(a, b))
    out_s = run(_scalar_kernel, a, fn=nki_fn, scalar=3.0)
    assert out_s.dtype == np.bool_
    np.testing.assert_array_equal(out_s, np_fn(a, np.float32(3.0)))


def test_nl_logical_ops():
    a = np.array([[0, 1, 0, 1]], dtype=np.uint8)
    b = np.array([[0, 0, 1, 1]], dtype=np.uint8)
    for nki_fn, np_fn in ((nl.logical_and, np.logical_and), (nl.logical_or, np.logical_or),
                          (nl.logical_xor, np.logical_xor)):
        out = run(_binary_kernel, a, b, fn=nki_fn)
        np.testing.assert_array_equal(out, np_fn(a, b))


@pytest.mark.parametrize("dt", [np.int32, np.uint8, np.int16])
def test_integer_and_bitvec_ops(dt):
    rng = np.random.default_rng(4)
    a = rng.integers(0, 100, size=(16, 8)).astype(dt)
    b = rng.integers(0, 7, size=(16, 8)).astype(dt)
    for nki_fn, ref in ((nl.add, a.astype(np.int64) + b), (nl.bitwise_and, a & b), (nl.bitwise_or, a | b),
                        (nl.bitwise_xor, a ^ b), (nl.left_shift, a.astype(np.int64) << b),
                        (nl.right_shift, a >> b), (nl.multiply, a.astype(np.int64) * b)):
        out = run(_binary_kernel, a, b, fn=nki_fn)
        assert out.dtype == dt
        np.testing.assert_array_equal(out, ref.astype(dt), err_msg=nki_fn.__name__)


def test_integer_promotion():
    """(int8, uint8) -> int16; (int32, uint32) -> fp32 (NKI Type Promotion)."""
    a8 = np.arange(6, dtype=np.int8).reshape(2, 3)
    out = run(_binary_kernel, a8, a8.astype(np.uint8), fn=nl.add)
    assert out.dtype == np.int16
    np.testing.assert_array_equal(out, a8.astype(np.int16) * 2)
    a32 = np.arange(6, dtype=np.int32).reshape(2, 3)
    out = run(_binary_kernel, a32, a32.astype(np.uint32), fn=nl.add)
    assert out.dtype == np.float32


def test_fp8_promotion():
    """(float8_e4m3, float8_e5m2) -> bfloat16 (NKI Type Promotion), computed in fp32 and rounded once."""
    a = np.array([[1.5, 2.0, -0.75]], dtype=nl.float8_e4m3)
    b = np.array([[0.25, 3.0, 0.125]], dtype=nl.float8_e5m2)
    out = run(_binary_kernel, a, b, fn=nl.add)
    assert out.dtype == BF16
    np.testing.assert_array_equal(out, (_f32(a) + _f32(b)).astype(BF16))


def test_float_int_promotion_and_typed_scalar():
    a = _rand((4, 4), F16)
    i = np.arange(16, dtype=np.int32).reshape(4, 4)
    out = run(_binary_kernel, a, i, fn=nl.add)
    assert out.dtype == F16
    np.testing.assert_array_equal(out, (_f32(a) + i).astype(F16))
    # a typed NumPy scalar is not widened
    out = run(_scalar_kernel, a, fn=nl.multiply, scalar=np.float16(2))
    assert out.dtype == F16
    # an explicit dtype= wins
    out = run(lambda x: _store(nl.add(nl.load(x), 1.5, dtype=nl.bfloat16)), a)
    assert out.dtype == BF16
    np.testing.assert_array_equal(out, (_f32(a) + 1.5).astype(BF16))


def test_python_operators_on_tiles():
    a, b = _rand((8, 4), F32, seed=5), _rand((8, 4), F32, seed=6)

    def k(x, y):
        s, t = nl.load(x), nl.load(y)
        return _store(s + t), _store(s - t), _store(s * t), _store(s / t), _store(-s), _store(2.0 * s), \
            _store(s > t)

    outs = run(k, a, b)
    refs = (a + b, a - b, a * b, a / b, -a, 2 * a, a > b)
    for o, r in zip(outs, refs):
        np.testing.assert_array_equal(o, r)


# ---------------------------------------------------------------------------------------------------------
# nl unary (ScalarE activation table) ops


def _gelu(x):
    from math import erf
    return 0.5 * x * (1 + np.vectorize(erf)(x / np.sqrt(2)))


UNARY = {
    "exp": (nl.exp, np.exp, (-3, 3)),
    "log": (nl.log, np.log, (0.1, 5)),
    "sqrt": (nl.sqrt, np.sqrt, (0.1, 5)),
    "rsqrt": (nl.rsqrt, lambda x: 1 / np.sqrt(x), (0.1, 5)),
    "reciprocal": (nl.reciprocal, lambda x: 1 / x, (0.1, 5)),
    "sin": (nl.sin, np.sin, (-3, 3)),
    "cos": (nl.cos, np.cos, (-3, 3)),
    "tan": (nl.tan, np.tan, (-1, 1)),
    "tanh": (nl.tanh, np.tanh, (-3, 3)),
    "arctan": (nl.arctan, np.arctan, (-3, 3)),
    "sigmoid": (nl.sigmoid, lambda x: 1 / (1 + np.exp(-x)), (-5, 5)),
    "relu": (nl.relu, lambda x: np.maximum(x, 0), (-3, 3)),
    "gelu": (nl.gelu, _gelu, (-3, 3)),
    "gelu_apprx_tanh": (nl.gelu_apprx_tanh,
                        lambda x: 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3))), (-3, 3)),
    "silu": (nl.silu, lambda x: x / (1 + np.exp(-x)), (-3, 3)),
    "softplus": (nl.softplus, lambda x: np.log1p(np.exp(x)), (-3, 3)),
    "mish": (nl.mish, lambda x: x * np.tanh(np.log1p(np.exp(x))), (-3, 3)),
    "erf": (nl.erf, lambda x: np.vectorize(__import__("math").erf)(x), (-2, 2)),
    "square": (nl.square, np.square, (-3, 3)),
    "abs": (nl.abs, np.abs, (-3, 3)),
    "sign": (nl.sign, np.sign, (-3, 3)),
    "negative": (nl.negative, np.negative, (-3, 3)),
    "floor": (nl.floor, np.floor, (-3, 3)),
    "ceil": (nl.ceil, np.ceil, (-3, 3)),
    "trunc": (nl.trunc, np.trunc, (-3, 3)),
    "identity": (nl.identity, lambda x: x, (-3, 3)),
    "gelu_apprx_sigmoid": (nl.gelu_apprx_sigmoid, lambda x: x / (1 + np.exp(-1.702 * x)), (-3, 3)),
    # derivatives: d/dx erf = 2/sqrt(pi) exp(-x^2); d/dx gelu = Phi(x) + x phi(x); d/dx silu = s (1 + x (1 - s))
    "erf_dx": (nl.erf_dx, lambda x: 2 / np.sqrt(np.pi) * np.exp(-x * x), (-2, 2)),
    "gelu_dx": (nl.gelu_dx, lambda x: 0.5 * (1 + np.vectorize(__import__("math").erf)(x / np.sqrt(2)))
                + x * np.exp(-x * x / 2) / np.sqrt(2 * np.pi), (-3, 3)),
    "silu_dx": (nl.silu_dx, lambda x: (1 / (1 + np.exp(-x))) * (1 + x * (1 - 1 / (1 + np.exp(-x)))), (-3, 3)),
}


@pytest.mark.parametrize("op", sorted(UNARY))
@PER_OP
@given(p=st.integers(1, 128), f=st.integers(1, 32), dt=st.sampled_from(FLOATS))
def test_nl_unary(op, p, f, dt):
    nki_fn, ref_fn, (lo, hi) = UNARY[op]
    a = _rand((p, f), dt, lo, hi, seed=7)
    out = run(lambda x: _store(nki_fn(nl.load(x))), a)
    assert out.dtype == dt  # unary ops keep the input dtype
    ref = ref_fn(a.astype(np.float64)).astype(np.float32)
    if dt == F32:
        np.testing.assert_allclose(out, ref, rtol=2e-6, atol=1e-6)
    else:  # one rounding to the narrow type: within half an ulp of the fp32 result, plus fp32 noise
        eps = 2.0 ** (-11 if dt == F16 else -8)
        np.testing.assert_allclose(_f32(out), ref, rtol=eps, atol=1e-6)


# ---------------------------------------------------------------------------------------------------------
# reductions


REDUCE = {"max": (nl.max, np.max), "min": (nl.min, np.min), "sum": (nl.sum, np.sum), "prod": (nl.prod, np.prod),
          "mean": (nl.mean, np.mean)}


@pytest.mark.parametrize("op", sorted(REDUCE))
@PER_OP
@given(p=st.integers(1, 128), shape=st.lists(st.integers(1, 6), min_size=1, max_size=3), data=st.data(),
       keepdims=st.booleans())
def test_nl_reductions(op, p, shape, data, keepdims):
    nki_fn, np_fn = REDUCE[op]
    full = (p, *shape)
    free_axes = list(range(1, len(full)))
    axes = data.draw(st.lists(st.sampled_from(free_axes), min_size=1, unique=True))
    a = _rand(full, F32, 0.9, 1.1, seed=8)
    out = run(lambda x: _store(nki_fn(nl.load(x), axis=axes, keepdims=keepdims)), a)
    ref = np_fn(a.astype(np.float64), axis=tuple(axes), keepdims=keepdims).astype(np.float32)
    assert out.shape == ref.shape
    np.testing.assert_allclose(out, ref, rtol=2e-6)


def test_nl_all():
    a = np.array([[1, 1, 1], [1, 0, 1]], dtype=np.uint8)
    out = run(lambda x: _store(nl.all(nl.load(x), axis=1)), a)
    np.testing.assert_array_equal(out.astype(bool), [True, False])


@pytest.mark.parametrize("op", [nl.max, nl.maximum, np.max, np.amax, nl.add, np.add, nl.minimum, np.min,
                                nl.multiply])
@pytest.mark.parametrize("axes,keepdims,negate", [((1, 3), False, False), ((2, 4), True, True), (1, False, True),
                                                  ([3], True, False)])
def test_nisa_tensor_reduce(op, axes, keepdims, negate):
    a = _rand((16, 2, 3, 2, 5), F32, 0.5, 1.5, seed=9)
    nd = a.ndim
    ax = tuple(x for x in ((axes,) if isinstance(axes, int) else axes) if x < nd)
    out = run(lambda x: _store(nisa.tensor_reduce(op, nl.load(x), axis=ax, keepdims=keepdims, negate=negate)), a)
    name = getattr(op, "__name__", "")
    ref_fn = {"max": np.max, "maximum": np.max, "amax": np.max, "add": np.sum, "sum": np.sum, "minimum": np.min,
              "min": np.min, "amin": np.min, "multiply": np.prod}[name]
    ref = ref_fn(a.astype(np.float64), axis=ax, keepdims=keepdims)
    if negate:
        ref = -ref
    assert out.shape == ref.shape
    np.testing.assert_allclose(out, ref.astype(np.float32), rtol=2e-6)


def test_tensor_reduce_psum_input_and_dtype():
    """Reducing straight from PSUM (students do) into an fp16 result."""
    a = _rand((64, 128), F16, seed=10)
    b = _rand((64, 256), F16, seed=11)

    def k(x, y):
        ps = nisa.nc_matmul(nl.load(x), nl.load(y))
        return _store(nisa.tensor_reduce(np.add, ps, axis=1, dtype=nl.float16))

    out = run(k, a, b)
    ref = (_f32(a).T.astype(np.float64) @ _f32(b)).sum(axis=1)
    assert out.dtype == F16 and out.shape == (128,)
    np.testing.assert_allclose(_f32(out), ref, rtol=2 ** -10)


# ---------------------------------------------------------------------------------------------------------
# tensor_tensor / tensor_scalar / tensor_copy / activation


@pytest.mark.parametrize("op", [nl.add, nl.subtract, nl.multiply, nl.maximum, np.add, np.multiply, np.subtract])
@PER_OP
@given(p=st.integers(1, 128), f=st.integers(1, 64), da=st.sampled_from(FLOATS), db=st.sampled_from(FLOATS))
def test_nisa_tensor_tensor(p, f, da, db, op):
    a, b = _rand((p, f), da, seed=12), _rand((p, f), db, seed=13)
    out = run(lambda x, y: _store(nisa.tensor_tensor(nl.load(x), nl.load(y), op=op)), a, b)
    ref_fn = {"add": np.add, "subtract": np.subtract, "multiply": np.multiply, "maximum": np.maximum}[op.__name__]
    assert out.dtype == PROMOTE[(da, db)]
    np.testing.assert_array_equal(out, ref_fn(_f32(a), _f32(b)).astype(out.dtype))


@pytest.mark.parametrize("sa,sb", [((128, 6), (128, 1)), ((128, 2, 5), (128, 1)), ((128, 3, 4), (128, 1, 1)),
                                   ((128, 7), (128,)), ((128, 5, 1), (128, 5)), ((128, 1), (128, 9))])
def test_tensor_tensor_partition_first_broadcast(sa, sb):
    a, b = _rand(sa, F32, seed=14), _rand(sb, F32, seed=15)
    out = run(lambda x, y: _store(nisa.tensor_tensor(nl.load(x), nl.load(y), op=nl.add)), a, b)
    if a.size // 128 == b.size // 128:
        ref = a + b.reshape(a.shape) if a.size >= b.size else a.reshape(b.shape) + b
    else:
        ax = a.reshape(128, -1)
        bx = b.reshape(128, -1)
        ref = (ax + bx).reshape(a.shape if a.size >= b.size else b.shape)
    np.testing.assert_array_equal(out.reshape(ref.shape), ref)


@pytest.mark.parametrize("operand_shape", ["scalar", "p1", "p"])
@pytest.mark.parametrize("reverse0,reverse1", [(False, False), (True, False), (False, True), (True, True)])
@pytest.mark.parametrize("dt", FLOATS)
def test_nisa_tensor_scalar(operand_shape, reverse0, reverse1, dt):
    P, F = 96, 20
    data = _rand((P, 2, F // 2), dt, 2.0, 4.0, seed=16)
    v0 = _rand((P, 1), F32, 0.5, 1.5, seed=17)
    v1 = _rand((P, 1), F32, 1.0, 3.0, seed=18)

    def k(x, o0, o1):
        t = nl.load(x)
        if operand_shape == "scalar":
            a0, a1 = 1.25, 2.5
        else:
            a0, a1 = nl.load(o0), nl.load(o1)
            if operand_shape == "p":
                a0, a1 = a0[:, 0], a1[:, 0]
        return _store(nisa.tensor_scalar(t, nl.subtract, a0, reverse0, nl.divide, a1, reverse1))

    out = run(k, data, v0, v1)
    assert out.dtype == dt  # tensor_scalar keeps the data dtype (no promotion)
    if operand_shape == "scalar":
        s0, s1 = np.float32(1.25), np.float32(2.5)
    else:
        s0, s1 = v0.reshape(P, 1, 1), v1.reshape(P, 1, 1)
    x = _f32(data)
    y = s0 - x if reverse0 else x - s0
    z = s1 / y if reverse1 else y / s1
    np.testing.assert_array_equal(out, z.astype(np.float32).astype(dt))


def test_tensor_scalar_fp16_computes_in_fp32_and_rounds_once():
    """(x * 3.3) + 0.7 on fp16 data: one rounding of the fp32 result, not two fp16 roundings."""
    x = np.linspace(0.1, 60, 128 * 64, dtype=np.float32).astype(F16).reshape(128, 64)
    out = run(lambda a: _store(nisa.tensor_scalar(nl.load(a), nl.multiply, 3.3, op1=nl.add, operand1=0.7)), x)
    once = (_f32(x) * np.float32(3.3) + np.float32(0.7)).astype(F16)
    twice = ((x * F16(3.3)).astype(F16) + F16(0.7)).astype(F16)
    np.testing.assert_array_equal(out, once)
    assert np.any(once != twice)  # the check can tell the two schemes apart


@pytest.mark.parametrize("src_dt,dst_dt", [(F32, F16), (F32, BF16), (F16, F32), (BF16, F16), (F32, np.int32)])
def test_tensor_copy_and_nl_copy_cast(src_dt, dst_dt):
    a = _rand((32, 16), src_dt, -100, 100, seed=19)
    out1 = run(lambda x: _store(nisa.tensor_copy(nl.load(x), dtype=dst_dt)), a)
    out2 = run(lambda x: _store(nl.copy(nl.load(x), dtype=dst_dt)), a)
    if np.dtype(dst_dt).kind == "i":
        ref = np.trunc(_f32(a)).astype(dst_dt)  # float -> int truncates (execute.cast cites why)
    else:
        ref = _f32(a).astype(dst_dt)
    np.testing.assert_array_equal(out1, ref)
    np.testing.assert_array_equal(out2, ref)
    assert out1.dtype == dst_dt


@pytest.mark.parametrize("engine", [nisa.vector_engine, nisa.scalar_engine, nisa.gpsimd_engine])
def test_tensor_copy_engines(engine):
    a = _rand((16, 8), F32, seed=20)
    run_ = run_kernel(lambda x: _store(nisa.tensor_copy(nl.load(x), engine=engine)), (a,))
    np.testing.assert_array_equal(run_.outputs, a)
    assert [i.engine.value for i in run_.trace if i.op == "tensor_copy"] == [int(engine)]


@pytest.mark.parametrize("dt", [F32, BF16])
def test_nisa_activation_bias_scale(dt):
    """The docs' example: activation(np.square, b, bias=c (P,1), scale=2.0) == np.square(b * 2 + c)."""
    b = _rand((128, 64), F32, -1, 1, seed=21)
    c = _rand((128, 1), F32, -1, 1, seed=22)
    out = run(lambda x, y: _store(nisa.activation(op=np.square, data=nl.load(x), bias=nl.load(y), scale=2.0,
                                                  dtype=dt)), b, c)
    assert out.dtype == dt
    np.testing.assert_array_equal(out, np.square(b * np.float32(2) + c).astype(dt))


def test_activation_vector_scale_and_ops():
    b = _rand((64, 16), F32, -1, 1, seed=23)
    s = _rand((64, 1), F32, 0.5, 2, seed=24)
    for op, ref in ((nl.exp, np.exp), (np.tanh, np.tanh), (nl.copy, lambda x: x),
                    (nl.relu, lambda x: np.maximum(x, 0))):
        out = run(lambda x, y, op=op: _store(nisa.activation(op, nl.load(x), scale=nl.load(y))), b, s)
        np.testing.assert_allclose(out, ref(b * s), rtol=1e-6, atol=1e-7)


def test_activation_reduce_res():
    b = _rand((32, 16), F32, -1, 1, seed=25)

    def k(x):
        acc = nl.ndarray((32, 1), dtype=nl.float32, buffer=nl.sbuf)
        r = nisa.activation(nl.exp, nl.load(x), reduce_op=nl.add, reduce_res=acc,
                            reduce_cmd=nisa.reduce_cmd.reset_reduce)
        return _store(r), _store(acc)

    r, acc = run(k, b)
    np.testing.assert_allclose(acc[:, 0], np.exp(b).sum(axis=1), rtol=1e-6)
    np.testing.assert_allclose(r, np.exp(b), rtol=1e-6)


# ---------------------------------------------------------------------------------------------------------
# TensorE: nc_matmul, nc_transpose, nl.matmul, nl.transpose


@SETTINGS
@given(k=st.integers(1, 128), m=st.integers(1, 128), n=st.integers(1, 512), dt=st.sampled_from(FLOATS))
def test_nc_matmul(k, m, n, dt):
    s, mv = _rand((k, m), dt, -1, 1, seed=26), _rand((k, n), dt, -1, 1, seed=27)
    out = run(lambda a, b: _store(nisa.nc_matmul(nl.load(a), nl.load(b))), s, mv)
    assert out.dtype == F32 and out.shape == (m, n)  # matmul output is always fp32
    ref = s.astype(np.float64).T @ mv.astype(np.float64)
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5)


def test_nc_matmul_multi_dim_moving():
    s, mv = _rand((128, 64), F32, seed=28), _rand((128, 16, 32), F32, seed=29)
    out = run(lambda a, b: _store(nisa.nc_matmul(nl.load(a), nl.load(b))), s, mv)
    assert out.shape == (64, 16, 32)
    np.testing.assert_allclose(out, np.einsum("km,khw->mhw", s, mv), rtol=1e-5)


@pytest.mark.parametrize("p,f", [(128, 128), (1, 128), (128, 1), (37, 100)])
@pytest.mark.parametrize("dt", FLOATS)
def test_nc_transpose_tensor_engine(p, f, dt):
    a = _rand((p, f), dt, seed=30)
    run_ = run_kernel(lambda x: _store(nisa.tensor_copy(nisa.nc_transpose(nl.load(x), engine=nisa.tensor_engine))),
                      (a,))
    np.testing.assert_array_equal(run_.outputs, a.T)
    assert run_.outputs.dtype == dt
    (tr,) = [i for i in run_.trace if i.op == "nc_transpose"]
    assert tr.engine.name == "TENSOR" and tr.dsts[0].region.buf.name == "PSUM"


@pytest.mark.parametrize("from_psum", [False, True])
def test_nc_transpose_vector_engine(from_psum):
    a = _rand((32, 32), F32, seed=31)
    ident = np.eye(32, dtype=F32)

    def k(x, e):
        t = nl.load(x)
        if from_psum:  # park the tile in PSUM first (identity matmul), VectorE may read PSUM
            t = nisa.nc_matmul(nl.load(e), t)
        return _store(nisa.nc_transpose(t, engine=nisa.vector_engine))

    run_ = run_kernel(k, (a, ident))
    np.testing.assert_array_equal(run_.outputs, a.T)
    (tr,) = [i for i in run_.trace if i.op == "nc_transpose"]
    assert tr.engine.name == "VECTOR"


@pytest.mark.parametrize("transpose_x", [False, True])
def test_nl_matmul(transpose_x):
    x = _rand((128, 96) if transpose_x else (96, 128), F32, seed=32)
    y = _rand((128, 200), F32, seed=33)
    out = run(lambda a, b: _store(nl.matmul(nl.load(a), nl.load(b), transpose_x=transpose_x)), x, y)
    ref = (x.T if transpose_x else x).astype(np.float64) @ y
    np.testing.assert_allclose(out, ref, rtol=1e-5)


def test_nl_transpose_and_load_transpose2d():
    a = _rand((100, 64), BF16, seed=34)

    def k(x):
        t1 = nl.copy(nl.transpose(nl.load(x)))
        t2 = nl.load_transpose2d(x)
        return _store(t1), _store(t2)

    t1, t2 = run(k, a)
    np.testing.assert_array_equal(t1, a.T)
    np.testing.assert_array_equal(t2, a.T)
    assert t1.dtype == BF16 and t2.dtype == BF16


# ---------------------------------------------------------------------------------------------------------
# data movement and creation


@pytest.mark.parametrize("src_dt,dst_dt", [(F32, F16), (F16, F32), (F32, BF16), (F32, F32)])
def test_dma_copy_casts_and_rmw(src_dt, dst_dt):
    a = _rand((64, 40), src_dt, -10, 10, seed=35)
    b = _rand((64, 40), dst_dt, -10, 10, seed=36)

    def k(x, y):
        out = nl.ndarray(x.shape, dtype=y.dtype, buffer=nl.hbm)
        t = nl.ndarray(x.shape, dtype=y.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x)  # cast on the way in
        acc = nl.ndarray(x.shape, dtype=y.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=acc, src=y)
        nisa.dma_copy(dst=acc, src=t, dst_rmw_op=np.add)  # accumulate instead of overwrite
        nisa.dma_copy(dst=out, src=acc)
        return out

    out = run(k, a, b)
    cast = _f32(a).astype(dst_dt)
    np.testing.assert_array_equal(out, (_f32(cast) + _f32(b)).astype(dst_dt))


def test_dma_copy_hbm_to_hbm_and_unit_dims():
    a = _rand((256,), F32, seed=37)

    def k(x):
        scratch = nl.ndarray((256,), dtype=x.dtype, buffer=nl.hbm)
        nisa.dma_copy(src=x, dst=scratch)
        t = nl.ndarray((128, 2, 1), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(src=scratch.reshape((128, 2)), dst=t)
        out = nl.ndarray((256, 1), dtype=x.dtype, buffer=nl.hbm)
        nisa.dma_copy(src=t, dst=out)
        return out

    np.testing.assert_array_equal(run(k, a), a.reshape(256, 1))


def test_creation_ops():
    def k(x):
        t = nl.load(x)
        return (_store(nl.zeros((4, 3), nl.float16)), _store(nl.ones((4, 3), dtype=nl.int32)),
                _store(nl.full((4, 3), 2.5, nl.float32)), _store(nl.zeros_like(t)), _store(nl.ones_like(t)),
                _store(nl.full((2, 2), 7, dtype=nl.bfloat16)))

    outs = run(k, np.ones((5, 6), F16))
    refs = (np.zeros((4, 3), F16), np.ones((4, 3), np.int32), np.full((4, 3), 2.5, F32), np.zeros((5, 6), F16),
            np.ones((5, 6), F16), np.full((2, 2), 7, BF16))
    for o, r in zip(outs, refs):
        assert o.dtype == r.dtype
        np.testing.assert_array_equal(o, r)


def test_nisa_memset_and_iota():
    def k():
        m = nisa.memset(shape=(nl.par_dim(64), 10), value=3.5, dtype=nl.float32)
        i1 = nisa.iota(nl.arange(512)[None, :], dtype=nl.int32)
        i2 = nisa.iota(5 + 2 * nl.arange(128)[:, None], dtype=nl.float32)
        i3 = nisa.iota(nl.arange(128)[:, None] * 4 + nl.arange(4)[None, :], dtype=nl.int32)
        return _store(m), _store(i1), _store(i2), _store(i3)

    m, i1, i2, i3 = run(k)
    np.testing.assert_array_equal(m, np.full((64, 10), 3.5, F32))
    np.testing.assert_array_equal(i1, np.arange(512).reshape(1, 512))
    np.testing.assert_array_equal(i2, (5 + 2 * np.arange(128, dtype=F32)).reshape(128, 1))
    np.testing.assert_array_equal(i3, np.arange(512).reshape(128, 4))


@pytest.mark.parametrize("form", ["function", "method"])
def test_broadcast_to(form):
    b = _rand((128, 1), F32, seed=38)

    def k(x):
        t = nl.load(x)
        r = nl.broadcast_to(t, shape=(128, 50)) if form == "function" else t.broadcast_to((128, 50))
        return _store(r)

    np.testing.assert_array_equal(run(k, b), np.broadcast_to(b, (128, 50)))


# ---------------------------------------------------------------------------------------------------------
# composite nl ops


def test_nl_where():
    c = (np.arange(64 * 8).reshape(64, 8) % 3 == 0).astype(np.uint8)
    x, y = _rand((64, 8), F32, seed=40), _rand((64, 8), F32, seed=41)
    out = run(lambda cc, xx, yy: _store(nl.where(nl.load(cc), nl.load(xx), nl.load(yy))), c, x, y)
    np.testing.assert_array_equal(out, np.where(c.astype(bool), x, y))


@pytest.mark.parametrize("dt", [F32, F16])
def test_nl_softmax(dt):
    x = _rand((64, 100), dt, -4, 4, seed=42)
    out = run(lambda a: _store(nl.softmax(nl.load(a), axis=1)), x)
    xf = x.astype(np.float64)
    e = np.exp(xf - xf.max(axis=1, keepdims=True))
    ref = e / e.sum(axis=1, keepdims=True)
    assert out.dtype == dt
    np.testing.assert_allclose(_f32(out), ref, rtol=2e-6 if dt == F32 else 2 ** -10, atol=1e-7)


def test_nl_rms_norm():
    x = _rand((32, 48), F32, -2, 2, seed=43)
    w = _rand((1, 48), F32, 0.5, 1.5, seed=44)
    out = run(lambda a, ww: _store(nl.rms_norm(nl.load(a), nl.load(ww), axis=1, n=48)), x, w)
    xf = x.astype(np.float64)
    ref = xf * w / np.sqrt((xf ** 2).mean(axis=1, keepdims=True) + 1e-6)
    np.testing.assert_allclose(out, ref, rtol=1e-5)


def test_nl_dropout_statistics():
    x = _rand((128, 512), F32, 1, 2, seed=45)
    out = run(lambda a: _store(nl.dropout(nl.load(a), 0.25)), x)
    dropped = out == 0
    assert 0.22 < dropped.mean() < 0.28
    # kept elements are not rescaled (nki.language.dropout docs; AWS's flash attention rescales by 1/(1-p) itself)
    np.testing.assert_array_equal(out[~dropped], x[~dropped])


def test_empty_like_and_expand_dims():
    x = _rand((16, 8), F16, seed=46)

    def k(a):
        t = nl.load(a)
        e = nl.empty_like(t)
        e[...] = t
        return _store(nl.expand_dims(e, 1)), _store(t.expand_dims(2))

    o1, o2 = run(k, x)
    assert o1.shape == (16, 1, 8) and o2.shape == (16, 8, 1) and o1.dtype == F16
    np.testing.assert_array_equal(o1[:, 0], x)
    np.testing.assert_array_equal(o2[..., 0], x)
