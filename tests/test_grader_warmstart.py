"""Warm kernel servers started as ``python -m grader grade`` starts (grader/warmstart.py): before the process imports
NumPy, adopted by the grading only when they were started for its API, target, limits and temporary directory, and
never left running after the grading, whether it used them or not."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from grader_helpers import FAST_RUBRIC, GOOD, ROOT

from grader import cli, warmstart
from grader.rubric import Limits, load_limits, load_rubric
from grader.runner import KernelServers


def test_the_early_path_imports_no_numpy():
    """What cmd_grade runs before it imports the grader (the CLI, the rubric's limits, the submission and its APIs,
    the server's start) loads no NumPy: the server's start would otherwise queue behind the grader's imports."""
    code = ("import sys, grader.cli, grader.warmstart, grader.apis, grader.submission, grader.rubric; "
            "print(json.dumps(sorted(m for m in sys.modules if m == 'numpy' or m.startswith('numpy.'))))")
    out = subprocess.run([sys.executable, "-c", "import json; " + code], capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": str(ROOT)}, cwd=ROOT)
    assert json.loads(out.stdout) == []


def test_the_rubric_limits_alone_are_the_rubrics():
    assert load_limits(FAST_RUBRIC) == load_rubric(FAST_RUBRIC).limits
    assert load_limits() == load_rubric().limits


def test_a_grading_adopts_the_early_server_of_its_api_only(tmp_path):
    """The server early() started is the one KernelServers uses (counted as this grading's start); one started for
    other limits is not taken, and discard() closes it."""
    limits = load_rubric(FAST_RUBRIC).limits
    other = Limits(**{**limits.__dict__, "open_files": limits.open_files + 1})
    warmstart.early(["nki"], target="trn2", limits=limits, tmp_root=str(tmp_path))
    warmstart.early(["legacy"], target="trn2", limits=other, tmp_root=str(tmp_path))
    with warmstart._LOCK:
        legacy = warmstart._EARLY[warmstart._key("legacy", "trn2", other, str(tmp_path))]
        nki = warmstart._EARLY[warmstart._key("nki", "trn2", limits, str(tmp_path))]
    early_nki = nki.result(timeout=120)
    servers = KernelServers(target="trn2", limits=limits, tmp_root=str(tmp_path))
    try:
        assert servers.acquire("nki") is early_nki and servers.started == 1
        item = servers.acquire("legacy")  # the early legacy server has other limits: a new one
        assert item is not None and item is not legacy.result(timeout=120) and servers.started == 2
        assert item[1].limits == limits
    finally:
        servers.close()
    assert not early_nki[1].alive and legacy.result()[1].proc.poll() is not None  # closed, the unused one too
    assert not warmstart._EARLY and not list(tmp_path.iterdir())


@pytest.mark.parametrize("rejected", [False, True])
def test_the_cli_starts_the_servers_first_and_leaves_none(tmp_path, monkeypatch, rejected):
    """`grade` starts the submission's server before the grading (a screen-rejected submission's too, as the
    grading's own prestart does) and no server outlives the command: the grading takes it, or discard() closes it."""
    sub = tmp_path / "sub"
    (sub / "part1").mkdir(parents=True)
    kernels = (GOOD / "part1" / "kernels.py").read_text()
    if rejected:  # the static screen stops the file before any student code runs
        kernels = "import os\n" + kernels + "\nos.system('true')\n"
    (sub / "part1" / "kernels.py").write_text(kernels)
    started: list[tuple] = []
    real = warmstart.start_server

    def start_server(api, **kw):
        item = real(api, **kw)
        started.append(item)
        return item

    monkeypatch.setattr(warmstart, "start_server", start_server)
    taken: list = []
    real_take = warmstart.take
    monkeypatch.setattr(warmstart, "take", lambda api, **kw: taken.append(real_take(api, **kw)) or taken[-1])
    out = tmp_path / "out"
    assert cli.main(["grade", str(sub), "--rubric", FAST_RUBRIC, "--only", "part1.transpose", "--out",
                     str(out), "--quiet"]) == 0
    assert started, "no server started early"
    first = started[0]
    assert all(item[1].proc.poll() is not None for item in started)  # none left running
    assert not warmstart._EARLY
    result = json.loads((out / "result.json").read_text())
    status = result["tests"][0]["status"]
    if rejected:
        assert status != "passed" and "static screen" in result["tests"][0]["message"]
    else:
        assert status == "passed", result["tests"][0]["message"]
        assert taken and taken[0] is first  # the grading's calls ran on the early server
        assert result["timings"]["processes:started"] == 1.0


def test_whatever_fails_on_the_early_path_leaves_the_grading_to_report_it(tmp_path, monkeypatch):
    """The early start reads the submission and the rubric before the grading does; an error of any kind there (here
    a RuntimeError from reading the submission, and a server whose start raised) starts no server and raises
    nothing: the grading meets the problem again and reports it as it always did."""
    import grader.submission as submission

    def broken(*args, **kwargs):
        raise RuntimeError("an unreadable submission")

    monkeypatch.setattr(submission, "load_submission", broken)
    args = cli.build_parser().parse_args(["grade", str(GOOD), "--rubric", FAST_RUBRIC, "--out", str(tmp_path)])
    cli._early_servers(args, cli._config(args))
    assert not warmstart._EARLY

    def failing_start(api, **kw):
        raise RuntimeError("the server could not start")

    monkeypatch.setattr(warmstart, "start_server", failing_start)
    limits = load_limits(FAST_RUBRIC)
    warmstart.early(["nki"], target="trn2", limits=limits, tmp_root=str(tmp_path))
    assert warmstart.take("nki", target="trn2", limits=limits, tmp_root=str(tmp_path)) is None
    assert not warmstart._EARLY
