"""A graded replay runs the program as compiled (docs/grading-security.md L4): the stream's header cannot ask for
the simulator's rules, under which a compiler error (the start-partition rule, the SBUF capacity check) is only a
warning.  Before, the replay took the flag from the header, which the specializing child writes: a child past the
screen set it and a copy at an illegal start partition scored full credit (tests/hostile/simulate_forge_nki)."""

from __future__ import annotations

import warnings

import nki
import nki.isa as nisa
import nki.language as nl
import numpy as np
import pytest

from nkisim import stream
from nkisim.core.rules import NKIError


@nki.jit
def illegal_start(x):
    out = nl.ndarray((128, 8), dtype=nl.float32, buffer=nl.shared_hbm)
    t = nl.ndarray((128, 8), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    nisa.tensor_copy(dst=t[5:37, :], src=t[0:32, :])  # start 5: an error when compiled, a warning when simulated
    nisa.dma_copy(dst=out, src=t)
    return out


@pytest.fixture(scope="module")
def simulated():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        data, _ = stream.record(illegal_start, (np.zeros((128, 8), np.float32),), simulate=True)
    assert data["simulate"] is True
    return stream.loads(stream.dumps(data))


def test_a_graded_replay_refuses_the_simulators_rules(simulated):
    x = np.arange(128 * 8, dtype=np.float32).reshape(128, 8)
    with pytest.raises(stream.StreamError, match="simulate=true: a graded program runs as compiled"):
        stream.replay(simulated, (x,), {}, graded=True)
    # outside grading the recording's own mode holds: the simulator warns and runs it
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert stream.replay(simulated, (x,), {}).outputs is not None
    # the same program recorded as compiled is the rule's error, graded or not
    with pytest.raises(NKIError):
        stream.record(illegal_start, (x,))


def test_a_graded_group_refuses_it_for_that_member_only(simulated):
    x = np.arange(128 * 8, dtype=np.float32).reshape(128, 8)
    honest = dict(simulated, simulate=False, events=[ev for ev in simulated["events"]])
    runs, _ = stream.replay_group([(simulated, (x,), {}), (honest, (x,), {})], graded=True)
    assert isinstance(runs[0], stream.StreamError) and "simulate=true" in str(runs[0])
    # the other member is its own run: the program broken as compiled, the rule's error
    assert isinstance(runs[1], NKIError)


@pytest.mark.parametrize("flag", [1, "yes", None])
def test_the_simulate_flag_is_a_boolean(simulated, flag):
    with pytest.raises(stream.StreamError, match="simulate flag"):
        stream.replay(dict(simulated, simulate=flag), (np.zeros((128, 8), np.float32),), {})
