"""Device profiles of a NEFF with the current profiler's documented capture command.

Neuron Explorer replaced Neuron Profiler from SDK 2.29/2.30 (about-neuron/announcements/neuron2.x/
announce-no-longer-support-neuron-profiler.rst); "``neuron-explorer capture`` replaces the deprecated
``neuron-profile capture`` command. The interface is identical" (tools/neuron-explorer/
how-to-profile-workload.rst, "CLI profiling with neuron-explorer capture").  The command is the NKI guide's
(nki/guides/use-neuron-profile.rst, Step 3):

    neuron-explorer capture -n NAME.neff -s NAME.ntff --profile-nth-exec=2 --enable-dge-notifs IN1 x.npy ...

``--profile-nth-exec=2`` profiles the second execution ("to avoid one-time warmup delays") and names the trace
``NAME_exec_2.ntff``; ``--enable-dge-notifs`` records DGE DMAs but "may overflow the status notification queue and
cause execution timeouts when there are many DGE instructions" (same page), so a capture that fails with it is
retried once without it, and the result says so.  Inputs go as ``NAME FILE.npy`` pairs ("To profile with
representative inputs", how-to-profile-workload.rst), otherwise the tool zero-fills them.
"""

from __future__ import annotations

import glob
import os
import re
import subprocess
from collections.abc import Mapping

from nkibench.detect import which
from nkibench.errors import ProfileError

PROFILERS = ("neuron-explorer", "neuron-profile")  # the second only on SDKs before 2.30 (identical interface)
NTH_EXEC = 2
CAPTURE_TIMEOUT_S = 900


def find_profiler() -> str | None:
    for name in PROFILERS:
        found = which(name)
        if found:
            return found
    return None


def _trace_written(stem: str) -> str | None:
    candidates = [f"{stem}.ntff"] + sorted(
        glob.glob(glob.escape(stem) + "_exec_*.ntff"),
        key=lambda p: int(m.group(1)) if (m := re.search(r"_exec_(\d+)\.ntff$", p)) else -1)
    found = [p for p in candidates if os.path.isfile(p) and os.path.getsize(p) > 0]
    return found[-1] if found else None


def capture(neff: str, stem: str, inputs: Mapping[str, str], env: Mapping[str, str] | None = None) -> tuple[str, str]:
    """Profile ``neff`` into ``STEM.ntff``; returns (path, note).  ProfileError when nothing usable is written."""
    tool = find_profiler()
    if tool is None:
        raise ProfileError(
            "neither neuron-explorer nor neuron-profile is installed (looked on PATH and in /opt/aws/neuron/bin)",
            step="profiling", hint="install aws-neuronx-tools (preinstalled on the Neuron DLAMI): "
                                   "sudo apt-get install aws-neuronx-tools")
    for stale in [f"{stem}.ntff", *glob.glob(glob.escape(stem) + "_exec_*.ntff")]:
        if os.path.exists(stale):
            os.remove(stale)
    pairs = [x for name, path in inputs.items() for x in (name, path)]
    base = [tool, "capture", "-n", neff, "-s", f"{stem}.ntff", f"--profile-nth-exec={NTH_EXEC}"]
    note = ""
    failure = ""
    for extra in (["--enable-dge-notifs"], []):
        try:
            proc = subprocess.run([*base, *extra, *pairs], env=dict(env) if env is not None else None,
                                  capture_output=True, text=True, timeout=CAPTURE_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            failure = f"{os.path.basename(tool)} capture did not finish in {CAPTURE_TIMEOUT_S} s"
            continue
        trace = _trace_written(stem)
        if proc.returncode == 0 and trace is not None:
            if trace != f"{stem}.ntff":
                os.replace(trace, f"{stem}.ntff")
            if not extra:
                note = (f"DGE DMA events are not in this profile: the capture with --enable-dge-notifs failed "
                        f"({failure}), a known issue when a kernel issues many DGE DMAs, so it was captured without")
            return os.path.abspath(f"{stem}.ntff"), note
        tail = (proc.stderr or proc.stdout or "").strip().splitlines()[-3:]
        failure = (f"exit status {proc.returncode}" if proc.returncode else "no non-empty trace written") + (
            f": {' | '.join(tail)}" if tail else "")
    raise ProfileError(f"{os.path.basename(tool)} capture of {neff} wrote no profile ({failure})", step="profiling",
                       hint="an empty trace means no execution was captured; check that no other process holds "
                            "the NeuronCore (Neuron Explorer troubleshooting)")
