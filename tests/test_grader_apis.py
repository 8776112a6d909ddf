"""The grader grades either NKI API: each file's imports say its API, the reports say it, a file importing both
namespaces scores 0 with a message naming both imports, each API is timed against the staff kernel of its own
API (per-API reference timings), and on Trainium kernels run through nkibench (tested with its fakes).

The staff layout these tests build (grader/staff.py): the current API's kernels at the top of the reference
directory, the legacy ones under legacy/.  They take each API's kernels from wherever this tree has them
(grader/staff.reference_file; the current-API twins in tests/kernels/reference_nki/ when the tree has no
current-API reference yet), so they hold before and after the current-API edition lands.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import warnings
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest
from grader_helpers import ROOT, check_reports
from test_nkibench import FIX, NEURON_VARS, fake_device, new_sdk  # noqa: F401 - fixtures

import nkibench
from grader import apis, staff, thresholds
from grader.problems import conv2d as conv
from grader.rubric import load_rubric

TWINS = ROOT / "tests" / "kernels" / "reference_nki"
TWIN_OF = {"part1/kernels.py": TWINS / "part1.py", "part2/conv2d.py": TWINS / "conv2d.py"}
FILES = ("part1/kernels.py", "part2/conv2d.py")

needs_legacy_reference = pytest.mark.skipif(not staff.reference_available("legacy"),
                                            reason="staff reference not shipped here")


def _source(api: str, rel: str, *, relaxed: bool = False) -> Path | None:
    """This tree's staff kernel of ``api`` (the current-API twin where the tree has none yet)."""
    found = staff.reference_file(api, rel, relaxed=relaxed)
    if found is None and api == "nki" and not relaxed:
        return TWIN_OF[rel]
    return found


def staff_tree(dest: Path) -> Path:
    """The reference directory of the current-API edition: nki kernels on top, legacy ones under legacy/."""
    for api, base in (("nki", dest), ("legacy", dest / "legacy")):
        for rel in FILES:
            for relaxed in (False, True):
                src = _source(api, rel, relaxed=relaxed)
                if src is not None:
                    target = base / "relaxed" / rel if relaxed else base / rel
                    target.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copyfile(src, target)
    return dest


def submission(dest: Path, **files: Path | str) -> Path:
    """A submission directory: part1=..., part2=... (a path to copy or source text)."""
    for key, rel in (("part1", FILES[0]), ("part2", FILES[1])):
        if key in files:
            path = dest / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            item = files[key]
            path.write_text(item.read_text() if isinstance(item, Path) else item)
    return dest


def mixed(path: Path) -> str:
    """A current-API kernel file that also imports the legacy namespace (the line a half-done port keeps)."""
    return "import neuronxcc.nki.language as legacy_nl  # left over from the port\n" + path.read_text()


# ---------------------------------------------------------------------------------------------------------------
# detection and reports
# ---------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("source", "found", "api"),
    [
        ("import nki\nimport nki.language as nl\n", "nki", "nki"),
        ("from nki import isa as nisa\n", "nki", "nki"),
        ("import neuronxcc.nki as nki\n", "legacy", "legacy"),
        ("from neuronxcc import nki\n", "legacy", "legacy"),
        ("import numpy as np\n", "none", nkibench.detect.DEFAULT_API),
        ("def broken(:\n", "none", nkibench.detect.DEFAULT_API),
    ],
)
def test_a_files_imports_say_its_api(source, found, api):
    got = apis.detect_file("part1/kernels.py", source.encode())
    assert (got.found, got.api, got.error) == (found, api, None)


IMPORT_FORMS = ["import nki", "import nki.language as nl", "from nki import isa", "from nki.language import par_dim",
                "import neuronxcc.nki as nki", "from neuronxcc import nki", "import neuronxcc.nki.isa as nisa",
                "from neuronxcc.nki.language import par_dim", "import neuronxcc", "import numpy as np",
                "from . import nki", "import nkisim", "import nki_helpers"]


@pytest.mark.parametrize("first", IMPORT_FORMS)
@pytest.mark.parametrize("second", IMPORT_FORMS)
def test_the_grader_and_the_static_screen_agree_on_a_files_api(first, second):
    """The grader's detection (nkibench.detect) and the screen's (nkisim.check, from the front-end registry) name
    the same API, and a mixed file is both the grader's rejection and the screen's NKI-MIXED-NAMESPACES."""
    import ast

    from nkisim.check import check_kernel
    from nkisim.check.analysis import namespaces_imported

    source = f"{first}\n{second}\n"
    found = apis.detect_file("k.py", source.encode()).found
    spaces = {fe.key for fe in namespaces_imported(ast.parse(source))}
    assert found == ("mixed" if len(spaces) > 1 else next(iter(spaces), "none"))
    screened = any(v.code == "NKI-MIXED-NAMESPACES" for v in check_kernel(source, filename="k.py"))
    assert screened == (found == "mixed")


def test_a_file_importing_both_namespaces_is_named_with_both_lines():
    got = apis.detect_file("part1/kernels.py", b"import nki\nimport numpy as np\nfrom neuronxcc import nki as old\n")
    assert (got.found, got.api) == ("mixed", None)
    assert "part1/kernels.py imports both the current NKI API (`import nki`, line 1)" in got.error
    assert "(`neuronxcc.nki`, line 3)" in got.error and "NKI-MIXED-NAMESPACES" in got.error
    assert got.error.splitlines()[0] == "part1/kernels.py mixes the two NKI APIs (NKI-MIXED-NAMESPACES): this file " \
                                        "scores 0"


def test_the_summary_names_each_files_api_and_what_timed_it():
    assert apis.summary({"part1/kernels.py": "nki", "part2/conv2d.py": "nki"}) == \
        "API nki (part1/kernels.py, part2/conv2d.py)"
    assert apis.summary({"part1/kernels.py": "legacy", "part2/conv2d.py": "mixed"}) == \
        "API neuronxcc.nki (legacy) (part1/kernels.py); mixed (both namespaces) (part2/conv2d.py)"
    chains = apis.toolchains({"part1/kernels.py": "nki", "part2/conv2d.py": "legacy"}, "nkisim")
    assert set(chains) == {"nki", "legacy"} and chains["nki"]["backend"] == "nkisim"
    assert apis.toolchain_summary(chains).startswith("legacy: modelled by nkisim ")
    assert apis.toolchains({"part1/kernels.py": "mixed"}, "nkisim") == {}


# ---------------------------------------------------------------------------------------------------------------
# staff kernels and reference timings per API
# ---------------------------------------------------------------------------------------------------------------
@needs_legacy_reference
def test_each_api_has_its_own_staff_kernels_in_either_layout(tmp_path, monkeypatch):
    new = staff_tree(tmp_path / "new")
    monkeypatch.setenv("GRADER_REFERENCE_DIR", str(new))
    assert staff.reference_file("nki", "part2/conv2d.py") == new / "part2" / "conv2d.py"
    assert staff.reference_file("legacy", "part2/conv2d.py") == new / "legacy" / "part2" / "conv2d.py"
    assert staff.relaxed_conv_file("legacy") == new / "legacy" / "relaxed" / "part2" / "conv2d.py"
    assert staff.available_apis() == ("nki", "legacy")
    prints = {api: staff.reference_fingerprint(api) for api in staff.APIS}
    assert None not in prints.values() and prints["nki"] != prints["legacy"]
    # before the current-API edition: the legacy kernels on top and no current-API reference
    old = tmp_path / "old"
    for rel in FILES:
        (old / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(new / "legacy" / rel, old / rel)
    monkeypatch.setenv("GRADER_REFERENCE_DIR", str(old))
    assert staff.reference_file("legacy", "part1/kernels.py") == old / "part1" / "kernels.py"
    assert staff.reference_file("nki", "part1/kernels.py") is None  # never the other API's kernel
    assert staff.available_apis() == ("legacy",) and staff.reference_fingerprint("nki") is None
    with pytest.raises(ValueError, match="unknown NKI API"):
        staff.reference_file("jax", "part1/kernels.py")


@pytest.fixture
def timing_cache(tmp_path, monkeypatch):
    cache = tmp_path / "timings.json"
    monkeypatch.setattr(thresholds, "PACKAGE_CACHE", cache)
    monkeypatch.setattr(thresholds, "user_cache_file", lambda: tmp_path / "none.json")
    monkeypatch.setenv("GRADER_REFERENCE_DIR", str(tmp_path / "no-reference"))  # the student release
    thresholds.reference_timings.cache_clear()
    yield cache
    thresholds.reference_timings.cache_clear()


KEY = conv.conv_key("float32", 224, 224, 1, "optimized")


def test_reference_timings_are_kept_per_api(timing_cache):
    for api, us in (("nki", 1010.0), ("legacy", 1000.0)):
        thresholds.write_cache_entry(timing_cache, thresholds.cache_key("nkisim", "trn2", api),
                                     thresholds.describe_entry({KEY: us}, api))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # an exact entry: no fallback, no warning
        assert thresholds.reference_timings("nkisim", "trn2", "nki") == {KEY: 1010.0}
        assert thresholds.reference_timings("nkisim", "trn2", "legacy") == {KEY: 1000.0}
        assert conv.conv_thresholds("float32", 224, 1, "nkisim", "trn2", api="nki")[1] == pytest.approx(1212)
    entries = json.loads(timing_cache.read_text())["entries"]
    assert {e["api"] for e in entries.values()} == {"nki", "legacy"}
    assert all("|trn2|" in k and k.split("|")[2] in ("nki", "legacy") for k in entries)


def test_an_api_without_timings_borrows_the_others_loudly(timing_cache):
    thresholds.write_cache_entry(timing_cache, thresholds.cache_key("nkisim", "trn2", "legacy"),
                                 thresholds.describe_entry({KEY: 1000.0}, "legacy"))
    with pytest.warns(UserWarning, match="no reference timings of the nki API's staff kernels .* timing against the "
                                         "legacy API's"):
        assert thresholds.reference_timings("nkisim", "trn2", "nki") == {KEY: 1000.0}
    with pytest.warns(UserWarning, match="published targets"):  # nothing for trn1 in either API
        assert conv.conv_thresholds("float32", 224, 1, "nkisim", "trn1", basis="reference",
                                          api="nki") == (4300.0, 4300.0)


def test_entries_from_before_the_per_api_split_are_the_legacy_apis(timing_cache):
    old_key = "nkisim|trn2|nkisim-0.0.1+000000000000"  # format 1 keys had no API: only legacy kernels existed
    thresholds.write_cache_entry(timing_cache, old_key, {"created": "2026-01-01T00:00:00Z", "timings_us": {KEY: 900.0}})
    with pytest.warns(UserWarning, match=f"using the entry for {re.escape(old_key)}$"):
        assert thresholds.reference_timings("nkisim", "trn2", "legacy") == {KEY: 900.0}
    thresholds.reference_timings.cache_clear()
    with pytest.warns(UserWarning, match="timing against the legacy API's"):
        assert thresholds.reference_timings("nkisim", "trn2", "nki") == {KEY: 900.0}


# ---------------------------------------------------------------------------------------------------------------
# Trainium: the sandboxed child runs kernels through nkibench (against nkibench's fakes)
# ---------------------------------------------------------------------------------------------------------------
def _child():
    spec = importlib.util.spec_from_file_location("grader_child_under_test", ROOT / "grader" / "child.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _calls(log: Path) -> list[dict]:
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def test_current_api_kernels_run_on_trainium_through_nki_jit_and_nrtpy(new_sdk, fake_device):  # noqa: F811
    child = _child()
    rng = np.random.default_rng(0)
    a, b = rng.random(4096, dtype=np.float32), rng.random(4096, dtype=np.float32)
    outputs, p99, hardware = child._run_neuron(new_sdk.vector_add, (a, b), {}, "full", True, "nki")
    np.testing.assert_array_equal(outputs, a + b)
    calls = _calls(fake_device)
    assert [c["call"] for c in calls] == ["nki.jit", "nrtpy.benchmark"]  # compiled once, the kept NEFF timed
    bench = calls[1]
    assert (bench["warmup_iter"], bench["benchmark_iter"], bench["mode"]) == (5, 20, "device")  # the course's
    assert p99 == max(d * 1000.0 for d in bench["durations_ms"])  # nearest-rank p99 of 20 runs, in us
    assert hardware == {"backend": "neuron-nki", "versions": {"nki": "0.6.0", "nrtpy": "2.34.10"}}
    # timing only (the correctness run was separate): no launch, just the timed NEFF
    _out, p99_again, _hw = child._run_neuron(new_sdk.vector_add, (a, b), {}, "timing", True, "nki")
    assert _out is None and p99_again > 0


def test_the_hardware_path_fails_loudly_when_nrtpy_is_missing(new_sdk, fake_device, monkeypatch):  # noqa: F811
    monkeypatch.setenv("NRTPY_PYTHON", "/nonexistent/python")
    a = np.ones(128, dtype=np.float32)
    with pytest.raises(nkibench.HardwareError, match="NRTPY_PYTHON"):
        _child()._run_neuron(new_sdk.vector_add, (a, a), {}, "timing", True, "nki")


LEGACY_TRANSPOSE = '''
import neuronxcc.nki as nki


@nki.jit
def matrix_transpose(a_tensor):
    raise AssertionError("the fake device computes this kernel by name")
'''


@pytest.fixture
def legacy_sdk(tmp_path, monkeypatch, fake_device):  # noqa: F811
    """A Trainium machine with the legacy SDK (the fake neuronx-cc 2.21 of tests/fixtures/nkibench/legacy)."""
    monkeypatch.syspath_prepend(str(FIX / "legacy"))
    for name in [m for m in sys.modules if m == "neuronxcc" or m.startswith("neuronxcc.")]:
        monkeypatch.delitem(sys.modules, name)
    importlib.invalidate_caches()
    nkibench._BACKENDS.clear()
    path = tmp_path / "legacy_kernels.py"
    path.write_text(LEGACY_TRANSPOSE)
    spec = importlib.util.spec_from_file_location("grader_test_legacy_kernels", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    yield module
    nkibench._BACKENDS.clear()
    for name in [m for m in sys.modules if m == "neuronxcc" or m.startswith("neuronxcc.")]:
        del sys.modules[name]


def test_legacy_kernels_run_on_trainium_through_baremetal_and_benchmark(legacy_sdk, fake_device):  # noqa: F811
    a = np.arange(256 * 128, dtype=np.float32).reshape(256, 128)
    outputs, p99, hardware = _child()._run_neuron(legacy_sdk.matrix_transpose, (a,), {}, "full", True, "legacy")
    np.testing.assert_array_equal(outputs, a.T)
    calls = _calls(fake_device)
    assert [(c["call"], c["kernel"]) for c in calls] == [("baremetal", "matrix_transpose"),
                                                         ("benchmark", "matrix_transpose")]
    assert calls[1]["options"] == {"warmup": 5, "iters": 20}
    assert p99 > 0 and hardware == {"backend": "neuron-legacy", "versions": {"neuronx-cc": "2.21.0.fake"}}


def test_the_reports_name_the_sdk_that_timed_each_api(legacy_sdk):
    from grader.pipeline import resolve_backend, tool_versions

    assert resolve_backend("auto") == "neuron"
    chains = apis.toolchains({"part1/kernels.py": "legacy"}, "neuron")
    assert chains == {"legacy": {"backend": "neuron-legacy", "sdk": "neuronx-cc 2.21.0.fake",
                                 "detail": chains["legacy"]["detail"]}}
    assert apis.toolchain_summary(chains) == "timed on Trainium by neuron-legacy (neuronx-cc 2.21.0.fake)"
    assert tool_versions("neuron", chains)["neuronx-cc"] == "2.21.0.fake"


def test_the_autograder_zip_ships_the_timing_layer():
    from grader.gradescope_build import _files

    shipped = {p.relative_to(ROOT).as_posix() for p in _files(ROOT)}
    assert {"nkibench/__init__.py", "nkibench/backends/nrt.py", "nkibench/nki_child.py", "grader/apis.py"} <= shipped


def test_only_the_neuron_part_of_the_environment_reaches_a_hardware_run():
    from grader.runner import NEURON_BIN, hardware_env

    env = hardware_env({"PATH": "/usr/bin", "NRTPY_PYTHON": "/venv/bin/python", "NEURON_RT_VISIBLE_CORES": "0",
                        "LD_LIBRARY_PATH": "/opt/aws/neuron/lib", "AWS_SECRET_ACCESS_KEY": "x", "HOME": "/root"})
    assert env == {"PATH": f"/usr/bin{os.pathsep}{NEURON_BIN}", "NRTPY_PYTHON": "/venv/bin/python",
                   "NEURON_RT_VISIBLE_CORES": "0", "LD_LIBRARY_PATH": "/opt/aws/neuron/lib"}


# ---------------------------------------------------------------------------------------------------------------
# end to end on nkisim, through the CLI
# ---------------------------------------------------------------------------------------------------------------
def _grade(sub: Path, out: Path, reference: Path, *extra: str) -> dict:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "GRADER_REFERENCE_DIR": str(reference)}
    proc = subprocess.run([sys.executable, "-m", "grader", "grade", str(sub), "--out", str(out), *extra], env=env,
                          capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    record = json.loads((out / "result.json").read_text())
    record["_stdout"] = proc.stdout
    return record


def _says_api(out: Path, phrase: str) -> None:
    """Every report format states the APIs: console table (result's stdout), summary.md, results.json, junit."""
    assert phrase in (out / "summary.md").read_text()
    results = json.loads((out / "results.json").read_text())
    assert phrase in results["output"]
    props = {p.get("name"): p.get("value") for p in ET.parse(out / "junit.xml").getroot().iter("property")}
    assert phrase in props["api"]


@needs_legacy_reference
@pytest.mark.slow
@pytest.mark.parametrize("api", ["nki", "legacy"])
def test_the_staff_kernels_of_either_api_earn_every_point(tmp_path, api):
    reference = staff_tree(tmp_path / "reference")
    sub = reference if api == "nki" else reference / "legacy"
    out = tmp_path / "out"
    record = _grade(sub, out, reference)
    rubric = load_rubric()
    results = check_reports(out, rubric.total_points)
    assert record["score"] == rubric.total_points, [(t["id"], t["message"]) for t in record["tests"]]
    assert record["apis"] == {"part1/kernels.py": api, "part2/conv2d.py": api}
    assert set(record["toolchains"]) == {api} and record["toolchains"][api]["backend"] == "nkisim"
    phrase = f"API {apis.label(api)} (part1/kernels.py, part2/conv2d.py)"
    _says_api(out, phrase)
    assert phrase in record["_stdout"]
    assert results["extra_data"]["apis"] == record["apis"]


@needs_legacy_reference
@pytest.mark.slow
def test_a_mixed_file_scores_zero_and_the_other_file_is_graded(tmp_path):
    reference = staff_tree(tmp_path / "reference")
    only = "part1.transpose,part1.transpose_ec,part2.small"
    sub = submission(tmp_path / "sub", part1=mixed(reference / "part1" / "kernels.py"),
                     part2=reference / "legacy" / "part2" / "conv2d.py")
    out = tmp_path / "out"
    record = _grade(sub, out, reference, "--only", only)
    tests = {t["id"]: t for t in record["tests"]}
    assert tests["part1.transpose"]["status"] == "rejected" and tests["part1.transpose"]["score"] == 0
    first, second = tests["part1.transpose"]["message"].split("\n", 1)
    assert first == "part1/kernels.py mixes the two NKI APIs (NKI-MIXED-NAMESPACES): this file scores 0"
    assert re.match(r"part1/kernels.py imports both the current NKI API \(`import nki`, line \d+\) and the legacy "
                    r"one \(`neuronxcc.nki`, line 1\)", second)
    assert tests["part1.transpose_ec"]["status"] == "rejected"
    assert tests["part2.small"]["status"] == "passed"  # the legacy part 2 is graded as usual
    assert record["status"] == "graded" and record["apis"] == {"part1/kernels.py": "mixed",
                                                               "part2/conv2d.py": "legacy"}
    _says_api(out, "API mixed (both namespaces) (part1/kernels.py); neuronxcc.nki (legacy) (part2/conv2d.py)")


@needs_legacy_reference
@pytest.mark.slow
def test_part1_and_part2_may_use_different_apis(tmp_path):
    reference = staff_tree(tmp_path / "reference")
    only = "part1.transpose,part1.transpose_ec,part2.small"
    sub = submission(tmp_path / "sub", part1=reference / "legacy" / "part1" / "kernels.py",
                     part2=reference / "part2" / "conv2d.py")
    record = _grade(sub, tmp_path / "out", reference, "--only", only)
    assert record["score"] == load_rubric().select(only.split(",")).total_points, record["tests"]
    assert record["apis"] == {"part1/kernels.py": "legacy", "part2/conv2d.py": "nki"}
    assert set(record["toolchains"]) == {"legacy", "nki"}
    assert "legacy: modelled by nkisim" in record["_stdout"] and "nki: modelled by nkisim" in record["_stdout"]


NKI_ADD = '''
import nki


@nki.jit
def vector_add(a_input, b_input):
    return a_input + b_input
'''


def _run_child(tmp: Path, env: dict[str, str], source: str, function: str, args: tuple, api: str) -> dict:
    """grader/child.py's whole job on (fake) Trainium, without the sandbox around it: the student's file imported
    with the child's restrictions, the kernel run and timed, outputs and status.json written."""
    work, out = tmp / "work", tmp / "out"
    work.mkdir()
    out.mkdir()
    (work / "kernels.py").write_text(source)
    inputs = []
    for i, a in enumerate(args):
        np.save(work / f"arg{i}.npy", a)
        inputs.append(str(work / f"arg{i}.npy"))
    job = {"backend": "neuron", "target": "trn2", "api": api, "inputs": inputs, "kwargs": {},
           "module_path": str(work / "kernels.py"), "module_name": "kernels", "work_dir": str(work),
           "out_dir": str(out), "sys_path": [], "jail": False, "mode": "full", "want_trace": True,
           "function": function}
    proc = subprocess.run([sys.executable, "-B", str(ROOT / "grader" / "child.py")], input=json.dumps(job).encode(),
                          env=env, cwd=work, capture_output=True, timeout=300)
    assert proc.returncode == 0, proc.stderr.decode()
    status = json.loads((out / "status.json").read_text())
    status["outputs"] = [np.load(p) for p in sorted(out.glob("output_*.npy"))]
    return status


def test_the_child_times_a_current_api_kernel_on_trainium(new_sdk, fake_device, tmp_path):  # noqa: F811
    a, b = np.arange(512, dtype=np.float32), np.ones(512, dtype=np.float32)
    status = _run_child(tmp_path, dict(os.environ), NKI_ADD, "vector_add", (a, b), "nki")
    assert status["ok"], status.get("traceback")
    np.testing.assert_array_equal(status["outputs"][0], a + b)
    assert status["hardware"]["backend"] == "neuron-nki" and status["hardware_p99_us"] > 0
    assert [c["call"] for c in _calls(fake_device)] == ["nki.jit", "nrtpy.benchmark"]


def test_the_child_times_a_legacy_kernel_on_trainium(fake_device, tmp_path):  # noqa: F811
    env = {k: v for k, v in os.environ.items() if k not in NEURON_VARS}
    env["PYTHONPATH"] = os.pathsep.join([str(FIX / "legacy"), str(ROOT)])
    a = np.arange(256 * 128, dtype=np.float32).reshape(256, 128)
    status = _run_child(tmp_path, env, LEGACY_TRANSPOSE, "matrix_transpose", (a,), "legacy")
    assert status["ok"], status.get("traceback")
    np.testing.assert_array_equal(status["outputs"][0], a.T)
    assert status["hardware"] == {"backend": "neuron-legacy", "versions": {"neuronx-cc": "2.21.0.fake"}}
    assert [c["call"] for c in _calls(fake_device)] == ["baremetal", "benchmark"]


def test_the_child_reports_a_missing_hardware_step_as_the_runs_error(fake_device, tmp_path):  # noqa: F811
    env = {k: v for k, v in os.environ.items() if k not in NEURON_VARS}
    env["PYTHONPATH"] = os.pathsep.join([str(FIX / "legacy"), str(ROOT)])
    env["FAKE_LEGACY_P99"] = "0"  # the benchmark reports a zero: nothing was timed
    a = np.ones((128, 128), dtype=np.float32)
    status = _run_child(tmp_path, env, LEGACY_TRANSPOSE, "matrix_transpose", (a,), "legacy")
    assert not status["ok"] and "hardware_p99_us" not in status
    assert status["error_type"] == "HardwareError" and "nothing was timed" in status["error"]


# ---------------------------------------------------------------------------------------------------------------
# the whole grading on (fake) Trainium: pipeline -> sandboxed child -> nkibench -> the fake SDK
# ---------------------------------------------------------------------------------------------------------------
NKI_TRANSPOSE = '''
import nki


@nki.jit
def matrix_transpose(a_tensor):
    return a_tensor.T.copy()  # the fake nki runs the body on NumPy arrays
'''


@pytest.fixture
def fake_trainium_sandbox(monkeypatch, fake_device, tmp_path):  # noqa: F811
    """The sandbox as on a Trainium host whose SDK sits on PYTHONPATH (the fakes): the child without ``-I`` so it
    sees them, the fake device's variables passed on, no namespaces or uid change (the fake device's files are
    the test's).  Everything else -- the pipeline, runner, child, nkibench and the reports -- is the real one."""
    from grader import runner, sandbox

    monkeypatch.setenv("GRADER_NO_NAMESPACES", "1")
    monkeypatch.setenv("GRADER_SANDBOX_USER", "no-such-user-asst4")
    sandbox.detect_isolation.cache_clear()
    original = runner.run_sandboxed

    def run(argv, **kw):
        extra = {k: os.environ[k] for k in ("PYTHONPATH", "FAKE_NEURON_DEVICE", "FAKE_NEURON_LOG")}
        return original([a for a in argv if a != "-I"], **{**kw, "env_extra": {**kw["env_extra"], **extra}})

    monkeypatch.setattr(runner, "run_sandboxed", run)
    yield
    sandbox.detect_isolation.cache_clear()


def _grade_on_hardware(sub: Path, out: Path):
    from grader.pipeline import grade_submission
    from grader.records import GradeConfig

    return grade_submission(sub, out, GradeConfig(backend="neuron", only=("part1.*",)))


@pytest.mark.slow
def test_a_legacy_submission_is_graded_on_legacy_trainium(legacy_sdk, fake_trainium_sandbox, fake_device,  # noqa: F811
                                                          tmp_path, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(FIX / "legacy"), str(ROOT)]))
    record = _grade_on_hardware(submission(tmp_path / "sub", part1=LEGACY_TRANSPOSE), tmp_path / "out")
    tests = {t.id: t for t in record.tests}
    assert record.status == "graded" and record.backend == "neuron", record.error
    assert tests["part1.transpose"].status == "passed", tests["part1.transpose"].message  # 3 cases, on the device
    ec = tests["part1.transpose_ec"]
    p99 = 1.02 * (2.0 + 4096 * 4096 * 4 / 65536)  # the fake device's nki.benchmark p99 for 64 MiB in
    assert ec.latency_us == pytest.approx(p99) and ec.status == "failed"
    assert ec.message.startswith(f"p99 latency {p99:.1f} us is above the target 700.0 us")  # the published one
    benchmarks = [c for c in _calls(fake_device) if c["call"] == "benchmark"]
    assert [c["options"] for c in benchmarks] == [{"warmup": 5, "iters": 20}]
    assert record.toolchains["legacy"]["sdk"] == "neuronx-cc 2.21.0.fake"
    assert record.versions["neuronx-cc"] == "2.21.0.fake"
    _says_api(tmp_path / "out", "API neuronxcc.nki (legacy) (part1/kernels.py), timed on Trainium by neuron-legacy "
                                "(neuronx-cc 2.21.0.fake)")


@pytest.mark.slow
def test_a_current_api_submission_is_graded_on_current_trainium(new_sdk, fake_trainium_sandbox,  # noqa: F811
                                                                fake_device, tmp_path):  # noqa: F811
    record = _grade_on_hardware(submission(tmp_path / "sub", part1=NKI_TRANSPOSE), tmp_path / "out")
    tests = {t.id: t for t in record.tests}
    assert record.status == "graded" and record.backend == "neuron", record.error
    assert tests["part1.transpose"].status == "passed", tests["part1.transpose"].message
    bench = [c for c in _calls(fake_device) if c["call"] == "nrtpy.benchmark"]
    assert len(bench) == 1 and (bench[0]["warmup_iter"], bench[0]["benchmark_iter"]) == (5, 20)
    assert tests["part1.transpose_ec"].latency_us == max(d * 1000.0 for d in bench[0]["durations_ms"])
    assert record.toolchains["nki"]["sdk"] == "nki 0.6.0" and record.versions["nki"] == "0.6.0"
    _says_api(tmp_path / "out", "API nki (part1/kernels.py), timed on Trainium by neuron-nki (nki 0.6.0)")


def test_hardware_without_the_files_sdk_is_an_autograder_error(legacy_sdk, tmp_path):
    """A current-API file on a machine with only the legacy SDK: not the student's fault, never a score."""
    from grader.pipeline import grade_loaded
    from grader.records import GradeConfig
    from grader.submission import load_submission

    sub = submission(tmp_path / "sub", part1=NKI_TRANSPOSE)
    if nkibench.detect.nki_toolchain().kind == "neuron":
        pytest.skip("a real nki package is installed here")
    record = grade_loaded(load_submission(sub), GradeConfig(backend="neuron", only=("part1.*",)))
    assert record.status == "error"
    message = {t.id: t for t in record.tests}["part1.transpose"].message
    assert message.startswith("autograder error (not your fault): this machine cannot run nki API kernels on "
                              "Trainium")
