"""The ``nki`` package as AWS ships it: module layout (``nki.isa`` a package with ``nki.isa.constants``,
``nki.dtype``), data types that behave like NKI's, ``nc_version`` ordering, dtype kernel arguments and
``nki.jit(experimental_flags=...)``.

Written from the API stubs (aws-neuron-sdk nki/api/nki/**: ``DType = str``, the enums of ``nki.isa``), the NKI
migration guide and release notes, and from how AWS's nki-library (d2ad3a5) uses these names in kernels that pass
on Trainium: ``from nki.isa.constants import dge_mode, oob_mode``, parameters annotated ``nki.dtype``,
``{nl.float8_e4m3: 240.0, ...}`` looked up with a tensor's dtype, ``str(t.dtype) == str(nl.bfloat16)``,
``nisa.get_nc_version() >= nisa.nc_version.gen3``."""

from __future__ import annotations

import importlib
import pickle
import sys

import ml_dtypes
import nki
import nki.isa as nisa
import nki.language as nl
import numpy as np
import pytest

RNG = np.random.default_rng(11)

ALL = ("bool_", "int8", "int16", "int32", "uint8", "uint16", "uint32", "float16", "float32", "bfloat16", "tfloat32",
       "float8_e4m3", "float8_e4m3fn", "float8_e5m2")


# ---- module layout -------------------------------------------------------------------------------------------
def test_isa_constants_is_a_module_of_the_isa_package():
    constants = importlib.import_module("nki.isa.constants")
    from nki.isa.constants import dge_mode, matmul_perf_mode, oob_mode

    assert hasattr(nisa, "__path__"), "nki.isa is a package"
    assert nisa.constants is constants
    assert dge_mode is nisa.dge_mode and oob_mode is nisa.oob_mode and matmul_perf_mode is nisa.matmul_perf_mode
    for name in ("engine", "reduce_cmd", "nc_version", "dma_engine"):
        assert getattr(constants, name) is getattr(nisa, name)
    # one module object, whatever the spelling
    assert sys.modules["nki.isa.constants"] is sys.modules["nkisim.frontends.nki.isa.constants"]


def test_nki_dtype_module_holds_the_language_dtypes():
    import nki.dtype as ndt

    assert nki.dtype is ndt
    for name in ALL:
        assert getattr(ndt, name) is getattr(nl, name)


# ---- dtypes --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ALL)
def test_dtype_prints_and_compares_as_its_name(name):
    dt = getattr(nl, name)
    text = "bool" if name == "bool_" else name
    assert str(dt) == text and f"{dt}" == text
    assert dt == text
    assert hash(dt) == hash(dt) and dt in {dt}
    assert pickle.loads(pickle.dumps(dt)) == dt


def test_dtypes_are_numpy_dtypes_for_host_code():
    assert np.zeros((2, 3), dtype=nl.bfloat16).dtype == ml_dtypes.bfloat16
    assert np.full((1, 1), 7, dtype=nl.int32).dtype == np.int32
    assert np.ones(4).astype(nl.float8_e4m3).dtype == np.dtype(ml_dtypes.float8_e4m3)
    assert np.dtype(nl.tfloat32) == np.float32  # stored as float32
    assert nl.float32 == np.float32 and np.dtype(np.float32) == nl.float32
    assert nl.float16 != nl.bfloat16 and nl.tfloat32 != nl.float32


def test_dtype_tables_are_found_with_a_tensors_dtype():
    """nki-library's kernel_helpers keys a table by nl.float8_e4m3 / e4m3fn / e5m2 and looks it up with the
    quantised tensor's dtype; its allocator compares str(t.dtype) with str(nl.X)."""
    table = {nl.float8_e4m3: 240.0, nl.float8_e4m3fn: 448.0, nl.float8_e5m2: 57344.0}

    @nki.jit
    def kernel(x):
        out = nl.ndarray((1, 1), dtype=nl.float32, buffer=nl.shared_hbm)
        t = nl.ndarray((1, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.memset(t, table[x.dtype])
        assert str(x.dtype) == str(nl.float8_e5m2) and x.dtype == nl.float8_e5m2
        assert x.dtype in (nl.bfloat16, nl.float8_e5m2)
        nisa.dma_copy(dst=out, src=t)
        return out

    x = np.zeros((4, 4), dtype=ml_dtypes.float8_e5m2)
    assert kernel(x)[0, 0] == 57344.0


@pytest.mark.parametrize("given", [np.float16, np.dtype(np.float16), nl.float16], ids=["type", "np.dtype", "nl"])
def test_a_dtype_kernel_argument_is_a_value_not_an_array(given):
    """A dtype passed to the kernel is converted to the NKI dtype of that name (release notes 0.4.0: JAX dtypes
    "are now accepted as kernel arguments ... converted to the equivalent NKI dtype"); it is not an input tensor."""
    seen = []

    @nki.jit
    def cast(a, dt):
        seen.append(dt)
        out = nl.ndarray(a.shape, dtype=dt, buffer=nl.shared_hbm)
        src = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=src, src=a)
        dst = nl.ndarray(a.shape, dtype=dt, buffer=nl.sbuf)
        nisa.tensor_copy(dst=dst, src=src)
        nisa.dma_copy(dst=out, src=dst)
        return out

    a = RNG.random((128, 32)).astype(np.float32)
    out = cast(a, given)
    assert out.dtype == np.float16
    np.testing.assert_array_equal(out, a.astype(np.float16))
    assert seen[0] is nl.float16 and str(seen[0]) == "float16"
    out = cast(a, dt=given)  # as a keyword too
    assert seen[1] is nl.float16


# ---- nki.isa enums ---------------------------------------------------------------------------------------------
def test_nc_version_is_ordered():
    """nki-library: ``nisa.get_nc_version() <= nisa.nc_version.gen2``, ``nisa.get_nc_version() >= 3``."""
    assert nisa.nc_version.gen2 < nisa.nc_version.gen3 < nisa.nc_version.gen4
    assert nisa.get_nc_version() >= nisa.nc_version.gen3 and nisa.get_nc_version() >= 3
    assert not nisa.get_nc_version() <= nisa.nc_version.gen2
    assert nisa.nc_version.gen3.name == "gen3"


# ---- nki.jit(experimental_flags=...) ---------------------------------------------------------------------------
def _make_output(shape, dtype):
    return nl.ndarray(shape, dtype=dtype, buffer=nl.shared_hbm)


def _copy_kernel(a):
    out = _make_output(a.shape, a.dtype)  # the output is created in a helper: not the top-level kernel scope
    t = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=a)
    nisa.dma_copy(dst=out, src=t)
    return out


def test_shared_hbm_outputs_may_be_created_in_helpers_and_under_ifs():
    """The legacy nki.errors page refuses shared_hbm "inside a loop, under if condition or inside another function
    called by the top-level nki kernel"; the 0.x compiler runs AWS's nki-library kernels that do both without any
    flag (rotational_topk_utils.naive_scanning_topk creates the top-k outputs in a helper, rotational_topk under an
    if).  experimental_flags is accepted as the compiler's option string."""
    a = RNG.random((128, 64)).astype(np.float32)
    np.testing.assert_array_equal(nki.jit(_copy_kernel)(a), a)

    @nki.jit
    def under_if(x):
        if x.shape[0] == 128:
            out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x)
        nisa.dma_copy(dst=out, src=t)
        return out

    np.testing.assert_array_equal(under_if(a), a)
    flagged = nki.jit(experimental_flags="skip-non-top-level-shared-hbm-check")(_copy_kernel)
    np.testing.assert_array_equal(flagged(a), a)
    assert flagged.options["experimental_flags"] == "skip-non-top-level-shared-hbm-check"
    # (the legacy API keeps the rule: tests/test_nkisim_semantics.py::test_shared_hbm_only_at_kernel_level)


# ---- nl.shared_identity_matrix -----------------------------------------------------------------------------------
def test_shared_identity_matrix_is_an_sbuf_tile():
    """nki.language.shared_identity_matrix: "Create an identity matrix in SBUF" (NKI 0.6 API reference): the tile
    is an SBUF operand as returned, e.g. the stationary of a TensorE transpose-by-matmul."""
    seen = {}

    @nki.jit
    def transpose_by_identity(x):
        ident = nl.shared_identity_matrix(n=128, dtype=nl.float32)
        seen["buffer"] = ident.buffer
        seen["shape"] = tuple(ident.shape)
        xs = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=xs, src=x)
        acc = nl.ndarray((64, 128), dtype=nl.float32, buffer=nl.psum)
        nisa.nc_matmul(dst=acc, stationary=xs, moving=ident)  # x.T @ I
        res = nl.ndarray((64, 128), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=res, src=acc)
        out = nl.ndarray((64, 128), dtype=nl.float32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=res)
        return out

    x = RNG.random((128, 64)).astype(np.float32)
    np.testing.assert_allclose(transpose_by_identity(x), x.T, rtol=1e-6)
    assert seen == {"buffer": nl.sbuf, "shape": (128, 128)}


def test_dge_mode_takes_its_integer_values():
    """AWS's nki-library passes ``dge_mode=3`` (dge_mode.none, "Use STATIC DMA mode") to nisa.dma_copy in kernels
    its fast suite runs on Trainium; the value names the member (API stub: unknown 0, swdge 1, hwdge 2, none 3).
    Other enums keep the migration guide's rule (tests/test_nkisim_nki_frontend.py: engine=5 is refused)."""
    from nkisim.core.runtime import run_kernel
    from nkisim.frontends import NKI

    def copy(x, mode):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x, dge_mode=mode)
        nisa.dma_copy(dst=out, src=t, dge_mode=mode)
        return out

    x = RNG.random((128, 64)).astype(np.float32)
    for raw, member in ((3, nisa.dge_mode.none), (1, nisa.dge_mode.swdge), (0, nisa.dge_mode.unknown)):
        by_int = run_kernel(copy, (x, raw), frontend=NKI)
        by_member = run_kernel(copy, (x, member), frontend=NKI)
        np.testing.assert_array_equal(by_int.outputs, x)
        modes = [(i.attrs.get("dge"), i.attrs.get("swdge")) for i in by_int.trace.instrs]
        assert modes == [(i.attrs.get("dge"), i.attrs.get("swdge")) for i in by_member.trace.instrs]
        if member is nisa.dge_mode.none:
            assert modes == [(False, None), (False, None)]  # static descriptors reached the DMA cost model
    with pytest.raises(TypeError, match="member of nki.isa.dge_mode"):
        run_kernel(copy, (x, 7), frontend=NKI)


def test_trn3_only_dtypes_are_names_that_refuse_storage():
    """The MX types (NeuronCore-v4) exist as names: nki-library's tests list them beside trn2 cases
    (``hasattr(v, "value")`` probes, dict keys); using one as a data type is nkisim's "does not support" error."""
    from nkisim.frontends._unsupported import NkisimUnsupportedError

    for name in ("float8_e5m2_x4", "float8_e4m3fn_x4", "float4_e2m1fn_x4", "float8_e8m0fnu"):
        dt = getattr(nl, name)
        assert str(dt) == name and dt == name and {dt: 1}[dt] == 1 and not hasattr(dt, "value")
        assert dt != nl.float32 and nl.float32 != dt
        with pytest.raises(NkisimUnsupportedError, match=f"nkisim does not support nl.{name} yet"):
            np.dtype(dt)

        @nki.jit
        def alloc(x, dt=dt):
            t = nl.ndarray((128, 4), dtype=dt, buffer=nl.sbuf)
            return t

        with pytest.raises(NkisimUnsupportedError, match="NeuronCore-v4"):
            alloc(np.zeros((1, 1), np.float32))


# ---- NKIObject and tensor handles --------------------------------------------------------------------------------
def test_dataclass_nkiobject_takes_its_attributes_by_keyword():
    """nki-library (attention_cte.SectionParams): ``@dataclass class P(nl.NKIObject)`` with plain class attributes
    (no annotation: no dataclass field) is built as ``P(section_idx=...)``: NKIObject's ``__init__(**kwargs)``
    (API stub) sets them.  Frozen dataclasses construct too (NKI 0.5 release notes)."""
    from dataclasses import FrozenInstanceError, dataclass

    @dataclass
    class SectionParams(nl.NKIObject):
        section_idx = None
        section_offset = None

    p = SectionParams(section_idx=3)
    assert p.section_idx == 3 and p.section_offset is None

    @dataclass(frozen=True)
    class Frozen(nl.NKIObject):
        n: int = 1
        tag = None

    f = Frozen(n=2, tag="x")
    assert (f.n, f.tag) == (2, "x")
    with pytest.raises(FrozenInstanceError):
        f.n = 3
    with pytest.raises(TypeError, match="unexpected keyword argument 'nope'"):
        SectionParams(nope=1)
    assert nl.NKIObject(a=1).a == 1

    # nki-library (mlp_tkg_constants) builds MLPTKGConstantsDimensionSizes without its field remainderIFused:
    # a field not given takes its default, or None
    @dataclass
    class Sizes(nl.NKIObject):
        T: int
        remainder: int
        K: int | None = 4

    sizes = Sizes(T=2)
    assert (sizes.T, sizes.remainder, sizes.K) == (2, None, 4)
    assert Sizes(1, 2) == Sizes(T=1, remainder=2, K=4)


def test_a_tensor_handle_is_true():
    """nki-library (mlp_tkg_constants): ``if params.expert_params and params.expert_params.expert_index:`` tests
    that an optional tensor was given; the handle is true, no device value is read."""
    seen = []

    @nki.jit
    def kernel(x, maybe=None):
        seen.append((bool(x), bool(maybe)))
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x)
        nisa.dma_copy(dst=out, src=t)
        return out

    x = RNG.random((128, 8)).astype(np.float32)
    kernel(x)
    kernel(x, maybe=x)
    assert seen == [(True, False), (True, True)]


def test_tensor_tensor_operands_of_one_count_per_partition_with_unit_axes():
    """nisa.tensor_tensor: "The two tiles must have the same partition axis size and the same number of elements per
    partition" (API reference): a [P, F] tile against a [P, F, 1] view (nki-library's MLP TKG bias add, T = 1)."""
    @nki.jit
    def add_bias(x, b):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        xt = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
        bt = nl.ndarray(b.shape, dtype=b.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=xt, src=x)
        nisa.dma_copy(dst=bt, src=b)
        nisa.tensor_tensor(dst=xt, data1=xt, data2=bt.expand_dim(2), op=nl.add)
        nisa.dma_copy(dst=out, src=xt)
        return out

    x = RNG.random((128, 4)).astype(np.float32)
    b = RNG.random((128, 4)).astype(np.float32)
    np.testing.assert_array_equal(add_bias(x, b), x + b)
