"""nki.collectives: multi-device collective communication (all_reduce, all_gather, ...).

nkisim runs one NeuronCore (or the two of an LNC=2 launch) and no other device, and AWS's own simulator does not
implement them either ("nki.collectives APIs are not implemented in the simulator", nki/guides/nki_simulator.rst,
"Known Gaps"): every documented name is a "nkisim does not support X yet" placeholder.
"""

from __future__ import annotations


def __getattr__(name: str):
    from nkisim.frontends import NKI, _unsupported

    return _unsupported.missing(NKI, "ncol", name)


del annotations  # the __future__ import must not leak as an NKI name
