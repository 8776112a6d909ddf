"""The HTML profile's content without a browser: lanes, summary fields, source pane, banner, command line.

What the page does in a browser (drawing, hover, zoom, no network) is in test_html_profile_browser.py.
"""

from __future__ import annotations

import html
import re
import sys
from pathlib import Path

import numpy as np
import pytest

from nkisim.measure import profile_run
from nkisim.perf.html_profile import ProfileData, model_version, render_page, write_html
from nkisim.perf.perfetto import trace_events
from nkisim.perf.summary import format_summary
from nkisim.perf.timeline import CRITICAL_LANE, build_timeline

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "kernels"))

import matmul_tutorial  # noqa: E402
import vector_add_2025  # noqa: E402

MATMUL_FILE = REPO / "tests" / "kernels" / "matmul_tutorial.py"


@pytest.fixture(scope="module")
def matmul() -> ProfileData:
    rng = np.random.default_rng(0)
    a = rng.random((256, 128), dtype=np.float32).astype(np.float16)
    b = rng.random((256, 1024), dtype=np.float32).astype(np.float16)
    return profile_run(matmul_tutorial.matmul_tiled_nisa, (a, b), title="matmul")


@pytest.fixture(scope="module")
def vadd() -> ProfileData:
    a = np.ones(512, dtype=np.float32)
    return profile_run(vector_add_2025.vector_add_tiled, (a, a), {"row_chunk": 128}, title="vadd")


def test_timeline_has_the_perfetto_intervals_and_the_critical_path(matmul):
    instrs = list(matmul.trace.instrs)
    tl = build_timeline(instrs, matmul.report)
    x_events = [e for e in trace_events(instrs, matmul.report) if e.get("ph") == "X"]
    crit = tl.lanes.index(CRITICAL_LANE)
    assert len(tl) - int(np.sum(tl.lane == crit)) == len(x_events)
    assert int(np.sum(tl.lane == crit)) == len(matmul.report.critical_path) > 0
    for lane in ("TensorE", "VectorE", "ScalarE", "GpSimdE", "qDMA0", "qDMA15"):
        assert lane in tl.lanes
    # sorted by (lane, start) as the page's binary search needs; every interval inside [0, end]
    key = tl.lane.astype(np.float64) * 1e12 + tl.start
    assert np.all(np.diff(key) >= 0)
    assert np.all(tl.end >= tl.start) and tl.end.max() <= tl.end_us
    mm = [i for i in instrs if i.op == "nc_matmul"]
    te = tl.lanes.index("TensorE")
    on_te = tl.seq[tl.lane == te]
    assert {i.seq for i in mm} <= set(on_te.tolist())
    i0 = int(np.flatnonzero(tl.seq == mm[0].seq)[0])
    assert tl.wheres[tl.where[i0]] == mm[0].where
    assert "in: sbuf float16[128,128]" in tl.operand_texts[tl.operands[i0]]


@pytest.mark.slow
def test_summary_panel_shows_every_field_of_the_text_summary(matmul):
    page = render_page([matmul])
    text = format_summary(matmul.report)
    lines = [ln for ln in text.splitlines()[2:] if ln and not ln.startswith(" ") and not ln.endswith(":")]
    assert len(lines) > 20
    for ln in lines:
        key, value = ln.split(None, 1)
        assert f"<td>{key}</td>" in page, key
        assert f">{html.escape(value)}</td>" in page, (key, value)
    for ln in text.splitlines():
        if ln.startswith("  "):
            where, op, count, _ = ln.split(None, 3)
            assert f"<td>{where}</td><td>{op}</td><td>{count}</td>" in page


def test_banner_says_it_is_a_model_estimate(matmul):
    page = render_page([matmul])
    banner = page[page.index('id="nk-banner"'):]
    banner = banner[: banner.index("</div>")]
    assert "Model estimate, not a hardware measurement" in banner
    assert "target trn2" in banner and html.escape(model_version()) in banner and "nkisim performance model" in banner


def test_page_references_nothing_outside_itself(matmul):
    page = render_page([matmul])
    assert not re.search(r"<script[^>]*\bsrc=", page)
    assert not re.search(r"<link\b", page)
    assert not re.search(r"@import|url\(\s*['\"]?(https?:)?//", page)
    assert "BokehJS" in page or "Bokeh" in page  # the library is inlined, not fetched


def test_source_pane_holds_the_kernel_and_marks_issuing_lines(matmul):
    page = render_page([matmul])
    src = MATMUL_FILE.read_text().splitlines()
    mm = next(i for i in matmul.trace.instrs if i.op == "nc_matmul")
    name, line = mm.where.rsplit(":", 1)
    assert name == "matmul_tutorial.py" and "nc_matmul" in src[int(line) - 1]
    m = re.search(rf'<span class="ln issued" id="L:0:{re.escape(mm.where)}"><span class="no">{line}</span>([^<]*)',
                  page)
    assert m is not None and "nc_matmul" in html.unescape(m.group(1))


def test_source_note_replaces_the_source_pane(matmul):
    from dataclasses import replace

    page = render_page([replace(matmul, sources={}, source_note="source left out on purpose")])
    assert "source left out on purpose" in page and 'class="ln' not in page


def test_compare_page_has_both_runs_and_a_ratio_column(matmul, vadd):
    page = render_page([matmul, vadd])
    assert "A (before): matmul" in page and "B (after): vadd" in page and "<th>B / A</th>" in page
    ta, tb = matmul.report.total_us, vadd.report.total_us
    assert f"{tb / ta:.3g}x" in page
    with pytest.raises(ValueError, match="two to compare"):
        render_page([matmul, vadd, matmul])


def test_write_html_is_atomic_and_complete(tmp_path, vadd):
    out = tmp_path / "p.html"
    write_html([vadd], out)
    text = out.read_text(encoding="utf-8")
    assert text.rstrip().endswith("</html>")
    assert [p.name for p in tmp_path.iterdir()] == ["p.html"]


def _run_cli(args, cwd):
    import subprocess

    return subprocess.run([sys.executable, "-m", "nkisim.profile", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=300)


@pytest.mark.slow
def test_cli_html_from_profile_files_single_and_compare(tmp_path):
    import shutil

    import nkisim.frontends.legacy.nki as nki

    shutil.copy(MATMUL_FILE, tmp_path / "matmul_tutorial.py")
    rng = np.random.default_rng(1)
    a = rng.random((256, 128), dtype=np.float32).astype(np.float16)
    b = rng.random((256, 512), dtype=np.float32).astype(np.float16)
    for name in ("one", "two"):
        bench = nki.benchmark(warmup=1, iters=1, save_neff_name=str(tmp_path / f"{name}.neff"))(
            matmul_tutorial.matmul_tiled_nisa)
        bench(a, b)
    proc = _run_cli(["html", "one.neff"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    page = (tmp_path / "one.html").read_text(encoding="utf-8")
    assert 'class="ln issued"' in page and "one.neff" in page
    proc = _run_cli(["html", "one.neff", "two.neff", "-o", "diff.html"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "B (after): two.neff" in (tmp_path / "diff.html").read_text(encoding="utf-8")
    proc = _run_cli(["html", "one.neff", "two.neff"], tmp_path)
    assert proc.returncode == 2 and "needs -o" in proc.stderr
    proc = _run_cli(["html", "one.neff", "two.neff", "one.neff", "-o", "x.html"], tmp_path)
    assert proc.returncode == 2 and "one profile, or two" in proc.stderr
    (tmp_path / "one.summary.txt").write_text(format_summary_of(tmp_path / "one.neff"))
    proc = _run_cli(["html", "one.summary.txt"], tmp_path)
    assert proc.returncode == 2 and "holds no instruction trace" in proc.stderr
    proc = _run_cli(["html", "missing.neff"], tmp_path)
    assert proc.returncode == 2 and "missing.neff" in proc.stderr


def format_summary_of(neff: Path) -> str:
    import json

    return json.loads(neff.read_text())["summary_text"]


@pytest.mark.skipif(not (REPO / "grader" / "reference" / "legacy" / "part2" / "conv2d.py").exists(),
                    reason="needs the staff reference kernel (not in the student release)")
def test_part2_harness_writes_the_page_beside_the_profile(tmp_path):
    """The legacy edition's reference: its profiles are DGE-off runs, with the ordinary latency beside them."""
    sys.path.insert(0, str(REPO / "part2"))
    import test_harness as harness

    kernel = harness.load_kernel(REPO / "grader" / "reference" / "legacy" / "part2" / "conv2d.py")
    case = harness.ConvCase(1, 256, 256, 32, 16, dtype="float16")
    stem = str(tmp_path / "conv")
    measured = harness.measure_latency(kernel, case, harness.InputBank(1), stem)
    page = (tmp_path / "conv.html").read_text(encoding="utf-8")
    # the Perfetto trace only when asked (it is the large file): neff + summary + page by default
    assert {p.name for p in tmp_path.iterdir()} == {"conv.neff", "conv.summary.txt", "conv.html"}
    # the page is the profile run's (DGE off): its nc_latency row, and the banner naming the ordinary latency
    profiled = measured.profiled.p99_us
    assert f">{round(profiled, 3)} us<" in page  # nc_latency row of the summary panel, as the text summary prints it
    assert f"an ordinary run of this kernel takes {measured.timing.p99_us:.2f} us (nc_latency)" in page
    assert re.search(r'class="ln issued" id="L:0:conv2d\.py:\d+"><span class="no">\d+</span>[^<]*nc_matmul', page)


_ADD_KERNEL = '''import nki
import nki.isa as nisa
import nki.language as nl


@nki.jit
def add(a, b):
    # VERSION {version}
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    ta = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
    tb = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=ta, src=a)
    nisa.dma_copy(dst=tb, src=b)
    for _ in range({repeats}):
        nisa.tensor_tensor(dst=ta, data1=ta, data2=tb, op=nl.add)
    nisa.dma_copy(dst=out, src=ta)
    return out
'''


def _profile_version(tmp_path: Path, version: str, repeats: int) -> Path:
    """Profiles a kernel file named conv2d.py (same name for both versions, as a student's) and then changes the
    file: the profile must keep the code it ran."""
    import importlib.util

    import nkibench

    src_dir = tmp_path / f"src_{version}"
    src_dir.mkdir()
    path = src_dir / "conv2d.py"
    path.write_text(_ADD_KERNEL.format(version=version, repeats=repeats))
    spec = importlib.util.spec_from_file_location(f"_profiled_{version}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    a = np.ones((128, 64), np.float32)
    stem = tmp_path / f"prof_{version}"
    nkibench.measure(module.add, (a, a), warmup=0, iterations=1, profile=nkibench.ProfileRequest(str(stem)))
    path.write_text("# edited after profiling\n")
    return stem.with_suffix(".neff")


def test_compare_page_shows_each_run_source_as_profiled_from_any_directory(tmp_path, monkeypatch):
    """Two versions of one file name, each changed after its profile, the compare page made from a third
    directory: each pane shows the source its run executed, with that run's lines marked as issued."""
    from nkisim import profile as profile_cli
    from nkisim.perf.profile_files import read_profile_sources

    before = _profile_version(tmp_path, "one", 1)
    after = _profile_version(tmp_path, "two", 3)
    assert "# VERSION one" in read_profile_sources(str(before))["conv2d.py"]
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "conv2d.py").write_text("# VERSION today, not profiled\n")  # found by name: must not be shown
    monkeypatch.chdir(elsewhere)
    assert profile_cli.main(["html", str(before), str(after), "-o", "cmp.html"]) == 0
    page = (elsewhere / "cmp.html").read_text(encoding="utf-8")
    panes = page.split('class="nk-src" id="nk-src-')[1:]
    assert len(panes) == 2
    assert "# VERSION one" in panes[0] and "# VERSION two" in panes[1]
    assert "VERSION today" not in page and "today&#x27;s file" not in page
    for k, pane in enumerate(panes):  # the loop line issued the adds in both
        assert re.search(rf'class="ln issued" id="L:{k}:conv2d\.py:\d+"><span class="no">\d+</span>\s*nisa\.'
                         r"tensor_tensor", pane), k


def test_a_profile_without_stored_source_says_the_page_shows_todays_file(tmp_path, monkeypatch):
    import json

    from nkisim import profile as profile_cli

    neff = _profile_version(tmp_path, "old", 1)
    doc = json.loads(neff.read_text())
    del doc["sources"]  # as written before profiles stored their source
    neff.write_text(json.dumps(doc))
    (tmp_path / "conv2d.py").write_text("# VERSION today\n")
    monkeypatch.chdir(tmp_path)
    assert profile_cli.main(["html", str(neff), "-o", "one.html"]) == 0
    page = (tmp_path / "one.html").read_text(encoding="utf-8")
    assert "# VERSION today" in page
    assert "conv2d.py: today&#x27;s file (found by name), not necessarily the version profiled" in page
