"""The HBM capacity rule (nkisim_hbm_capacity): an HBM tensor larger than the device memory one NeuronCore addresses
is refused with an error naming the tensor, in both APIs and both modes, before any host memory is asked for.

Without it a kernel's ``nl.ndarray((128, 1 << 38), dtype=nl.float32, buffer=nl.shared_hbm)`` got NumPy's bare
"Unable to allocate 128. TiB" MemoryError."""

from __future__ import annotations

import types

import neuronxcc.nki.language as lnl
import neuronxcc.nki.typing as lnt
import nki.language as nl
import nki.typing as nt
import numpy as np
import pytest
from nkisim_util import raises_rule

from nkisim import frontends
from nkisim.core.buffers import hbm_storage
from nkisim.core.config import TARGETS
from nkisim.core.rules import NKICapacityError
from nkisim.core.runtime import run_kernel

APIS = [(frontends.NKI, nl, nt, nl.shared_hbm), (frontends.LEGACY, lnl, lnt, lnl.shared_hbm)]
IDS = ["nki", "legacy"]
A = np.ones((128, 4), dtype=np.float32)


@pytest.mark.parametrize("mode", ["full", "timing"])
@pytest.mark.parametrize("api", APIS, ids=IDS)
def test_huge_hbm_tensor_is_the_capacity_rule(api, mode):
    fe, lang, _, shared = api

    def kernel(a):
        return lang.ndarray((128, 1 << 38), dtype=lang.float32, buffer=shared)

    with raises_rule("nkisim_hbm_capacity", "[128, 274877906944] float32", "140737488355328 bytes (128 TiB)",
                     "25769803776 bytes (24 GiB)", "trn2") as info:
        run_kernel(kernel, (A,), mode=mode, frontend=fe, target="trn2")
    # still a MemoryError, as NumPy's was: callers that caught one keep working
    assert isinstance(info.value, NKICapacityError) and isinstance(info.value, MemoryError)


@pytest.mark.parametrize("api", APIS, ids=IDS)
def test_trn1_limit_is_16_gib(api):
    """25 GiB of bfloat16 is over both targets' limits; the message gives trn1's (16 GiB)."""
    fe, lang, _, shared = api

    def kernel(a):
        return lang.ndarray((128, 25 << 22), dtype=lang.bfloat16, buffer=shared)

    with raises_rule("nkisim_hbm_capacity", "bfloat16", f"{25 << 30} bytes (25 GiB)", f"{16 << 30} bytes (16 GiB)",
                     "trn1"):
        run_kernel(kernel, (A,), mode="timing", frontend=fe, target="trn1")


@pytest.mark.parametrize("api", APIS, ids=IDS)
def test_shape_only_argument_over_the_limit(api):
    """A shape-only placeholder argument (nki.benchmark's nt.tensor) is an HBM tensor too: it is checked by name."""
    fe, lang, typing, shared = api

    def kernel(big):
        out = lang.ndarray((128, 4), dtype=lang.float32, buffer=shared)
        return out

    with raises_rule("nkisim_hbm_capacity", "HBM tensor 'big' [4, 1099511627776] float16"):
        run_kernel(kernel, (typing.tensor[[4, 1 << 40], lang.float16],), mode="timing", frontend=fe)


@pytest.mark.parametrize("target", ["trn1", "trn2"])
def test_limit_is_inclusive_and_checked_before_the_host_array(target):
    """Exactly the limit is legal (the host array is made); one more element is refused before it is made."""
    limit = TARGETS[target].hbm_bytes_per_core
    ctx = types.SimpleNamespace(limits=TARGETS[target])
    made = []
    assert hbm_storage(ctx, (limit // 4,), np.dtype(np.float32), "t", lambda: made.append(1) or "array") == "array"
    with raises_rule("nkisim_hbm_capacity", f"HBM tensor 't' [{limit // 4 + 1}] float32 needs {limit + 4} bytes",
                     f"more than the {limit} bytes"):
        hbm_storage(ctx, (limit // 4 + 1,), np.dtype(np.float32), "t", lambda: made.append(2))
    assert made == [1]
    assert {t: TARGETS[t].hbm_bytes_per_core >> 30 for t in TARGETS} == {"trn1": 16, "trn2": 24}


def test_legal_tensor_the_host_cannot_hold_says_so():
    """A tensor within the device's HBM that this machine cannot hold is the host's limit, named as such."""
    ctx = types.SimpleNamespace(limits=TARGETS["trn2"])

    def make():
        raise MemoryError("Unable to allocate 20.0 GiB")

    with pytest.raises(MemoryError, match=r"this machine ran out of memory for HBM tensor 'x' \[5, 1073741824\] "
                                          r"float32 \(21474836480 bytes\): the tensor fits") as info:
        hbm_storage(ctx, (5, 1 << 30), np.dtype(np.float32), "x", make)
    assert not isinstance(info.value, NKICapacityError)
