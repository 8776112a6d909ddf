"""Checks the Neuron environment variables before anything runs on a NeuronCore, so a misconfiguration is
named up front instead of surfacing as an opaque runtime error (or, worse, as a skewed timing).

Sources: the runtime's configuration guide (aws-neuron-sdk neuron-runtime/guides/configuration-guide.rst,
"Environment variables": NEURON_RT_VISIBLE_CORES is an index or inclusive range, NEURON_RT_NUM_CORES and
NEURON_RT_EXEC_TIMEOUT integers); nki.jit's docstring (nki/api/nki/__init__.py: NEURON_PLATFORM_TARGET_OVERRIDE
values, NEURON_LOGICAL_NC_CONFIG 1 or 2, default 1); Neuron Explorer's capture guide
(tools/neuron-explorer/how-to-profile-workload.rst, "Environment variable profiling": NEURON_RT_INSPECT_ENABLE=1
profiles the whole lifetime of the process).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

from nkibench.errors import HardwareError

TARGETS = {"trn1": "trn1", "inf2": "trn1", "gen2": "trn1", "trn2": "trn2", "gen3": "trn2", "trn3": "trn3",
           "gen4": "trn3"}
_CORES = re.compile(r"^\d+(-\d+)?(,\d+(-\d+)?)*$")


def _fail(var: str, value: str, why: str, fix: str) -> HardwareError:
    return HardwareError(f"{var}={value!r}: {why}", step="checking the Neuron environment", hint=fix)


def check_runtime_env(env: Mapping[str, str] | None = None, *, api: str = "nki") -> None:
    """Raise HardwareError naming the first variable that would make the hardware run fail or mis-time."""
    env = os.environ if env is None else env
    cores = env.get("NEURON_RT_VISIBLE_CORES")
    if cores is not None:
        spec = cores.replace(" ", "")
        if not _CORES.fullmatch(spec) or any(
            int(lo) > int(hi) for lo, hi in (r.split("-") for r in spec.split(",") if "-" in r)
        ):
            raise _fail("NEURON_RT_VISIBLE_CORES", cores, "not a NeuronCore index or inclusive range (like 0 or 0-1)",
                        "unset it, or set e.g. NEURON_RT_VISIBLE_CORES=0")
    for var in ("NEURON_RT_NUM_CORES", "NEURON_RT_EXEC_TIMEOUT"):
        value = env.get(var)
        if value is not None and not value.strip().isdigit():
            raise _fail(var, value, "must be a non-negative integer", f"unset {var} or give it a number")
    if env.get("NEURON_RT_INSPECT_ENABLE", "").strip() not in ("", "0"):
        raise _fail("NEURON_RT_INSPECT_ENABLE", env["NEURON_RT_INSPECT_ENABLE"],
                    "the runtime would profile every execution of the timed runs, so their latency would include "
                    "the tracing", "unset it; ask for a profile with the script's profile option instead")
    if api != "nki":
        return
    target = env.get("NEURON_PLATFORM_TARGET_OVERRIDE")
    if target is not None and target.strip() not in TARGETS:
        raise _fail("NEURON_PLATFORM_TARGET_OVERRIDE", target, "not a target nki.jit knows",
                    "use trn2 (Trainium2) or trn1 (Trainium1), or unset it")
    lnc = env.get("NEURON_LOGICAL_NC_CONFIG")
    if lnc is not None and lnc.strip() != "1":
        raise _fail("NEURON_LOGICAL_NC_CONFIG", lnc,
                    "the course's kernels run on one NeuronCore (LNC=1) and are launched without an LNC degree; "
                    "nki.jit says the launch degree must match this variable or the runtime fails",
                    "unset NEURON_LOGICAL_NC_CONFIG (LNC=1 is the default) or set it to 1")


def target_from_env(env: Mapping[str, str] | None = None, default: str = "trn2") -> str:
    env = os.environ if env is None else env
    value = env.get("NEURON_PLATFORM_TARGET_OVERRIDE", "").strip()
    return TARGETS.get(value, default)
