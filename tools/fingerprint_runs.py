"""Fingerprints of nkisim runs, to prove a speed change changes nothing: ``python tools/fingerprint_runs.py OUT.json``.

Runs the grader's cases on the staff kernels (every case of grader/rubric.toml, seed 0) and every row of the
calibration corpus (nkisim/calibration/measurements.tsv) in full mode (values) and in timing mode, and records per
run: SHA-256 of every output array (dtype, shape, bytes), SHA-256 of the trace in a canonical form built from the
Instr/Operand objects themselves (not through nkisim.core.traceio, which a speed change may touch), whether the
trace survives traceio's dump/load unchanged, and the modelled latency with every instruction's cost, start and end
(``repr`` of the floats: bit-exact).  ``--compare A.json B.json`` prints every difference; run the same command on
the code before and after a change (e.g. ``git archive BASE | tar -x -C /tmp/base`` and ``--repo /tmp/base``).
``--only GLOB`` restricts the runs (e.g. ``'grader:*'``).  Staff only (needs grader/reference).

``--streams`` fingerprints specializations instead: every run above, and the grader's cases on the legacy edition's
staff kernels (grader/reference/legacy), recorded in timing mode as the grader's specializing child records them
(``nkisim.stream.record``), with the SHA-256 and size of the stream's bytes (``stream.dumps``, the code table's file
names relative to the checkout) and the instruction count: the check that a change to the recording path writes
byte-identical streams (their replays are then the same programs).
"""

from __future__ import annotations

import argparse
import fnmatch
import hashlib
import importlib.util
import json
import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def use_checkout(repo: str) -> None:
    """Import nkisim and grader from ``repo``: drop the copies the environment imported at start-up (the nkisim
    import-fallback .pth) and the editable install's finders, which would win over sys.path."""
    for name in [m for m in sys.modules if m.split(".")[0] in ("nkisim", "grader", "neuronxcc")]:
        del sys.modules[name]
    sys.meta_path[:] = [f for f in sys.meta_path
                        if not type(f).__module__.startswith(("__editable__", "nkisim"))]
    sys.path_hooks[:] = [h for h in sys.path_hooks if "__editable__" not in getattr(h, "__module__", "")]
    sys.path[:] = [p for p in sys.path if "__editable__" not in p]
    sys.path.insert(0, repo)
    sys.path_importer_cache.clear()


def _digest_arrays(value) -> list[str]:
    arrs = value if isinstance(value, (tuple, list)) else (value,)
    out = []
    for a in arrs:
        if a is None:
            out.append("None")
            continue
        a = np.ascontiguousarray(a)
        h = hashlib.sha256(f"{a.dtype.str}{a.shape}".encode())
        h.update(a.tobytes())
        out.append(h.hexdigest())
    return out


def canonical_trace(trace) -> str:
    """SHA-256 of every field of every instruction and of the trace's metadata."""
    h = hashlib.sha256()
    h.update(json.dumps([trace.target, trace.kernel_name, trace.meta], sort_keys=True, default=repr).encode())
    for ins in trace.instrs:
        ops = [[tuple(int(x) for x in o.region), tuple(int(x) for x in o.shape), o.dtype, o.itemsize, o.partitions,
                o.free_elems, o.inner_stride_bytes, o.contiguous_bytes] for o in (*ins.srcs, "|", *ins.dsts)
               if o != "|"] + [len(ins.srcs)]
        h.update(json.dumps([ins.seq, ins.op, int(ins.engine), ins.where,
                             json.dumps(ins.attrs, sort_keys=True, default=repr), ops]).encode())
    return h.hexdigest()


def _model(trace, target: str) -> dict:
    from nkisim.perf import estimate

    rep = estimate(trace, target)
    h = hashlib.sha256()
    for ins in trace.instrs:
        h.update(f"{ins.cost_ns!r},{ins.start_ns!r},{ins.end_ns!r};".encode())
    return {"nc_latency_us": repr(rep.nc_latency_us), "total_us": repr(rep.total_us), "schedule": h.hexdigest()}


def _one(kernel, args, kwargs, mode: str, target: str) -> dict:
    from nkisim.core import traceio
    from nkisim.core.runtime import run_kernel

    t0 = time.process_time()
    try:
        run = run_kernel(kernel, args, kwargs, mode=mode, target=target)
    except Exception as e:  # an error is a result too: it must not change either
        return {"error": f"{type(e).__name__}: {e}"}
    cpu = time.process_time() - t0
    rec = {"cpu_s": round(cpu, 3), "instrs": len(run.trace), "trace": canonical_trace(run.trace)}
    if mode == "full":
        rec["outputs"] = _digest_arrays(run.outputs)
    rec["traceio_roundtrip"] = canonical_trace(traceio.loads(traceio.dumps(run.trace))) == rec["trace"]
    rec.update(_model(run.trace, target))
    return rec


def _one_stream(kernel, args, kwargs, target: str) -> dict:
    from nkisim import stream

    t0 = time.process_time()
    try:
        data, run = stream.record(kernel, args, kwargs, mode="timing", target=target)
        # the code table names the kernels' files: relative to the checkout, so that two checkouts compare
        root = os.getcwd() + os.sep
        data["codes"] = [[f.removeprefix(root), name] for f, name in data["codes"]]
        blob = stream.dumps(data)
    except Exception as e:  # noqa: BLE001 - an error is a result too: it must not change either
        return {"error": f"{type(e).__name__}: {e}"}
    return {"cpu_s": round(time.process_time() - t0, 3), "instrs": len(run.trace), "bytes": len(blob),
            "stream": hashlib.sha256(blob).hexdigest()}


def _grader_runs(repo: str, legacy: bool = False):
    from grader.problems import make_invocation
    from grader.rubric import load_rubric
    from nkisim import _hook

    _hook.install()
    mods = {}
    for t in load_rubric(os.path.join(repo, "grader", "rubric.toml")).tests:
        path = os.path.join(repo, "grader", "reference", *(("legacy",) if legacy else ()), t.file)
        if legacy and not os.path.exists(path):
            continue
        if path not in mods:
            spec = importlib.util.spec_from_file_location(f"fingerprint_ref_{len(mods)}", path)
            mods[path] = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(mods[path])
        for i, case in enumerate(t.cases):
            # the batch-4 224x224 correctness cases differ from the timed ones in batch only: full mode for all
            modes = ("full", "timing") if t.kind == "performance" or case.get("batch", 1) == 1 else ("full",)
            yield f"{'legacy' if legacy else 'grader'}:{t.id}[{i}]", getattr(mods[path], t.function), (
                lambda c=case, p=t.problem: make_invocation(p, c, 0)), "trn2", modes


def _corpus_runs(repo: str):
    from nkisim.calibrate import _kernel
    from nkisim.calibration.rows import load_rows

    for row in load_rows():
        try:
            kernel = _kernel(row)
        except Exception as e:  # noqa: BLE001 - a missing reference: recorded as such
            yield f"corpus:{row.id}", e, None, row.target, ()
            continue

        def inputs(r=row):
            # some rows' inputs are np.empty (timing only): seeded values make their full-mode outputs comparable
            rng = np.random.default_rng(0)

            class _Inv:
                args = [rng.random(a.shape, dtype=np.float32).astype(a.dtype) if isinstance(a, np.ndarray) else a
                        for a in r.make_inputs()]
                kwargs = dict(r.kwargs)
            return _Inv
        yield f"corpus:{row.id}", kernel, inputs, row.target, ("full", "timing")


def _legacy_runs(repo: str):
    return _grader_runs(repo, legacy=True)


def run_all(repo: str, only: list[str], streams: bool = False) -> dict:
    os.chdir(repo)
    results = {}
    for source in (_grader_runs, _corpus_runs, *((_legacy_runs,) if streams else ())):
        for name, kernel, make, target, modes in source(repo):
            if only and not any(fnmatch.fnmatch(name, g) for g in only):
                continue
            if isinstance(kernel, Exception):
                results[name] = {"error": f"{type(kernel).__name__}: {kernel}"}
                continue
            inv = make()
            if streams:
                args = [np.array(a, copy=True) if isinstance(a, np.ndarray) else a for a in inv.args]
                results[f"{name}:stream"] = rec = _one_stream(kernel, args, dict(inv.kwargs), target)
                print(f"{name}:stream {rec.get('cpu_s', rec.get('error'))}", file=sys.stderr, flush=True)
                continue
            for mode in modes:
                args = [np.array(a, copy=True) if isinstance(a, np.ndarray) else a for a in inv.args]
                results[f"{name}:{mode}"] = rec = _one(kernel, args, dict(inv.kwargs), mode, target)
                print(f"{name}:{mode} {rec.get('cpu_s', rec.get('error'))}", file=sys.stderr, flush=True)
    return results


def compare(a_path: str, b_path: str) -> int:
    a, b = (json.load(open(p)) for p in (a_path, b_path))
    bad = 0
    for k in sorted(set(a) | set(b)):
        ra, rb = a.get(k), b.get(k)
        if ra is None or rb is None:
            print(f"only in one: {k}")
            bad += 1
            continue
        for f in sorted((set(ra) | set(rb)) - {"cpu_s"}):
            if ra.get(f) != rb.get(f):
                print(f"{k}: {f} differs: {ra.get(f)!r} vs {rb.get(f)!r}")
                bad += 1
    cpu_a = sum(r.get("cpu_s", 0) for r in a.values())
    cpu_b = sum(r.get("cpu_s", 0) for r in b.values())
    print(f"{len(a)} vs {len(b)} runs, {bad} differences; kernel-run CPU s {cpu_a:.1f} vs {cpu_b:.1f}")
    return 1 if bad else 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", nargs="?")
    ap.add_argument("--repo", default=HERE, help="source tree to fingerprint (default: this one)")
    ap.add_argument("--only", action="append", default=[], help="glob over run names (repeatable)")
    ap.add_argument("--compare", nargs=2, metavar=("A", "B"))
    ap.add_argument("--streams", action="store_true", help="fingerprint the recorded instruction streams instead")
    args = ap.parse_args(argv)
    if args.compare:
        return compare(*args.compare)
    if not args.out:
        ap.error("give OUT.json or --compare A B")
    repo = os.path.abspath(args.repo)
    use_checkout(repo)
    out = os.path.abspath(args.out)
    results = run_all(repo, args.only, args.streams)
    tmp = out + ".tmp"
    with open(tmp, "w") as f:
        json.dump(results, f, indent=1, sort_keys=True)
    os.replace(tmp, out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
