"""``nki.collectives`` on nkisim: refused.  AWS documents the collectives only for LNC=2 launches with rank-lists
of exactly 4 ranks (NKI 0.6 nki.collectives, "Current limitations"); nkisim models one NeuronCore, so every
collective is an error naming that configuration, including the one-rank group at LNC=1 that nkisim used to run
as a free local copy (docs/grading-security.md, V5).  ``ReplicaGroup`` and ``rank_id`` remain."""

from __future__ import annotations

import nki
import nki.collectives as ncol
import nki.isa as nisa
import nki.language as nl
import numpy as np
import pytest

from nkisim import apicoverage
from nkisim.frontends import NKI

RNG = np.random.default_rng(22)
ONE = [[0]]
DOCUMENTED = "only for LNC=2 launches with rank-lists of exactly 4 ranks"


def _x(*shape):
    return RNG.random(shape).astype(np.float32)


# each collective as a kernel would call it on a one-rank group (x: an HBM input, out: an HBM output)
CALLS = {
    "all_reduce": lambda x, out, g: ncol.all_reduce([x], [out], g, nl.add),
    "all_gather": lambda x, out, g: ncol.all_gather([x], [out], g, collective_dim=0),
    "reduce_scatter": lambda x, out, g: ncol.reduce_scatter([x], [out], g, collective_dim=0, op=nl.maximum),
    "all_to_all": lambda x, out, g: ncol.all_to_all([x], [out], g, collective_dim=0),
    "collective_permute": lambda x, out, g: ncol.collective_permute([x], [out], [(0, 0)]),
    "collective_permute_implicit": lambda x, out, g: ncol.collective_permute_implicit([[x]], [[out]], g),
    "collective_permute_implicit_reduce": lambda x, out, g: ncol.collective_permute_implicit_reduce(
        [[x]], [[x]], [[out]], g, nl.add),
    "current_processing_rank_id": lambda x, out, g: ncol.collective_permute_implicit_current_processing_rank_id(
        0, g),
}


@pytest.mark.parametrize("name", sorted(CALLS))
def test_a_one_rank_collective_at_lnc1_is_refused_with_the_documented_limits(name):
    """Before: each ran as a DMA copy of its one contribution (a collective the hardware does not offer)."""
    @nki.jit
    def k(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        CALLS[name](x, out, ncol.ReplicaGroup(ONE))
        nisa.dma_copy(dst=out, src=x)
        return out

    with pytest.raises(NotImplementedError, match=DOCUMENTED) as err:
        k(_x(4, 4))
    assert "LNC=1 launch" in str(err.value) and "nisa.dma_copy" in str(err.value)


@pytest.mark.parametrize("to_all", [False, True])
def test_variable_length_collectives_are_refused(to_all):
    @nki.jit
    def k(x, meta):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        md = nl.ndarray(meta.shape, dtype=nl.uint32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=md, src=meta)
        g = ncol.ReplicaGroup(ONE)
        if to_all:
            ncol.all_to_all_v([x], [out], g, md)
        else:
            ncol.all_gather_v([x], [out], g, md)
        return out

    with pytest.raises(NotImplementedError, match=DOCUMENTED):
        k(_x(20), np.array([[5], [3], [0]], np.uint32))


@pytest.mark.parametrize("groups", [[[0, 1]], [[0], [1]], [[0, 1, 2, 3]]])
def test_wider_groups_and_lnc2_launches_say_nkisim_models_one_core(groups):
    @nki.jit
    def k(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        ncol.all_reduce([x], [out], ncol.ReplicaGroup(groups), nl.add)
        return out

    with pytest.raises(NotImplementedError, match="nkisim models one NeuronCore"):
        k(_x(4, 4))
    with pytest.raises(NotImplementedError, match="LNC=2 launch"):
        k[2](_x(4, 4))


def test_rank_id_is_zero_and_replica_groups_check_overlap():
    @nki.jit
    def k(x):
        ids = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
        nisa.register_store(ids, ncol.rank_id())
        out = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=ids)
        return out

    np.testing.assert_array_equal(k(np.zeros((1, 1), np.float32)), [[0]])
    with pytest.raises(ValueError, match="must not overlap"):
        ncol.ReplicaGroup([[0, 1], [1]])


def test_every_collective_symbol_is_implemented():
    names = [n for n in apicoverage.documented(NKI) if n.startswith("ncol.")]
    assert names and all(apicoverage.status(n, NKI) == "ok" for n in names)
