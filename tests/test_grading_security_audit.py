"""The grading-security audit (docs/grading-security.md) covers every name and parameter a kernel can reach: each
public function of both front ends, each public tensor method and each parameter name is listed in its index, so a
name added to a front end without an audit row fails here (issue 25: "the audit table covers every parameter of every
instruction and launch form the course's kernels can reach")."""

from __future__ import annotations

import importlib
import inspect
import re
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parent.parent / "docs" / "grading-security.md"
# the index's short prefix -> the front-end modules it stands for (either API)
MODULES = {
    "nisa": ("nkisim.frontends.nki.isa", "nkisim.frontends.legacy.isa"),
    "nl": ("nkisim.frontends.nki.language", "nkisim.frontends.legacy.language"),
    "nki": ("nkisim.frontends.nki.nki", "nkisim.frontends.legacy.nki"),
    "ncoll": ("nkisim.frontends.nki.collectives",),
    "ncc": ("nkisim.frontends.legacy.compiler",),
    "nt": ("nkisim.frontends.nki.typing", "nkisim.frontends.legacy.typing"),
}


def _index() -> str:
    text = DOC.read_text()
    start = text.index("### Index: every name and parameter a kernel can reach")
    return text[start : text.index("\n## ", start)]


def _functions() -> dict[str, list]:
    out: dict[str, list] = {}
    for prefix, modules in MODULES.items():
        for name in modules:
            mod = importlib.import_module(name)
            for attr in dir(mod):
                f = getattr(mod, attr)
                if not attr.startswith("_") and inspect.isfunction(f) and f.__module__.startswith("nkisim"):
                    out.setdefault(f"{prefix}.{attr}", []).append(f)
    from nkisim.core.tensor import Tensor
    from nkisim.frontends.nki.tensor import NkiTensor

    for cls in (Tensor, NkiTensor):
        for attr, f in inspect.getmembers(cls, callable):
            if not attr.startswith("_"):
                out.setdefault(f"tensor.{attr}", []).append(f)
    return out


def _parameters(functions: dict[str, list]) -> set[str]:
    names = set()
    for fs in functions.values():
        for f in fs:
            try:
                sig = inspect.signature(f)
            except (TypeError, ValueError):
                continue
            names |= {p.name for p in sig.parameters.values()
                      if p.name != "self" and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)}
    return names


FUNCTIONS = _functions()


def test_the_front_ends_are_found():
    assert len(FUNCTIONS) > 200 and "nisa.nc_matmul" in FUNCTIONS and "tensor.ap" in FUNCTIONS


def _objects() -> set[str]:
    """Every public name of the front ends' modules that is not a function: classes, enums, buffers, dtypes,
    constants, submodules -- each an object kernel code holds (issue 31: the audit covers them too)."""
    names = set()
    for prefix, modules in MODULES.items():
        for name in modules:
            mod = importlib.import_module(name)
            for attr in dir(mod):
                f = getattr(mod, attr)
                if not attr.startswith("_") and not (inspect.isfunction(f) and f.__module__.startswith("nkisim")):
                    names.add(f"{prefix}.{attr}")
    return names


def test_every_object_has_an_audit_row():
    listed = set(re.findall(r"`((?:nisa|nl|nki|ncoll|ncc|nt)\.[A-Za-z_0-9]+)`", _index()))
    missing = sorted(_objects() - listed)
    assert not missing, f"add these objects to the audit index of {DOC.name}: {missing}"


def test_every_call_has_an_audit_row():
    listed = set(re.findall(r"`((?:nisa|nl|nki|ncoll|ncc|tensor)\.[A-Za-z_0-9]+)`", _index()))
    missing = sorted(set(FUNCTIONS) - listed)
    assert not missing, f"add these to the audit index of {DOC.name}: {missing}"


def test_every_parameter_has_an_audit_row():
    index = _index()
    table = index[index.index("Parameters, by what they control"):]
    listed = set(re.findall(r"`([A-Za-z_][A-Za-z_0-9]*)`", table))
    missing = sorted(_parameters(FUNCTIONS) - listed)
    assert not missing, f"add these parameters to the audit index of {DOC.name}: {missing}"


@pytest.mark.parametrize("row", ["dynamic loops and registers", "collectives (`nki.collectives`)"])
def test_the_index_rows_say_what_a_kernel_gains(row):
    line = next(x for x in _index().splitlines() if x.startswith(f"| {row}"))
    assert line.count("|") == 5 and "| no" in line


# ---- no capability leaks (issue 31): what kernel code can reach from the objects the front ends hand it ----------
# Kernel code reaches objects through public attribute names only (the screen refuses `_` names, the grader's
# builtins withhold getattr/vars/dir) and through `type(x)`.  Walking that graph from everything a kernel gets --
# both APIs' modules, a launcher, tensors and views, registers, loops, index expressions, errors -- must find no
# loader (FrontEnd, importlib), no NumPy storage, no module outside the allowed ones, none of the core's records or
# state (the trace, instructions, allocations, the running kernel), and every nkisim class sealed (its class
# attributes cannot be planted from kernel code: nkisim.core.sealed).
_ALLOWED_MODULES = ("numpy", "math", "typing", "nki", "neuronxcc")
_CORE_STATE = {"Trace", "Instr", "KernelContext", "Allocation", "MemoryTracker", "Arena", "FrontEnd", "Semantics",
               "NkiSemantics"}


def _reached_by_kernels() -> list[tuple[str, object]]:
    import numpy as np

    from nkisim import _hook

    _hook.install()
    import neuronxcc.nki as lnki
    import neuronxcc.nki.compiler as ncc
    import neuronxcc.nki.isa as lnisa
    import neuronxcc.nki.language as lnl
    import nki
    import nki.collectives as ncol
    import nki.isa as nisa
    import nki.language as nl
    import nki.typing as nt

    got: list = []

    def grab(f):
        try:
            got.append(f())
        except Exception as exc:  # noqa: BLE001 - the error objects are reachable too
            got.append(exc)

    @nki.jit
    def kernel(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        t = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=a[0:128, 0:64])
        got.extend([a, out, t, t[0:64, :], t.ap([[64, 128], [1, 64]]), nl.affine_range(2), iter(nl.affine_range(2)),
                    nl.sequential_range(2), nl.static_range(2)])
        for i in nl.affine_range(1):
            got.append(i)
        grab(lambda: nisa.register_alloc(0))
        grab(lambda: nl.dynamic_range(2))
        grab(lambda: nisa.tensor_copy(dst=t, src=a))  # an NKI error
        grab(lambda: t.indirect(0))  # nkisim's "not supported" error
        nisa.dma_copy(dst=out[0:128, 0:64], src=t)
        return out

    kernel(np.ones((128, 64), np.float32))

    @lnki.jit
    def legacy(a):
        out = lnl.ndarray(a.shape, dtype=a.dtype, buffer=lnl.shared_hbm)
        t = lnl.load(a)
        got.extend([t, t[0:64, :], lnl.arange(4)[:, None], lnl.mgrid[0:2, 0:2], lnl.par_dim(2)])
        grab(lambda: lnl.load(a[0:4, 0:4, 0:4]))
        lnl.store(out, t)
        return out

    legacy(np.ones((128, 64), np.float32))
    bench = lnki.benchmark(legacy, warmup=1, iters=1)
    bench(np.ones((128, 64), np.float32))
    roots = {"legacy nki.benchmark": bench, "legacy nki.baremetal": lnki.baremetal(legacy),
             "legacy nki.simulate": lnki.simulate(legacy), "legacy kernel[2]": legacy[2]}
    roots |= {"nki": nki, "nl": nl, "nisa": nisa, "ncol": ncol, "nt": nt, "legacy.nki": lnki, "legacy.nl": lnl,
             "legacy.nisa": lnisa, "ncc": ncc, "kernel": kernel, "legacy kernel": legacy, "kernel[1]": kernel[1],
             "nki.simulate(kernel)": nki.simulate(kernel)}
    roots.update({f"object {i} ({type(g).__name__})": g for i, g in enumerate(got)})
    seen: set[int] = set()
    out: list[tuple[str, object]] = []
    todo = list(roots.items())
    depth = {id(o): 0 for o in roots.values()}
    while todo:
        path, obj = todo.pop()
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        out.append((path, obj))
        d = depth.get(id(obj), 0)
        if d >= 6 or isinstance(obj, (int, float, str, bytes, bool, type(None))):
            continue
        if isinstance(obj, np.ndarray):
            continue  # a host array (an index expression's values); tensor storage is looked for in the test
        if type(obj).__module__.startswith("nkisim.perf"):
            continue  # a legacy nki.benchmark result: the report and trace of a run of its own, never the graded one
        if isinstance(obj, type(np)) and not obj.__name__.startswith(("nki", "neuronxcc", "nkisim")):
            continue  # numpy / math / typing: allowed modules, screened by name (SANDBOX-NUMPY-*)
        if isinstance(obj, type) and obj.__module__ in ("builtins", "numpy", "enum", "typing"):
            continue
        nexts = [] if isinstance(obj, type) else [(f"type({path})", type(obj))]
        for name in dir(obj):
            if name.startswith("_"):
                continue
            try:
                value = getattr(obj, name)
            except Exception:  # noqa: BLE001 - a property that raises here gives nothing
                continue
            if isinstance(obj, type(np)) and isinstance(value, type(np)):
                # the grader's module views hand out only allowed modules (grader/child.py _view)
                if not value.__name__.startswith(("nki", "neuronxcc", "nkisim.frontends", "numpy", "math", "typing")):
                    continue
            nexts.append((f"{path}.{name}", value))
        for p, v in nexts:
            depth.setdefault(id(v), d + 1)
            todo.append((p, v))
    return out


REACHED = _reached_by_kernels()


def _defined_in_nkisim(obj) -> bool:
    return (getattr(obj, "__module__", None) or "").startswith("nkisim")


def test_the_walk_reaches_the_kernel_facing_objects():
    names = {type(o).__name__ for _, o in REACHED} | {getattr(o, "__name__", "") for _, o in REACHED}
    assert {"NkiTensor", "Tensor", "VirtualRegister", "Kernel", "BufferSpec", "NKIError", "IndexExpr"} <= names


def test_no_loader_module_storage_or_core_state_is_reachable():
    import types

    import numpy as np

    from nkisim.core.access import allocation
    from nkisim.core.tensor import Tensor
    from nkisim.frontends import of_module

    storage = [allocation(o).base for _, o in REACHED if isinstance(o, Tensor)]
    assert storage
    bad = []
    for path, obj in REACHED:
        if isinstance(obj, types.ModuleType):
            serving = of_module(obj.__name__) is not None and "._" not in obj.__name__  # what `import nki.isa` gives
            if obj.__name__.split(".")[0] not in _ALLOWED_MODULES and not serving:
                bad.append((path, f"module {obj.__name__}"))
        elif isinstance(obj, np.ndarray):
            if any(np.shares_memory(obj, base) for base in storage):
                bad.append((path, "NumPy storage of a tensor"))
        elif type(obj).__name__ in _CORE_STATE and _defined_in_nkisim(type(obj)):
            bad.append((path, type(obj).__name__))
        elif isinstance(obj, type) and obj.__name__ in _CORE_STATE and _defined_in_nkisim(obj):
            bad.append((path, f"class {obj.__name__}"))
        elif callable(obj) and getattr(obj, "__module__", "") in ("importlib", "os", "sys", "ctypes", "subprocess"):
            bad.append((path, f"{obj.__module__}.{getattr(obj, '__name__', '?')}"))
    assert not bad, bad


# Left unsealed for speed (nkisim/core/sealed.py): the classes the per-instruction path tests with isinstance.  A
# class planted on them changes no trace record (test_trace_records_ignore_whatever_kernel_code_plants_on_the_tensor_
# class; tests/hostile/class_plant_nki graded without the screen times as its twin).
UNSEALED_FOR_SPEED = {"nkisim.core.tensor.Tensor", "nkisim.frontends.nki.tensor.NkiTensor", "nkisim.core.tensor.ParDim",
                      "nkisim.core.indexing.IndexExpr", "nkisim.core.indexing.Mask", "nkisim.core.indexing.DynIndex",
                      "nkisim.core.indexing.MGridResult", "nkisim.core.ops.registers.Register",
                      # dtype objects: compared on every instruction (NkiDType.__eq__ tests isinstance); a class
                      # attribute planted on them changes the storage the kernel's own tensors get, not a record
                      "nkisim.frontends.nki.dtype.NkiDType", "nkisim.frontends.nki.dtype.Trn3DType"}


def test_every_nkisim_class_kernel_code_reaches_is_sealed():
    from nkisim.core.sealed import Sealed

    unsealed = {f"{obj.__module__}.{obj.__qualname__}": path for path, obj in REACHED
                if isinstance(obj, type) and _defined_in_nkisim(obj) and not isinstance(obj, Sealed)}
    assert {"nkisim.core.tensor.Tensor", "nkisim.frontends.nki.tensor.NkiTensor"} <= set(unsealed)  # the walk saw them
    extra = sorted(f"{name} (via {path})" for name, path in unsealed.items() if name not in UNSEALED_FOR_SPEED)
    assert not extra, extra


def test_a_sealed_class_refuses_kernel_code_and_a_forged_front_end_loads_nothing(tmp_path):
    """The runtime layer under the screen: kernel code (a file outside nkisim) cannot plant class attributes, and a
    FrontEnd record built by hand imports nothing."""
    import dataclasses

    from nkisim import frontends

    kernel_file = tmp_path / "kernel.py"
    kernel_file.write_text("def plant(cls, value):\n    cls.kind = value\n")
    namespace: dict = {}
    exec(compile(kernel_file.read_text(), str(kernel_file), "exec"), namespace)  # noqa: S102 - our own test source
    from nkisim.frontends.nki.language import MemoryRegion

    with pytest.raises(AttributeError, match="may not change the NKI API's classes"):
        namespace["plant"](MemoryRegion, "hbm")
    assert "kind" not in vars(MemoryRegion)
    import nkisim.frontends.nki.language as nl

    with pytest.raises(AttributeError, match="immutable"):
        namespace["plant"](nl.sbuf, "hbm")
    forged = dataclasses.replace(frontends.NKI, tensor="os:system")
    with pytest.raises(TypeError, match="registered front ends"):
        forged.load("tensor")


@pytest.mark.parametrize("api", ["nki", "legacy"])
def test_a_tensors_public_fields_are_read_only_to_kernel_code(api):
    """C12: the fields the front ends' checks read (``shape``, ``dtype``, ``kind``, ``oob``) cannot be overwritten or
    deleted on a tensor or any view of it, in either API (before: plain slots, writable past the screen: a kernel
    could relabel a tile's dtype or memory kind for the front end's checks).  They are C-level read-only members
    over private slots, so reading them costs a slot's read (tests/test_nkisim_hot_path.py, nkisim.bench)."""
    import numpy as np

    from nkisim import frontends
    from nkisim.core.runtime import run_kernel

    seen = []

    def tamper(t):
        for field, value in (("shape", (1,)), ("dtype", np.dtype(np.float16)), ("kind", 0), ("oob", True)):
            before = getattr(t, field)  # noqa: B009 - the attribute named by the loop
            with pytest.raises(AttributeError, match="readonly attribute"):
                setattr(t, field, value)
            with pytest.raises(AttributeError, match="readonly attribute"):
                delattr(t, field)
            seen.append(getattr(t, field) == before)  # noqa: B009

    if api == "nki":
        import nki
        import nki.isa as nisa
        import nki.language as nl

        @nki.jit
        def k(x):
            tamper(x)
            t = nl.ndarray((4, 8), dtype=nl.float32, buffer=nl.sbuf)
            nisa.dma_copy(dst=t, src=x)
            tamper(t)
            tamper(t[0:2, 2:6])
            out = nl.ndarray((4, 8), dtype=nl.float32, buffer=nl.shared_hbm)
            nisa.dma_copy(dst=out, src=t)
            return out

        fe = frontends.NKI
    else:
        import neuronxcc.nki as lnki
        import neuronxcc.nki.language as lnl

        @lnki.jit
        def k(x):
            tamper(x)
            t = lnl.load(x)
            tamper(t)
            tamper(t[0:2, 2:6])
            out = lnl.ndarray((4, 8), dtype=lnl.float32, buffer=lnl.shared_hbm)
            lnl.store(out, t)
            return out

        fe = frontends.LEGACY
    x = np.arange(32, dtype=np.float32).reshape(4, 8)
    run = run_kernel(k, (x,), {}, frontend=fe, mode="full")
    np.testing.assert_array_equal(np.asarray(run.outputs), x)
    assert seen == [True] * 12
