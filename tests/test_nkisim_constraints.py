"""Every rule of the constraint catalogue (nkisim/core/rules.py) raises its error with the expected text, the
valid edge cases just inside each limit pass, and every catalogue code is exercised by some test."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import neuronxcc.nki.compiler as ncc
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl
import numpy as np
import pytest
from nkisim_util import raises_rule

from nkisim.core.rules import ERRORS_URL, RULES, NKICapacityError, NKIError, fail
from nkisim.core.runtime import run_kernel

REPO = Path(__file__).resolve().parents[1]
TESTS = Path(__file__).resolve().parent


def run(kernel, *args, **kwargs) -> None:
    """Run a kernel body for its errors (the lambdas below may return on-chip tiles; those are dropped)."""
    def body(*a, **k):
        kernel(*a, **k)

    run_kernel(body, args, kwargs)


def _z(shape, dt=np.float32):
    return np.zeros(shape, dtype=dt)


def _store(r):
    out = nl.ndarray(r.shape, dtype=r.dtype, buffer=nl.hbm)
    nl.store(out, r)
    return out


# ---------------------------------------------------------------------------------------------------------
# the error type and the official wording


def test_official_errors_are_value_errors_with_docs_link():
    with pytest.raises(ValueError) as info:
        fail("err_num_partition_exceed_arch_limit", n=256, limit=128)
    assert str(info.value) == (
        "number of partitions 256 exceed architecture limitation of 128. Info on how to fix: "
        f"{ERRORS_URL}#err-num-partition-exceed-arch-limit")
    # templates that already end a sentence do not get a second period
    with pytest.raises(NKIError) as info:
        fail("err_hbm_tensor_with_init_value_not_supported")
    assert str(info.value).startswith("Creating HBM tensor with init value is not supported. Info on how to fix")


def test_capacity_errors_are_memory_errors():
    with pytest.raises(MemoryError):
        fail("nkisim_sbuf_capacity", target="trn2", peak=300000, capacity=212992, tiles="")
    assert issubclass(NKICapacityError, NKIError)


# ---------------------------------------------------------------------------------------------------------
# partitions


def test_partition_limit_at_allocation_load_and_dma():
    run(lambda: nl.ndarray((128, 4), dtype=nl.float32, buffer=nl.sbuf))  # exactly 128: fine
    run(lambda: nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.psum))
    with raises_rule("err_num_partition_exceed_arch_limit", "number of partitions 129 exceed", "limitation of 128"):
        run(lambda: nl.ndarray((129, 4), dtype=nl.float32, buffer=nl.psum))
    with raises_rule("err_num_partition_exceed_arch_limit", "number of partitions 200"):
        run(lambda a: nl.load(a), _z((200, 4)))
    run(lambda: nl.ndarray((4096, 4096), dtype=nl.float32, buffer=nl.hbm))  # HBM has no partition limit
    with raises_rule("err_num_partition_exceed_arch_limit", "number of partitions 256"):
        run(lambda: nisa.memset((256, 4), 0.0, nl.float32))


def test_partition_mismatch():
    with raises_rule("err_num_partition_mismatch",
                     "mismatch in parameters (data1[128, 512], data2[1, 512]) of 'tensor_tensor'"):
        run(lambda a, b: nisa.tensor_tensor(nl.load(a), nl.load(b), op=nl.add), _z((128, 512)), _z((1, 512)))
    with raises_rule("err_num_partition_mismatch", "stationary[128, 64], moving[64, 64]", "'nc_matmul'"):
        run(lambda a, b: nisa.nc_matmul(nl.load(a), nl.load(b)), _z((128, 64)), _z((64, 64)))


def test_transpose_dimension_limits():
    with raises_rule("err_size_of_dimension_exceed_arch_limit",
                     "size of dimension 1 in 'x[128, 512]' of 'transpose' exceed architecture limitation of 128."):
        run(lambda a: nl.transpose(nl.load(a)), _z((128, 512)))
    with raises_rule("err_exceed_max_supported_dimension",
                     "parameter 'x[64, 32, 2]' of 'transpose' exceed max supported number of dimensions of 2."):
        run(lambda a: nl.transpose(nl.load(a)), _z((64, 32, 2)))
    with raises_rule("err_exceed_max_supported_dimension", "'load_transpose2d'"):
        run(lambda a: nl.load_transpose2d(a), _z((4, 4, 4)))


# ---------------------------------------------------------------------------------------------------------
# memories


def test_unsupported_memory():
    with raises_rule("err_unsupported_memory",
                     "Expected operand 'src' of 'load' to be in address space 'hbm', but got a tile in 'sbuf' "
                     "instead."):
        run(lambda a: nl.load(nl.load(a)), _z((4, 4)))
    with raises_rule("err_unsupported_memory", "of 'exp' to be in address space 'psum|sbuf', but got a tile in "
                     "'hbm' instead."):
        run(lambda a: nl.exp(a), _z((4, 4)))

    def dma_from_psum(a, b):
        out = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.hbm)
        nisa.dma_copy(src=nisa.nc_matmul(nl.load(a), nl.load(b)), dst=out)

    with raises_rule("err_unsupported_memory", "operand 'src' of 'dma_copy'", "'hbm|sbuf'", "'psum'"):
        run(dma_from_psum, _z((128, 128)), _z((128, 64)))

    def matmul_from_hbm(a, b):
        nisa.nc_matmul(a, nl.load(b))

    with raises_rule("err_unsupported_memory", "operand 'stationary' of 'nc_matmul'", "'sbuf'", "'hbm'"):
        run(matmul_from_hbm, _z((128, 128)), _z((128, 64)))

    def matmul_from_psum_allocated(a, b):
        # direct allocation: no compiler-owned SBUF to stage a PSUM operand through (automatic allocation stages
        # it, tests/test_nkisim_matmul_psum_operand.py)
        sa = nl.ndarray((128, 128), dtype=nl.float32, buffer=ncc.sbuf.mod_alloc(base_addr=0))
        nisa.dma_copy(src=a, dst=sa)
        ps = nl.ndarray((128, 128), dtype=nl.float32, buffer=ncc.psum.mod_alloc(base_bank=0, num_bank_tiles=(1,)))
        ps[...] = nisa.nc_matmul(sa, sa)
        nisa.nc_matmul(ps, sa)

    with raises_rule("err_unsupported_memory", "operand 'stationary' of 'nc_matmul'", "'sbuf'", "'psum'"):
        run(matmul_from_psum_allocated, _z((128, 128)), _z((128, 64)))

    def store_to_sbuf(a):
        t = nl.load(a)
        nl.store(nl.ndarray((4, 4), dtype=nl.float32, buffer=nl.sbuf), t)

    with raises_rule("err_unsupported_memory", "operand 'dst' of 'store'"):
        run(store_to_sbuf, _z((4, 4)))

    def matmul_into_hbm(a, b):
        res = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.hbm)
        res[...] = nisa.nc_matmul(nl.load(a), nl.load(b))  # would need a DMA out of PSUM

    with raises_rule("err_unsupported_memory", "operand 'dst' of 'nc_matmul'", "'psum|sbuf'", "'hbm'"):
        run(matmul_into_hbm, _z((128, 128)), _z((128, 64)))


def test_gpsimd_cannot_touch_psum():
    def k(a, b):
        ps = nisa.nc_matmul(nl.load(a), nl.load(b))
        nisa.tensor_copy(ps, engine=nisa.gpsimd_engine)

    with raises_rule("nkisim_gpsimd_psum", "tensor_copy: GpSimd Engine cannot access PSUM"):
        run(k, _z((128, 128)), _z((128, 64)))


def test_two_inputs_in_psum():
    def k(a, b):
        p1 = nisa.nc_matmul(nl.load(a), nl.load(b))
        p2 = nisa.nc_matmul(nl.load(a), nl.load(b))
        nisa.tensor_tensor(p1, p2, op=nl.add)

    with raises_rule("nkisim_two_inputs_in_psum", "cannot both be in PSUM"):
        run(k, _z((128, 128)), _z((128, 64)))

    def ok(a, b):  # SBUF + PSUM is legal
        p1 = nisa.nc_matmul(nl.load(a), nl.load(b))
        return _store(nisa.tensor_tensor(p1, nl.load(b), op=nl.add))

    run(ok, _z((128, 128)), _z((128, 64)))


# ---------------------------------------------------------------------------------------------------------
# TensorE limits


def test_matmul_free_size_limits():
    out = run_kernel(lambda a, b: _store(nisa.nc_matmul(nl.load(a), nl.load(b))), (_z((128, 128)),
                     _z((128, 512)))).outputs
    assert out.shape == (128, 512)  # exactly 128 stationary columns and 512 moving columns: fine
    with raises_rule("nkisim_matmul_stationary_fmax", "stationary free size 129 exceeds gemm_stationary_fmax 128"):
        run(lambda a, b: nisa.nc_matmul(nl.load(a), nl.load(b)), _z((128, 129)), _z((128, 64)))
    with raises_rule("nkisim_matmul_moving_fmax", "moving free size 513 exceeds gemm_moving_fmax 512"):
        run(lambda a, b: nisa.nc_matmul(nl.load(a), nl.load(b)), _z((128, 64)), _z((128, 513)))
    with raises_rule("nkisim_matmul_moving_fmax", "moving free size 1024"):
        run(lambda a, b: nl.matmul(nl.load(a), nl.load(b), transpose_x=True), _z((128, 64)), _z((128, 2, 512)))


def test_matmul_dtypes():
    with raises_rule("nkisim_matmul_dtype", "stationary dtype int32 is not supported"):
        run(lambda a, b: nisa.nc_matmul(nl.load(a), nl.load(b)), _z((8, 8), np.int32), _z((8, 8)))
    with raises_rule("nkisim_matmul_dtype", "fp32/tf32 operands must pair with fp32/tf32"):
        run(lambda a, b: nisa.nc_matmul(nl.load(a), nl.load(b)), _z((8, 8)), _z((8, 8), np.float16))
    run(lambda a, b: nisa.nc_matmul(nl.load(a), nl.load(b)), _z((8, 8), np.float16),
        _z((8, 8)).astype(nl.bfloat16))


def test_transpose_engine_limits():
    run(lambda a: nisa.nc_transpose(nl.load(a), engine=nisa.vector_engine), _z((32, 32)))
    with raises_rule("nkisim_transpose_limit", "nc_transpose on Vector: input [33, 32] exceeds the 32x32 limit"):
        run(lambda a: nisa.nc_transpose(nl.load(a), engine=nisa.vector_engine), _z((33, 32)))
    with raises_rule("nkisim_transpose_limit", "on Tensor: input [128, 129] exceeds the 128x128 limit"):
        run(lambda a: nisa.nc_transpose(nl.load(a)), _z((128, 129)))


def test_tensor_engine_transpose_forbidden_with_direct_allocation():
    def k(a):
        t = nl.ndarray((64, 64), dtype=nl.float32, buffer=ncc.sbuf.mod_alloc(base_addr=0))
        nisa.dma_copy(src=a, dst=t)
        nisa.nc_transpose(t, engine=nisa.tensor_engine)

    with raises_rule("err_transpose_on_tensor_engine_not_allowed_in_allocated_kernel", "'nc_transpose'"):
        run(k, _z((64, 64)))

    def k2(a):
        t = nl.ndarray((64, 64), dtype=nl.float32, buffer=ncc.sbuf.mod_alloc(base_addr=0))
        nisa.dma_copy(src=a, dst=t)
        nl.matmul(t, t)  # transpose_x=False inserts a TensorE transpose

    with raises_rule("err_transpose_on_tensor_engine_not_allowed_in_allocated_kernel"):
        run(k2, _z((64, 64)))


# ---------------------------------------------------------------------------------------------------------
# Vector/Scalar engine operand rules


def test_elementwise_shape_mismatch():
    with raises_rule("nkisim_shape_mismatch", "tensor_tensor: operand shapes [[128, 6], [128, 4]]"):
        run(lambda a, b: nisa.tensor_tensor(nl.load(a), nl.load(b), op=nl.add), _z((128, 6)), _z((128, 4)))


def test_assignment_destination_smaller():
    def k(a):
        y = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.sbuf)
        y[...] = nl.exp(nl.load(a))

    with raises_rule("err_store_dst_shape_smaller_than_other_shape",
                     "Illegal assignment destination shape in 'a = b': shape [128, 1] of parameter 'a' is smaller "
                     "than other parameter shapes b[128, 512]."):
        run(k, _z((128, 512)))

    def k2(a):
        y = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.sbuf)
        x = nl.load(a)
        z = nl.exp(x)
        y[...] = x  # an existing tile: a copy instruction, same rule
        return z

    with raises_rule("err_store_dst_shape_smaller_than_other_shape", "shape [128, 1]"):
        run(k2, _z((128, 512)))


def test_free_size_limits():
    # exactly 64K elements per partition from SBUF: fine; one more: too many for one instruction
    run(lambda a: nisa.tensor_copy(nl.load(a)), _z((2, 65536), np.uint8))
    with raises_rule("nkisim_free_size_limit", "65537 elements per partition from sbuf exceeds the engine limit "
                     "of 65536"):
        run(lambda a: nisa.tensor_copy(nl.load(a)), _z((2, 65537), np.uint8))

    def psum_copy(n):
        ps = nl.zeros((128, n), nl.bfloat16, buffer=nl.psum)
        nisa.tensor_copy(ps)

    run(psum_copy, n=4096)
    with raises_rule("nkisim_free_size_limit", "4100 elements per partition from psum", "4096"):
        run(psum_copy, n=4100)


def test_reduce_partition_axis():
    with raises_rule("nkisim_reduce_partition_axis", "cannot reduce along the partition axis", "axis=0"):
        run(lambda a: nisa.tensor_reduce(nl.add, nl.load(a), axis=0), _z((8, 8)))
    with raises_rule("nkisim_reduce_partition_axis", "axis=(0, 1)"):
        run(lambda a: nl.sum(nl.load(a), axis=(0, 1)), _z((8, 8)))
    # an axis the tile does not have is not the partition axis
    with raises_rule("nkisim_bad_argument", "tensor_reduce: axis 2 is out of range for a 2-D tile: the free axes are "
                     "1 to 1"):
        run(lambda a: nisa.tensor_reduce(nl.add, nl.load(a), axis=2), _z((8, 8)))
    with raises_rule("nkisim_bad_argument", "axis -3 is out of range for a 2-D tile"):
        run(lambda a: nl.max(nl.load(a), axis=[1, -3]), _z((8, 8)))
    with raises_rule("nkisim_reduce_partition_axis", "axis=-2"):
        run(lambda a: nisa.tensor_reduce(nl.add, nl.load(a), axis=-2), _z((8, 8)))


def test_scalar_operand_shape():
    with raises_rule("nkisim_scalar_operand_shape", "operand operand0 must be a scalar or a per-partition vector of "
                     "shape (128, 1), got [128, 2]"):
        run(lambda a, b: nisa.tensor_scalar(nl.load(a), nl.add, nl.load(b)), _z((128, 8)), _z((128, 2)))
    with raises_rule("nkisim_scalar_operand_shape", "operand operand1", "got [64, 1]"):
        run(lambda a, b: nisa.tensor_scalar(nl.load(a), nl.add, 1.0, op1=nl.add, operand1=nl.load(b)),
            _z((128, 8)), _z((64, 1)))


def test_reduce_res_shape():
    """reduce_res is a tile of one element per partition (NKI docs), not "a scalar" as the operand rule says."""
    def reduce_into(a, n):
        res = nl.ndarray((128, n), dtype=nl.float32, buffer=nl.sbuf)
        nisa.activation_reduce(nl.exp, nl.load(a), reduce_op=nl.add, reduce_res=res)

    run(reduce_into, _z((128, 8)), n=1)
    with raises_rule("nkisim_reduce_res_shape", "activation: reduce_res must be a SBUF/PSUM tile with the same "
                     "partition axis size as the input tile and one element per partition, shape (128, 1); got "
                     "[128, 2]"):
        run(reduce_into, _z((128, 8)), n=2)


def test_activation_bias_and_scale_types():
    run(lambda a, b: nisa.activation(nl.exp, nl.load(a), bias=nl.load(b), scale=nl.load(b)), _z((128, 8)),
        _z((128, 1)))
    run(lambda a, b: nisa.activation(nl.exp, nl.load(a), bias=nl.load(b)), _z((128, 8)), _z((128, 1), np.float16))
    with raises_rule("err_activation_bias_invalid_type", "Bias parameter of activation or activation_reduce must "
                     "be a vector of type float32, float16, or bfloat16: a (128, 1) tile, got float32[64, 1]"):
        run(lambda a, b: nisa.activation(nl.exp, nl.load(a), bias=nl.load(b)), _z((128, 8)), _z((64, 1)))
    with raises_rule("err_activation_bias_invalid_type", "got int8[128, 1]"):
        run(lambda a, b: nisa.activation(nl.exp, nl.load(a), bias=nl.load(b)), _z((128, 8)), _z((128, 1), np.int8))
    with raises_rule("err_activation_scale_invalid_type", "Scale parameter of activation or activation_reduce must "
                     "be a scalar or vector of type float32, got float16[128, 1]"):
        run(lambda a, b: nisa.activation(nl.exp, nl.load(a), scale=nl.load(b)), _z((128, 8)),
            _z((128, 1), np.float16))
    with raises_rule("err_activation_scale_scalar_or_vector", "Scale parameter of activation must be either a scalar "
                     "value or a 1D vector spanning the partition dimension: a (128, 1) tile, got float32[128, 2]"):
        run(lambda a, b: nisa.activation(nl.exp, nl.load(a), scale=nl.load(b)), _z((128, 8)), _z((128, 2)))
    run(lambda a: nisa.activation(nl.exp, nl.load(a), bias=0.5), _z((128, 8)))  # immediate bias: trn2 only
    with raises_rule("err_activation_bias_invalid_type", "immediates need NeuronCore-v3"):
        run_kernel(lambda a: nisa.activation(nl.exp, nl.load(a), bias=0.5) and None, (_z((128, 8)),),
                   target="trn1")


def test_engine_op_support():
    run(lambda a: nisa.tensor_scalar(nl.load(a), nl.multiply, 2.0, op1=nl.add, operand1=1.0,
                                     engine=nisa.scalar_engine), _z((8, 8)))
    with raises_rule("nkisim_engine_op_unsupported", "on Scalar Engine is not supported on trn2", "subtract"):
        run(lambda a: nisa.tensor_scalar(nl.load(a), nl.subtract, 2.0, engine=nisa.scalar_engine), _z((8, 8)))



def test_scalar_engine_on_trn1_follows_the_legacy_docs(monkeypatch):
    """NeuronCore-v2 ScalarE: tensor_copy copies through fp32 (nki.isa.tensor_copy, 2.21 and 2.26 docs);
    tensor_scalar's multiply/add subset runs in the 2024 toolchain (2.21 nki.isa, no generation condition) but
    not in the 2025 one (SH-226: "Add/Multiply on ScalarE only from NC-v3")."""
    from nkisim.core import config

    big = np.full((8, 8), 2**24 + 1, dtype=np.int32)  # not exact in fp32

    def copy(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.hbm)
        nl.store(out, nisa.tensor_copy(nl.load(a), engine=nisa.scalar_engine))
        return out

    np.testing.assert_array_equal(run_kernel(copy, (big,), target="trn1").outputs, np.full((8, 8), 2**24))
    np.testing.assert_array_equal(run_kernel(copy, (big,), target="trn2").outputs, big)  # bit-exact on v3

    def scaled(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.hbm)
        nl.store(out, nisa.tensor_scalar(nl.load(a), nl.multiply, 2.0, op1=nl.add, operand1=1.0,
                                         engine=nisa.scalar_engine))
        return out

    x = np.arange(64, dtype=np.float32).reshape(8, 8)
    np.testing.assert_array_equal(run_kernel(scaled, (x,), target="trn1").outputs, 2 * x + 1)
    monkeypatch.setenv(config.ERA_ENV, "2025")
    with raises_rule("nkisim_engine_op_unsupported", "on Scalar Engine is not supported on trn1", "NeuronCore-v3"):
        run_kernel(scaled, (x,), target="trn1")


def test_dma_element_mismatch():
    def k(a):
        t = nl.ndarray((128, 8), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(src=a, dst=t)

    with raises_rule("nkisim_dma_element_mismatch", "source [128, 4] and destination [128, 8]"):
        run(k, _z((128, 4)))


RNG_T = np.random.default_rng(13)


def test_dma_transpose_dtype():
    a = (np.arange(64 * 32) % 13).astype(np.float16).reshape(64, 32)
    out = run_kernel(lambda x: _store(nisa.dma_transpose(x)), (a,)).outputs
    np.testing.assert_array_equal(out, a.T)
    # the 2-byte rule belongs to the explicit DGE lowerings (nki.isa.dma_transpose docs: "If hwdge ... dtype is
    # 2 bytes"); the legacy default (dge_mode.unknown) transposes float32 (AWS's load_transpose2d doc test)
    b = RNG_T.random((96, 40), dtype=np.float32)
    np.testing.assert_array_equal(run_kernel(lambda x: _store(nisa.dma_transpose(x)), (b,)).outputs, b.T)
    for mode in (nisa.dge_mode.hwdge, nisa.dge_mode.swdge):
        with raises_rule("nkisim_dtype_not_supported",
                         "dma_transpose: dtype float32 is not supported for operand 'src'"):
            run(lambda x, mode=mode: nisa.dma_transpose(x, dge_mode=mode), b)


def test_bad_arguments():
    with raises_rule("nkisim_bad_argument", "is not an NKI ALU operator"):
        run(lambda a: nisa.tensor_tensor(nl.load(a), nl.load(a), op=np.sin), _z((4, 4)))
    with raises_rule("nkisim_bad_argument", "is not an activation function"):
        run(lambda a: nisa.activation(nl.add, nl.load(a)), _z((4, 4)))
    with raises_rule("nkisim_bad_argument", "op1 and operand1 must be given together"):
        run(lambda a: nisa.tensor_scalar(nl.load(a), nl.add, 1.0, op1=nl.multiply), _z((4, 4)))
    with raises_rule("nkisim_bad_argument", "operand 'data1' must be a tile, got ndarray"):
        run(lambda a: nisa.tensor_tensor(np.ones((4, 4)), nl.load(a), op=nl.add), _z((4, 4)))
    with raises_rule("nkisim_bad_argument", "axes must be (1, 0)"):
        run(lambda a: nisa.dma_transpose(a, axes=(0, 1)), _z((4, 4), np.float16))


# ---------------------------------------------------------------------------------------------------------
# direct allocation


def test_direct_allocation_rules():
    def mixed():
        nl.ndarray((128, 4), dtype=nl.float32, buffer=nl.sbuf)
        nl.ndarray((128, 4), dtype=nl.float32, buffer=ncc.sbuf.mod_alloc(base_addr=0))

    with raises_rule("nkisim_direct_alloc", "cannot be mixed"):
        run(mixed)
    with raises_rule("nkisim_direct_alloc", "base_partition must be 0"):
        run(lambda: nl.ndarray((64, 4), dtype=nl.float32, buffer=ncc.sbuf.mod_alloc(base_addr=0, base_partition=64)))
    with raises_rule("nkisim_direct_alloc", "beyond the 212984 usable"):
        run(lambda: nl.ndarray((128, 4), dtype=nl.float32, buffer=ncc.sbuf.mod_alloc(base_addr=212984 - 8)))
    with raises_rule("nkisim_direct_alloc", "init value"):
        run(lambda: nl.zeros((128, 4), dtype=nl.float32, buffer=ncc.sbuf.mod_alloc(base_addr=0)))


def test_direct_allocation_full_sbuf_edge():
    def k2(a):
        t = nl.ndarray((128, 212984 // 4), dtype=nl.float32, buffer=ncc.sbuf.mod_alloc(base_addr=0))
        nisa.dma_copy(src=a, dst=t[:, 0:4])
        out = nl.ndarray((128, 4), dtype=nl.float32, buffer=nl.hbm)
        nisa.dma_copy(src=t[:, 0:4], dst=out)
        return out

    a = np.arange(512, dtype=np.float32).reshape(128, 4)
    np.testing.assert_array_equal(run_kernel(k2, (a,)).outputs, a)


# ---------------------------------------------------------------------------------------------------------
# catalogue coverage and docs

# Codes no test can trigger through the public API, with the reason.
NOT_TRIGGERABLE: dict[str, str] = {}


def _codes_exercised() -> set[str]:
    codes = set()
    for path in TESTS.glob("test_nkisim_*.py"):
        codes |= set(re.findall(r'raises_rule\(\s*"([a-z0-9_]+)"', path.read_text()))
    return codes


def test_every_catalogue_rule_is_exercised():
    exercised = _codes_exercised()
    assert exercised <= set(RULES), f"tests name unknown codes: {sorted(exercised - set(RULES))}"
    missing = set(RULES) - exercised - set(NOT_TRIGGERABLE)
    assert not missing, f"catalogue rules without a test: {sorted(missing)}"
    assert not (exercised & set(NOT_TRIGGERABLE)), "a code listed as not triggerable is tested: update the list"


def test_official_rules_carry_the_official_code_prefix():
    for code, rule in RULES.items():
        assert rule.official == code.startswith("err_")
        assert rule.source


def test_constraints_doc_is_generated_from_the_catalogue():
    doc = (REPO / "docs" / "constraints.md").read_text()
    generated = subprocess.run([sys.executable, "-m", "nkisim.core.rules"], capture_output=True, text=True,
                               check=True, cwd=REPO).stdout
    assert doc == generated, "docs/constraints.md is stale: run `python -m nkisim.core.rules > docs/constraints.md`"
    for code in RULES:
        assert f"`{code}`" in doc
