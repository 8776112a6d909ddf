"""The operator tables, defined once in the core and behaving alike through both front ends.

``core/execute.py`` holds what every ALU operator and activation function computes; each front end's element-wise
``nl`` functions are derived from it and from the front end's documented-symbol list
(``frontends/_operators.language_operators``), so a new operator is one entry in the core.  The same kernel
spelled in the legacy and the current API must give the same values, the same instruction stream and the same
errors for every operator both APIs document, including the operator table's unary operators in
``tensor_scalar`` (``op0=nl.rsqrt, operand0=0.0``, nki.api.shared "NKI Engine Selection").
"""

from __future__ import annotations

import neuronxcc.nki.isa as lisa
import neuronxcc.nki.language as lnl
import nki.isa as nisa
import nki.language as nl
import numpy as np
import pytest
from nkisim_util import raises_rule

from nkisim import frontends
from nkisim.core import execute
from nkisim.core.runtime import run_kernel
from nkisim.frontends import _operators, _unsupported
from nkisim.perf import estimate
from nkisim.perf.costs import costs_for

FRONT_ENDS = {"legacy": (frontends.LEGACY, lnl), "nki": (frontends.NKI, nl)}


def _documented(fe) -> set[str]:
    return {s[3:] for s in _unsupported.documented(fe) if s.startswith("nl.")}


@pytest.mark.parametrize("key", FRONT_ENDS)
def test_every_core_operator_a_front_end_documents_is_its_nl_function(key):
    """One table: each binary ALU operator and activation of the core that the API documents is ``nl.<name>``,
    carrying the core's name; an operator the API does not document is not defined (abs_max is NKI 0.4+)."""
    fe, mod = FRONT_ENDS[key]
    documented = _documented(fe)
    binary, unary = _operators.language_operators(_unsupported.documented(fe))
    assert binary and unary
    for name in execute.ALU:
        if name in execute.UNARY_ALU:
            continue
        if name in documented:
            assert getattr(mod, name).nki_alu == name, name
        else:
            assert name not in binary
    for name in unary:
        assert getattr(mod, name).nki_act == name
    assert ("abs_max" in binary) == (key == "nki")


def test_a_new_core_operator_needs_one_edit(monkeypatch):
    """Adding an operator to the core's table is enough for every front end that documents it."""
    monkeypatch.setitem(execute.ALU, "hypot_test", (np.hypot, False))
    symbols = (*_unsupported.documented(frontends.NKI), "nl.hypot_test")
    binary, _ = _operators.language_operators(symbols)
    assert binary[-1] == "hypot_test"
    assert "hypot_test" not in _operators.language_operators(_unsupported.documented(frontends.LEGACY))[0]


A = (np.arange(128 * 16, dtype=np.float32).reshape(128, 16) - 1000.0) / 97.0
B = (np.arange(128 * 16, dtype=np.float32).reshape(128, 16)[::-1] + 3.0) / 89.0
AI = np.arange(128 * 16, dtype=np.int32).reshape(128, 16) % 61 + 1
BI = np.arange(128 * 16, dtype=np.int32).reshape(128, 16)[::-1] % 5


def _binary_kernel(key, name, dt):
    """The same kernel in each API: load a and b, c = nl.<name>(a, b) (the language function) and
    d = tensor_tensor(a, b, op=nl.<name>) (the instruction), store both."""
    _, mod = FRONT_ENDS[key]
    op = getattr(mod, name)

    if key == "legacy":
        def kernel(a, b):
            ta, tb = lnl.load(a), lnl.load(b)
            c = op(ta, tb, dtype=dt)
            d = lisa.tensor_tensor(ta, tb, op=op, dtype=dt)
            oc = lnl.ndarray(a.shape, dtype=dt, buffer=lnl.shared_hbm)
            od = lnl.ndarray(a.shape, dtype=dt, buffer=lnl.shared_hbm)
            lnl.store(oc, c)
            lnl.store(od, d)
            return oc, od
    else:
        def kernel(a, b):
            ta, tb = nl.load(a), nl.load(b)
            c = op(ta, tb, dtype=dt)
            d = nl.ndarray(a.shape, dtype=dt, buffer=nl.sbuf)
            nisa.tensor_tensor(dst=d, data1=ta, data2=tb, op=op)
            oc = nl.ndarray(a.shape, dtype=dt, buffer=nl.shared_hbm)
            od = nl.ndarray(a.shape, dtype=dt, buffer=nl.shared_hbm)
            nl.store(oc, c)
            nl.store(od, d)
            return oc, od
    return kernel


def _both(make, *args):
    outs, streams = [], []
    for key, (fe, _) in FRONT_ENDS.items():
        r = run_kernel(make(key), args, {}, frontend=fe)
        outs.append(r.outputs)
        streams.append([(i.op, i.engine, {k: v for k, v in i.attrs.items() if k.startswith("alu")})
                        for i in r.trace.instrs])
    assert streams[0] == streams[1]
    return outs


SHARED_BINARY = sorted(set(_operators.language_operators(_unsupported.documented(frontends.LEGACY))[0])
                       & set(_operators.language_operators(_unsupported.documented(frontends.NKI))[0]))


@pytest.mark.parametrize("name", SHARED_BINARY)
def test_binary_operator_alike_in_both_apis(name):
    bitvec = execute.ALU[name][1]
    a, b, dt = (AI, BI, np.int32) if bitvec else (A, B, np.float32)
    (lc, ld), (nc, nd) = _both(lambda key: _binary_kernel(key, name, dt), a, b)
    np.testing.assert_array_equal(lc, nc)
    np.testing.assert_array_equal(ld, nd)
    np.testing.assert_array_equal(lc, ld)
    if name in ("add", "multiply", "maximum", "subtract"):  # an independent reference for the common ones
        ref = {"add": np.add, "multiply": np.multiply, "maximum": np.maximum, "subtract": np.subtract}[name](a, b)
        np.testing.assert_array_equal(lc, ref)


UNARY_REFS = {
    "abs": (lnl.abs, nl.abs, lambda x: np.abs(x), A),
    "reciprocal": (lnl.reciprocal, nl.reciprocal, lambda x: np.float32(1) / x, B),
    "rsqrt": (lnl.rsqrt, nl.rsqrt, lambda x: np.float32(1) / np.sqrt(x), B),
}


def _unary_scalar_kernel(key, lop, nop, operand=0.0, engine=None, op1=None, operand1=None):
    if key == "legacy":
        eng = lisa.engine.unknown if engine is None else getattr(lisa.engine, engine)

        def kernel(a):
            t = lnl.load(a)
            r = lisa.tensor_scalar(t, lop, operand, op1=op1[0] if op1 else None, operand1=operand1, engine=eng)
            o = lnl.ndarray(a.shape, dtype=np.float32, buffer=lnl.shared_hbm)
            lnl.store(o, r)
            return o
    else:
        eng = nisa.engine.unknown if engine is None else getattr(nisa.engine, engine)

        def kernel(a):
            t = nl.load(a)
            r = nl.ndarray(a.shape, dtype=np.float32, buffer=nl.sbuf)
            nisa.tensor_scalar(dst=r, data=t, op0=nop, operand0=operand, op1=op1[1] if op1 else None,
                               operand1=operand1, engine=eng)
            o = nl.ndarray(a.shape, dtype=np.float32, buffer=nl.shared_hbm)
            nl.store(o, r)
            return o
    return kernel


@pytest.mark.parametrize("name", sorted(UNARY_REFS))
@pytest.mark.parametrize("operand", [0.0, 0, None])
def test_unary_operator_in_tensor_scalar_alike_in_both_apis(name, operand):
    """The operator table's "Arithmetic Unary" rows as tensor_scalar operators, operand "None or 0"
    (nki.isa.tensor_scalar, NKI 0.6); the table of SDK 2.26 lists them too, so both APIs take them."""
    lop, nop, ref, x = UNARY_REFS[name]
    lo, no = _both(lambda key: _unary_scalar_kernel(key, lop, nop, operand), x)
    np.testing.assert_array_equal(lo, no)
    np.testing.assert_allclose(lo, ref(x), rtol=1e-6)


def test_unary_operator_then_a_binary_one():
    """``(|a| <op1> operand1)``: a unary op0 composes with an arithmetic op1 in one instruction."""
    lo, no = _both(lambda key: _unary_scalar_kernel(key, lnl.abs, nl.abs, 0.0, op1=(lnl.add, nl.add),
                                                     operand1=2.5), A)
    np.testing.assert_array_equal(lo, no)
    np.testing.assert_allclose(lo, np.abs(A) + np.float32(2.5), rtol=1e-6)


@pytest.mark.parametrize("key", FRONT_ENDS)
def test_rsqrt_runs_on_gpsimd_at_four_times_scalare_cost(key):
    """"Reverse square root can run on GpSIMD Engine with nki.isa.tensor_scalar(op0=nl.rsqrt, operand0=0.0) or on
    Scalar Engine with nki.isa.activation(nl.rsqrt) ... throughput ... on GpSIMD Engine is 4x lower" (nki.api.shared,
    "NKI Engine Selection"): the unspecified engine is GpSimd, VectorE is refused, and the cost is 4 N cycles."""
    fe, _ = FRONT_ENDS[key]
    x = np.abs(B).repeat(64, axis=1)  # N = 1024 elements per partition
    run = run_kernel(_unary_scalar_kernel(key, lnl.rsqrt, nl.rsqrt), (x,), {}, frontend=fe)
    ins = [i for i in run.trace.instrs if i.op == "tensor_scalar"]
    assert len(ins) == 1 and ins[0].engine.name == "GPSIMD"
    rep = estimate(run.trace)
    tc = costs_for(run.trace.target)
    busy_us = rep.engine_busy_us["GpSimdE"]
    assert busy_us == pytest.approx((4 * 1024 + tc.gpsimd_start_cycles) / tc.gpsimd_ghz / 1e3, rel=1e-6)
    with raises_rule("nkisim_engine_op_unsupported", "rsqrt", "GpSimdE or ScalarE"):
        run_kernel(_unary_scalar_kernel(key, lnl.rsqrt, nl.rsqrt, engine="vector"), (x,), {}, frontend=fe)


@pytest.mark.parametrize("key", FRONT_ENDS)
def test_unary_operator_errors_alike(key):
    fe, _ = FRONT_ENDS[key]
    with raises_rule("nkisim_bad_argument", "operand0 must be None or 0", "'abs'"):
        run_kernel(_unary_scalar_kernel(key, lnl.abs, nl.abs, 1.0), (A,), {}, frontend=fe)
    with raises_rule("nkisim_engine_op_unsupported", "'square'", "trn3"):  # NKI 0.4: trn3-only opcodes
        run_kernel(_unary_scalar_kernel(key, lnl.square, nl.square), (A,), {}, frontend=fe)
    with raises_rule("nkisim_bad_argument", "not an NKI ALU operator"):  # an activation is not an ALU operator
        run_kernel(_unary_scalar_kernel(key, lnl.exp, nl.exp), (A,), {}, frontend=fe)

    mod = FRONT_ENDS[key][1]
    if key == "legacy":
        def kernel(a):
            t = lnl.load(a)
            lisa.tensor_tensor(t, t, op=lnl.abs)
    else:
        def kernel(a):
            t = nl.load(a)
            d = nl.ndarray(a.shape, dtype=np.float32, buffer=nl.sbuf)
            nisa.tensor_tensor(dst=d, data1=t, data2=t, op=nl.abs)
    with raises_rule("nkisim_bad_argument", f"nl.{mod.abs.__name__} is a unary ALU operator"):
        run_kernel(kernel, (A,), {}, frontend=fe)


@pytest.mark.parametrize("dt", [np.int32, np.uint8, np.uint16])
def test_invert_as_tensor_scalar_operator_alike_and_in_range(dt):
    """The table's Bitwise Not (``nl.invert``) as op0: NOT of the operand's own width."""
    x = (AI % 200).astype(dt)
    lo, no = _both(lambda key: _invert_kernel(key, dt), x)
    np.testing.assert_array_equal(lo, no)
    np.testing.assert_array_equal(lo, np.invert(x))


def _invert_kernel(key, dt):
    if key == "legacy":
        def kernel(a):
            r = lisa.tensor_scalar(lnl.load(a), lnl.invert, 0)
            o = lnl.ndarray(a.shape, dtype=dt, buffer=lnl.shared_hbm)
            lnl.store(o, r)
            return o
    else:
        def kernel(a):
            r = nl.ndarray(a.shape, dtype=dt, buffer=nl.sbuf)
            nisa.tensor_scalar(dst=r, data=nl.load(a), op0=nl.invert, operand0=None)
            o = nl.ndarray(a.shape, dtype=dt, buffer=nl.shared_hbm)
            nl.store(o, r)
            return o
    return kernel


@pytest.mark.parametrize("key", FRONT_ENDS)
def test_abs_in_tensor_scalar_reduce(key):
    """nki-library's norm kernels: ``tensor_scalar_reduce(op0=nl.abs, operand0=0.0, reduce_op=nl.max)``, the
    max-abs of each partition (tensor_scalar_reduce docs: op0 "any arithmetic operator in nki-aluop")."""
    fe, _ = FRONT_ENDS[key]
    if key == "legacy":
        def kernel(a):
            t = lnl.load(a)
            r = lnl.ndarray((128, 1), dtype=np.float32, buffer=lnl.sbuf)
            lisa.tensor_scalar_reduce(data=t, op0=lnl.abs, operand0=0.0, reduce_op=lnl.max, reduce_res=r)
            o = lnl.ndarray((128, 1), dtype=np.float32, buffer=lnl.shared_hbm)
            lnl.store(o, r)
            return o
    else:
        def kernel(a):
            t = nl.load(a)
            d = nl.ndarray(a.shape, dtype=np.float32, buffer=nl.sbuf)
            r = nl.ndarray((128, 1), dtype=np.float32, buffer=nl.sbuf)
            nisa.tensor_scalar_reduce(dst=d, data=t, op0=nl.abs, operand0=0.0, reduce_op=nl.max, reduce_res=r)
            o = nl.ndarray((128, 1), dtype=np.float32, buffer=nl.shared_hbm)
            nl.store(o, r)
            return o
    out = run_kernel(kernel, (A,), {}, frontend=fe).outputs
    np.testing.assert_array_equal(out, np.abs(A).max(axis=1, keepdims=True))
