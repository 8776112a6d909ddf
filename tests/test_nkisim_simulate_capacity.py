"""``nki.simulate_kernel`` does not check the compiler's capacity limits; compiling does (issue 13).

AWS's CPU simulator "allocates each tensor independently without ... validating against SBUF/PSUM capacity limits"
(NKI CPU Simulator guide, "Memory Model"), and AWS's attention-tutorial test relies on it (v9 then v10 in one
simulation process).  nkisim's simulate path therefore warns (``NKICapacityWarning``) and returns the right values,
while ``nki.baremetal`` / ``nki.benchmark`` (and the grader) still fail as the compiler does.  Values are checked
against NumPy.
"""

from __future__ import annotations

import warnings

import neuronxcc.nki as nki
import neuronxcc.nki.compiler as ncc
import neuronxcc.nki.language as nl
import numpy as np
import pytest

from nkisim.core.config import limits
from nkisim.core.rules import NKICapacityError, NKICapacityWarning, NKIError

RNG = np.random.default_rng(7)


@nki.jit
def three_big_tiles(x):
    """x: [128, F] fp32, F * 4 bytes per partition; three copies stay live until the end (3 x F x 4 bytes)."""
    a = nl.load(x)
    b = nl.multiply(a, 2.0)
    c = nl.add(a, 1.0)
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.hbm)
    nl.store(out, nl.add(nl.add(a, b), c))
    return out


def _oversized_input(target: str) -> np.ndarray:
    usable = limits(target).sbuf_usable_bytes
    free = usable // (2 * 4) + 64  # two live fp32 copies fit, three do not
    return RNG.standard_normal((128, free)).astype(np.float32)


@pytest.mark.parametrize("target", ["trn2", "trn1"])
def test_sbuf_over_subscription_fails_to_compile_but_simulates_with_a_warning(target, monkeypatch):
    """Three live copies do not fit: that alone spills (issue 33), but ``nl.add(a, b)`` reads two of them and
    writes a third, more than one partition holds: the compiler's GCA035."""
    monkeypatch.setenv("NEURON_PLATFORM_TARGET_OVERRIDE", target)
    x = _oversized_input(target)
    with pytest.raises(NKICapacityError, match="couldn't be allocated in SB"):
        nki.baremetal(three_big_tiles)(x)
    with pytest.warns(NKICapacityWarning, match="couldn't be allocated in SB.*does not check capacity"):
        got = nki.simulate_kernel(three_big_tiles, x)
    np.testing.assert_allclose(got, x + 2 * x + (x + 1), rtol=1e-6)


def test_a_kernel_within_capacity_simulates_without_a_warning():
    x = RNG.standard_normal((128, 512)).astype(np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error", NKICapacityWarning)
        got = nki.simulate_kernel(three_big_tiles, x)
    np.testing.assert_allclose(got, 4 * x + 1, rtol=1e-6)


def _placed_kernel(base_addr: int):
    @nki.jit
    def k(x):
        t = nl.ndarray(x.shape, dtype=nl.float32, buffer=ncc.sbuf.mod_alloc(base_addr=base_addr))
        t[...] = nl.load(x)
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.hbm)
        nl.store(out, nl.multiply(t, 3.0))
        return out

    return k


def test_direct_placement_past_the_usable_bytes_warns_only_in_simulation():
    lim = limits("trn2")
    x = RNG.standard_normal((128, 256)).astype(np.float32)  # 1 KiB per partition
    past_usable = _placed_kernel(lim.sbuf_usable_bytes - 512)
    with pytest.raises(NKIError, match="beyond the 212984 usable"):
        nki.baremetal(past_usable)(x)
    with pytest.warns(NKICapacityWarning, match="direct allocation"):
        got = nki.simulate_kernel(past_usable, x)
    np.testing.assert_allclose(got, 3 * x, rtol=1e-6)


def test_direct_placement_past_the_physical_partition_fails_even_in_simulation():
    lim = limits("trn2")
    x = RNG.standard_normal((128, 256)).astype(np.float32)
    beyond = _placed_kernel(lim.sbuf_bytes_per_partition - 512)
    with pytest.raises(NKIError, match="direct allocation"):
        nki.simulate_kernel(beyond, x)
