"""``nki.collectives`` on nkisim: one NeuronCore, so a replica group of one rank ([[0]]), where each collective is
what its documentation makes of one contribution (NKI 0.6 nki.collectives); anything wider is an error naming the
limit.  References are NumPy."""

from __future__ import annotations

import nki
import nki.collectives as ncol
import nki.isa as nisa
import nki.language as nl
import numpy as np
import pytest

from nkisim import apicoverage
from nkisim.core.runtime import run_kernel
from nkisim.frontends import NKI

RNG = np.random.default_rng(22)
ONE = [[0]]


def _x(*shape):
    return RNG.random(shape).astype(np.float32)


@nki.jit
def hbm_collectives(x):
    """all_reduce, all_gather, reduce_scatter, all_to_all and collective_permute on HBM, one rank."""
    g = ncol.ReplicaGroup(ONE)
    o0 = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    o1 = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    o2 = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    o3 = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    o4 = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    outs = [o0, o1, o2, o3, o4]
    ncol.all_reduce(srcs=[x], dsts=[outs[0]], replica_group=g, op=nl.add)
    ncol.all_gather(srcs=[x], dsts=[outs[1]], replica_group=g, collective_dim=0)
    ncol.reduce_scatter(srcs=[x], dsts=[outs[2]], replica_group=g, collective_dim=0, op=nl.maximum)
    ncol.all_to_all(srcs=[x], dsts=[outs[3]], replica_group=g, collective_dim=0)
    ncol.collective_permute(srcs=[x], dsts=[outs[4]], source_target_pairs=[(0, 0)])
    return tuple(outs)


def test_one_rank_collectives_copy_the_contribution():
    x = _x(64, 32)
    for got in hbm_collectives(x):
        np.testing.assert_array_equal(got, x)


@nki.jit
def sbuf_all_reduce_and_ring(a, b):
    """SBUF all_reduce and all_gather along dim 1; a ring of one (implicit permute, with reduction) and its
    processing rank / rank_id registers."""
    g = ncol.ReplicaGroup(ONE)
    ta = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
    tb = nl.ndarray(b.shape, dtype=b.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=ta, src=a)
    nisa.dma_copy(dst=tb, src=b)
    red = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
    ncol.all_reduce([ta], [red], g, nl.minimum)
    gat = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
    ncol.all_gather([ta], [gat], g, collective_dim=1)
    ring = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    ncol.collective_permute_implicit([[a]], [[ring]], g)
    summed = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    ncol.collective_permute_implicit_reduce([[a]], [[b]], [[summed]], g, nl.add)
    ids = nl.ndarray((1, 2), dtype=nl.int32, buffer=nl.sbuf)
    nisa.register_store(ids[0:1, 0:1], ncol.rank_id())
    nisa.register_store(ids[0:1, 1:2], ncol.collective_permute_implicit_current_processing_rank_id(3, g))
    out_red = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    out_gat = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out_red, src=red)
    nisa.dma_copy(dst=out_gat, src=gat)
    id_out = nl.ndarray((1, 2), dtype=nl.int32, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=id_out, src=ids)
    return out_red, out_gat, ring, summed, id_out


def test_sbuf_collectives_ring_of_one_and_rank_ids():
    a, b = _x(128, 16), _x(128, 16)
    red, gat, ring, summed, ids = sbuf_all_reduce_and_ring(a, b)
    np.testing.assert_array_equal(red, a)
    np.testing.assert_array_equal(gat, a)
    np.testing.assert_array_equal(ring, a)
    np.testing.assert_allclose(summed, a + b, rtol=1e-6)
    np.testing.assert_array_equal(ids, [[0, 0]])


@nki.jit
def variable_gather(x, meta, to_all, known=False):
    """all_gather_v / all_to_all_v of one rank: the chunk src[displ : displ + count] lands in dst at slot 0 (or at
    recv_displ, all_to_all_v with has_rdispls); row 2 of the metadata receives the count."""
    g = ncol.ReplicaGroup(ONE)
    out = nl.ndarray((x.shape[0],), dtype=x.dtype, buffer=nl.shared_hbm)
    zeros = nl.ndarray((1, x.shape[0]), dtype=x.dtype, buffer=nl.sbuf)
    nisa.memset(dst=zeros, value=0.0)
    nisa.dma_copy(dst=out, src=zeros)
    md = nl.ndarray(meta.shape, dtype=nl.uint32, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=md, src=meta)
    if to_all:
        ncol.all_to_all_v([x], [out], g, md, recv_counts_known=known, has_rdispls=meta.shape[0] == 4)
    else:
        ncol.all_gather_v([x], [out], g, md, recv_counts_known=known)
    return out, md


@pytest.mark.parametrize("to_all,meta,start", [
    (False, [[5], [3], [0]], 0),
    (True, [[4], [10], [0]], 0),
    (True, [[6], [1], [0], [7]], 7),
])
def test_variable_length_collectives(to_all, meta, start):
    x = _x(20)
    md = np.array(meta, np.uint32)
    out, md_out = variable_gather(x, md, to_all)
    count, displ = int(md[0, 0]), int(md[1, 0])
    want = np.zeros_like(x)
    want[start:start + count] = x[displ:displ + count]
    np.testing.assert_array_equal(out, want)
    assert int(md_out[2, 0]) == count


@pytest.mark.parametrize("to_all", [False, True])
def test_recv_counts_known_leaves_row_2_alone(to_all):
    x = _x(20)
    _, md_out = variable_gather(x, np.array([[5], [3], [99]], np.uint32), to_all, True)
    assert int(md_out[2, 0]) == 99


@pytest.mark.parametrize("groups", [[[0, 1]], [[0], [1]], [[1]]])
def test_groups_of_other_ranks_say_nkisim_models_one_core(groups):
    @nki.jit
    def k(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        ncol.all_reduce([x], [out], ncol.ReplicaGroup(groups), nl.add)
        return out

    with pytest.raises(NotImplementedError, match="nkisim models one NeuronCore"):
        k(_x(4, 4))


def test_permute_to_another_rank_and_lnc2_launch_are_refused():
    @nki.jit
    def k(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        ncol.collective_permute([x], [out], [(0, 1)])
        return out

    with pytest.raises(NotImplementedError, match="nkisim models one NeuronCore"):
        k(_x(4, 4))

    @nki.jit
    def k2(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        ncol.all_gather([x], [out], ncol.ReplicaGroup(ONE), 0)
        return out

    with pytest.raises(NotImplementedError, match="LNC=1"):
        k2[2](_x(4, 4))


def test_collectives_check_their_operands():
    @nki.jit
    def mixed(x):
        t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
        ncol.all_reduce([x], [t], ncol.ReplicaGroup(ONE), nl.add)
        return x

    with pytest.raises(Exception, match="on HBM or all on SBUF"):
        mixed(_x(4, 4))

    @nki.jit
    def bad_op(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        ncol.all_reduce([x], [out], ncol.ReplicaGroup(ONE), nl.multiply)
        return out

    with pytest.raises(Exception, match="nl.add, nl.minimum or nl.maximum"):
        bad_op(_x(4, 4))


def test_collectives_are_dma_instructions():
    run = run_kernel(hbm_collectives, (_x(64, 32),))
    vias = [i.attrs.get("via") for i in run.trace if i.op == "dma_copy"]
    assert vias == ["all_reduce", "all_gather", "reduce_scatter", "all_to_all", "collective_permute"]


def test_every_collective_symbol_is_implemented():
    names = [n for n in apicoverage.documented(NKI) if n.startswith("ncol.")]
    assert names and all(apicoverage.status(n, NKI) == "ok" for n in names)
