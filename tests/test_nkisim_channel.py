"""Two lockstep groups in two processes sharing one leader's products through a channel (nkisim.core.channel):
each member's outputs, trace and errors are its replay alone, bit for bit; the consumer computes no product the
producer published, charges their cost as borrowed time, and goes on alone when the producer is absent or dies."""

from __future__ import annotations

import multiprocessing
import os
import pickle
import time

import numpy as np
import pytest
from test_nkisim_sharing import CONV, LEGACY, _alone, _conv_members, _same

from nkisim import stream
from nkisim.core import channel, sharing

pytestmark = pytest.mark.skipif(not channel.supported(), reason="the channel needs x86-64's store order")


def _digest(run):
    if isinstance(run, BaseException):
        return repr(run)
    return run.outputs.tobytes(), [[getattr(i, k) for k in i.__slots__] for i in run.trace.instrs]


def _produce(path, members, conn, die_after=None):
    if die_after is not None:  # the producer's process dies midway: the consumer must not hang
        orig = channel.Producer.publish

        def publish(self, i, *a):
            if i == die_after:
                os._exit(3)
            return orig(self, i, *a)

        channel.Producer.publish = publish
    link = channel.open_channel(path, "producer")
    runs, figures = stream.replay_group(members, link=link)
    conn.send_bytes(pickle.dumps(([_digest(r) for r in runs], figures)))
    conn.close()
    os._exit(0)


def _pair(tmp_path, producer, consumer, *, die_after=None, consume=True, late=0.0):
    path = str(tmp_path / "channel")
    channel.create(path)
    ctx = multiprocessing.get_context("fork")
    mine, theirs = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_produce, args=(path, producer, theirs, die_after))
    proc.start()
    theirs.close()
    time.sleep(late)  # the producer fills the ring and waits: from then on it writes every slot the moment it may
    got = stream.replay_group(consumer, link=channel.open_channel(path, "consumer")) if consume else None
    try:
        produced = pickle.loads(mine.recv_bytes()) if die_after is None else None
    except EOFError:
        produced = None
    finally:
        proc.join(60)
    return produced, got, proc.exitcode


@pytest.mark.parametrize("mod", [CONV, LEGACY], ids=["reference", "legacy"])
def test_the_consumer_takes_every_product_and_every_member_is_its_run_alone(tmp_path, mod, monkeypatch):
    monkeypatch.setattr(sharing, "SELF_CHECK", True)
    # more matmuls than the ring has slots: every slot is written again while the consumer runs
    members = _conv_members(mod, 4, 128, 128, 96, 32, np.float32, variants=(("zeros", 1), ("random", 1), ("random", 1)))
    alone = _alone(members)
    (pruns, pfig), (cruns, cfig), code = _pair(tmp_path, members[:1], members[1:], late=1.0)
    assert code == 0
    assert pruns == [_digest(alone[0])]
    for a, g in zip(alone[1:], cruns, strict=True):
        _same(a, g)
    assert pfig["misses"] > 0 and pfig["hits"] == 0
    # the consumer's two members computed nothing: every product crossed (and was checked bitwise)
    assert cfig["misses"] == 0 and cfig["hits"] == 2 * pfig["misses"], (pfig, cfig)
    assert all(b > 0 for b in cfig["borrowed_seconds"])


def test_a_batch_prefix_consumer_and_a_producer_with_a_follower(tmp_path):
    members = _conv_members(CONV, 2, 128, 128, 16, 16, np.float32)
    prefix = _conv_members(CONV, 1, 128, 128, 16, 16, np.float32, variants=(("random", 1),))
    prefix[0][1][0] = members[0][1][0][:1].copy()
    prefix[0][1][1:] = members[1][1][1:]
    alone = _alone([*members, *prefix])
    (pruns, pfig), (cruns, cfig), code = _pair(tmp_path, members[:2], [members[2], prefix[0]])
    assert code == 0
    assert pruns == [_digest(a) for a in alone[:2]]
    for a, g in zip(alone[2:], cruns, strict=True):
        _same(a, g)
    assert cfig["misses"] == 0


def test_a_producer_that_dies_midway_leaves_the_consumer_computing_its_own(tmp_path, monkeypatch):
    monkeypatch.setattr(channel, "STALL", 0.5)
    members = _conv_members(CONV, 4, 128, 128, 24, 16, np.float32)
    alone = _alone(members)
    _, (cruns, cfig), code = _pair(tmp_path, members[:1], members[1:], die_after=20)
    assert code == 3
    for a, g in zip(alone[1:], cruns, strict=True):
        _same(a, g)
    # the first 20 crossed before it died; then the consumer's first member computed the other 16 and its second
    # member reused them, as in a group of its own
    assert cfig["hits"] == 2 * 20 + 16 and cfig["misses"] == 16, cfig


def test_a_producer_without_a_consumer_goes_on_alone(tmp_path, monkeypatch):
    monkeypatch.setattr(channel, "STALL", 0.3)
    members = _conv_members(CONV, 2, 128, 128, 16, 16, np.float32)
    alone = _alone(members)
    (pruns, pfig), _, code = _pair(tmp_path, members[:1], [], consume=False)
    assert code == 0 and pruns == [_digest(alone[0])]


def test_a_file_that_is_not_a_channel_is_refused(tmp_path):
    p = tmp_path / "x"
    p.write_bytes(b"\0" * 100)
    assert channel.open_channel(str(p), "consumer") is None
    assert channel.open_channel(str(tmp_path / "missing"), "producer") is None


@pytest.mark.slow
def test_the_course_shapes_cross_bit_for_bit(tmp_path):
    """The course's 224x224 conv at batch 2 (7,992 matmuls, 33 snapshots through 8 slots): a member's last product
    of a turn is used after it hands over, so the consumer must not acknowledge it before its next turn (the
    producer, 64 entries ahead from the start, wrote that slot again at once)."""
    members = _conv_members(CONV, 2, 256, 256, 224, 224, np.float32,
                            variants=(("zeros", 1), ("random", 1), ("random", 2)))
    alone = _alone(members)
    (pruns, pfig), (cruns, cfig), code = _pair(tmp_path, members[:1], members[1:], late=1.0)
    assert code == 0 and pruns == [_digest(alone[0])]
    for a, g in zip(alone[1:], cruns, strict=True):
        _same(a, g)
    assert cfig["misses"] == 0 and cfig["hits"] == 2 * pfig["misses"]
