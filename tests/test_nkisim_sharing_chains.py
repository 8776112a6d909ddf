"""Accumulation chains of lockstep groups (nkisim/core/sharing.py, ``ShareGroup.chain``; docs/grading.md, "The
group members' array work, round 11"): a later member whose PSUM tile is an accumulation chain of products it took
from an earlier member's ring keeps them pending and, at the tile's first access, copies that member's tile of the
same chain instead of adding the products again -- when that tile still holds exactly that chain (alive at the same
version, or its values kept when it died); otherwise it makes the overwrite and the adds itself.  Every member's
outputs must be bit for bit its separate replay's, with the self-check on (it recomputes every copied chain)."""

from __future__ import annotations

import nki
import nki.isa as nisa
import nki.language as nl
import numpy as np
import pytest

from nkisim import stream
from nkisim.core import sharing

F32 = nl.float32


def _chains(n_iter: int, length: int, read_after: int | None = None, pairs: bool = False, post: bool = False,
            hold: bool = False):
    """``n_iter`` PSUM tiles, each an accumulation chain of ``length`` matmuls (window j of the moving input),
    evacuated and added to the member's own ``c`` (so the members' outputs differ); ``read_after``: the tile is
    also read after that many matmuls of its chain (a mid-chain access); ``pairs``: the tiles are allocated two at
    a time, as the staff conv's (the first of a pair lives on while the second accumulates); ``post``: the member's
    own ``c`` is added into the tile itself once its chain is done (a write after the chain, then the read);
    ``hold``: every tile is allocated first and lives to the end of the kernel."""

    @nki.jit
    def kernel(a, b, c):
        out = nl.ndarray((128, n_iter, 256), dtype=F32, buffer=nl.shared_hbm)
        s, m, cs = (nl.ndarray(x.shape, dtype=F32, buffer=nl.sbuf) for x in (a, b, c))
        for tile, src in ((s, a), (m, b), (cs, c)):
            nisa.dma_copy(dst=tile, src=src)
        held = [nl.ndarray((128, 256), dtype=F32, buffer=nl.psum) for _ in range(n_iter if hold else 0)]
        for it in range(n_iter):
            if hold:
                p = held[it]
            elif not pairs:
                p = nl.ndarray((128, 256), dtype=F32, buffer=nl.psum)
            elif it % 2 == 0:
                p, q = (nl.ndarray((128, 256), dtype=F32, buffer=nl.psum) for _ in range(2))
            else:
                p = q
            r = nl.ndarray((128, 256), dtype=F32, buffer=nl.sbuf)
            for j in range(length):
                nisa.nc_matmul(dst=p, stationary=s, moving=m[:, it * 8 + j * 16:it * 8 + j * 16 + 256])
                if read_after is not None and j + 1 == read_after:
                    mid = nl.ndarray((128, 256), dtype=F32, buffer=nl.sbuf)
                    nisa.tensor_copy(dst=mid, src=p)
                    nisa.tensor_tensor(dst=cs, data1=cs, data2=mid, op=nl.add)
            if post:
                nisa.tensor_tensor(dst=p, data1=p, data2=cs, op=nl.add)
                nisa.tensor_copy(dst=r, src=p)
            else:
                nisa.tensor_tensor(dst=r, data1=p, data2=cs, op=nl.add)
            nisa.dma_copy(dst=out[:, it, :], src=r)
        return out

    return kernel


def _members(kernels: list) -> list:
    rng = np.random.default_rng(3)
    a = rng.standard_normal((128, 128), dtype=np.float32)
    b = rng.standard_normal((128, 512), dtype=np.float32)
    out = []
    for kernel in kernels:
        args = [a, b, rng.standard_normal((128, 256), dtype=np.float32)]
        data, _ = stream.record(kernel, args, {})
        out.append((stream.loads(stream.dumps(data)), args, {}))
    return out


def _check(members: list) -> dict:
    alone = [stream.replay(s, [x.copy() for x in args], dict(kw)) for s, args, kw in members]
    grouped, figures = stream.replay_group(members)
    for k, (al, gr) in enumerate(zip(alone, grouped, strict=True)):
        assert not isinstance(al, BaseException), al
        assert not isinstance(gr, BaseException), (k, gr)
        assert np.array_equal(gr.outputs.view(np.uint8), al.outputs.view(np.uint8)), f"member {k}"
        assert [[getattr(i, f) for f in i.__slots__] for i in gr.trace.instrs] == \
            [[getattr(i, f) for f in i.__slots__] for i in al.trace.instrs]
        assert gr.trace.meta == al.trace.meta
    return figures


@pytest.fixture(autouse=True)
def _self_check(monkeypatch):
    monkeypatch.setattr(sharing, "SELF_CHECK", True)


def _count_kept(monkeypatch) -> list:
    kept: list = []
    keep = sharing._Chain.keep

    def counting_keep(self, a):
        keep(self, a)
        kept.append(self.vals is not None)

    monkeypatch.setattr(sharing._Chain, "keep", counting_keep)
    return kept


def test_a_later_members_chains_are_copies_of_the_first_members(monkeypatch):
    """Tiles in pairs, four-matmul chains, turns of four matmuls (the staff conv's shape of things: a turn is
    about a chain long): each follower's tile is a copy of member 0's, of the first of a pair while member 0's
    is alive, of the second from the values member 0's kept when it died (the next pair was allocated)."""
    monkeypatch.setattr(sharing, "WINDOW", 4)
    kept = _count_kept(monkeypatch)
    figures = _check(_members([_chains(4, 4, pairs=True)] * 3))
    assert figures["misses"] == 16 and figures["hits"] == 32
    # every follower's every tile (member 2 takes its products from member 0's ring too)
    assert figures["compares"]["chains_copied"] == 8
    assert figures["compares"]["chains_added"] == 0
    assert 0 < sum(kept) < 8  # some copied from a live tile, some from kept values


def test_a_chain_whose_first_members_tile_died_is_copied_from_the_values_it_kept(monkeypatch):
    """Turns of two matmuls: member 0 ends a three-matmul chain, reads it and drops the tile (the next one is
    allocated) while member 1 is in the middle of the same chain; member 1 copies the values kept at the death."""
    monkeypatch.setattr(sharing, "WINDOW", 2)
    kept = _count_kept(monkeypatch)
    figures = _check(_members([_chains(4, 3)] * 2))
    assert figures["hits"] == 12
    assert any(kept), "no chain tile of member 0 died while member 1 still needed it"
    assert figures["compares"]["chains_copied"] == 4 and figures["compares"]["chains_added"] == 0


def test_a_chain_that_went_further_in_the_first_member_is_added_not_copied(monkeypatch):
    """Member 1's program reads its tile after two matmuls of the chain member 0 takes to three: the same
    products (their third matmuls differ), but member 0's tile (kept when it died) holds another chain's values,
    so member 1 adds its own."""
    monkeypatch.setattr(sharing, "WINDOW", 2)
    kept = _count_kept(monkeypatch)
    figures = _check(_members([_chains(2, 3), _chains(2, 2)]))
    assert figures["hits"] == 2
    assert any(kept)
    assert figures["compares"]["chains_copied"] == 0
    assert figures["compares"]["chains_added"] == 1


def test_a_chain_whose_first_members_tile_was_written_since_is_added_not_copied(monkeypatch):
    """Each member adds its own c into its tile right after the chain: when member 1 reaches its tile, member 0's
    (alive: the first of a pair) holds its chain plus member 0's c (a new version), so member 1 adds its own."""
    monkeypatch.setattr(sharing, "WINDOW", 4)
    figures = _check(_members([_chains(4, 4, post=True, hold=True)] * 2))
    assert figures["hits"] == 16
    assert figures["compares"]["chains_copied"] == 0 and figures["compares"]["chains_added"] == 4


def test_a_chain_of_a_live_tile_of_the_first_member_is_copied(monkeypatch):
    monkeypatch.setattr(sharing, "WINDOW", 4)
    alive: list = []
    write = sharing._Pending.__call__

    def noting_write(self, a):
        alive.append(self.src[0]() is not None)
        write(self, a)

    monkeypatch.setattr(sharing._Pending, "__call__", noting_write)
    figures = _check(_members([_chains(4, 4, hold=True)] * 2))
    assert figures["compares"]["chains_copied"] == 4 and figures["compares"]["chains_added"] == 0
    # member 0's last tile dies with its run before member 1 reads its own: copied from the values kept then
    assert alive == [True, True, True, False]


def test_a_tile_read_in_the_middle_of_its_chain_gets_the_values_so_far():
    """Each tile is read after two of its three matmuls (folded into the member's own c) and again at its end:
    the first read writes the pending chain (member 0 is past it: added), the last matmul then adds onto it."""
    figures = _check(_members([_chains(3, 3, read_after=2)] * 3))
    assert figures["hits"] == 18
    assert figures["compares"]["chains_added"] >= 1


def test_a_member_alone_or_last_keeps_nothing_pending():
    """A group of one (or sharing off) never defers: no chain is copied or added."""
    members = _members([_chains(2, 3)])
    grouped, figures = stream.replay_group(members)
    assert not isinstance(grouped[0], BaseException), grouped[0]
    assert figures["compares"]["chains_copied"] == 0 and figures["compares"]["chains_added"] == 0
