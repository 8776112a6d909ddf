"""The SBUF capacity error says which axis of a tile went on the partitions, and how to put another one there
(issue 26: a (n_ci, 128, 9, 256) weight tile read as 2 partitions failed with only the byte count)."""

from __future__ import annotations

import neuronxcc.nki.language as nl
from nkisim_util import raises_rule

from nkisim.core.runtime import run_kernel


def test_a_list_of_tiles_shape_gets_the_partition_axis_hint():
    def k():
        return nl.ndarray((2, 128, 9, 256), dtype=nl.float16, buffer=nl.sbuf, name="w_t")

    with raises_rule(
        "nkisim_sbuf_capacity",
        "'w_t' float16 [2 partitions] x (128, 9, 256) = 589824 B/partition",
        "'w_t' (2, 128, 9, 256) was taken with its first axis on the partitions: 2 partitions",
        "make it the first axis, (128, 2, 9, 256), or mark it: (2, nl.par_dim(128), 9, 256)",
    ):
        run_kernel(k, ())


def test_the_hint_picks_the_largest_later_axis_that_fits_the_partitions():
    def k():
        return nl.ndarray((4, 3, 64, 128, 200), dtype=nl.float32, buffer=nl.sbuf, name="x")

    with raises_rule("nkisim_sbuf_capacity", "If axis 3 (size 128)", "(128, 4, 3, 64, 200)"):
        run_kernel(k, ())


def test_no_hint_when_the_partition_axis_is_already_full():
    def k():
        return nl.ndarray((128, 60 * 1024), dtype=nl.float32, buffer=nl.sbuf, name="big")

    with raises_rule("nkisim_sbuf_capacity", "'big' float32 [128 partitions] x (61440,)") as info:
        run_kernel(k, ())
    assert "par_dim" not in str(info.value)


def test_the_current_api_hint_puts_the_partitions_first_without_par_dim(tmp_path):
    """NKI 0.4+ has no nl.par_dim (block dimensions are gone): the hint names only the fix that exists there."""
    import importlib.util

    import numpy as np
    import pytest

    from nkisim.core.rules import NKICapacityError

    path = tmp_path / "current_api_kernel.py"
    path.write_text(
        "import nki\nimport nki.isa as nisa\nimport nki.language as nl\n\n\n@nki.jit\ndef k(x):\n"
        "    out = nl.ndarray((128, 4), dtype=x.dtype, buffer=nl.shared_hbm)\n"
        "    w_t = nl.ndarray((2, 128, 9, 256), dtype=nl.float16, buffer=nl.sbuf, name='w_t')\n"
        "    nisa.dma_copy(dst=out, src=x)\n    return out\n")
    spec = importlib.util.spec_from_file_location("capacity_hint_current_api", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    with pytest.raises(NKICapacityError) as info:
        module.k(np.zeros((128, 4), np.float16))
    text = str(info.value)
    assert "make it the first axis, (128, 2, 9, 256) (in this API the partition axis is always the first)" in text
    assert "par_dim" not in text
