"""``nki.isa.constants``: the enums of ``nki.isa`` as a module of their own (``from nki.isa.constants import
dge_mode, oob_mode``, as AWS's nki-library imports them; the legacy ``neuronxcc.nki.isa.constants`` had the same
role).  ``nki.isa`` re-exports every one of them: ``nki.isa.dge_mode is nki.isa.constants.dge_mode``.

Members and values follow the API stub (nki/api/nki/isa/__init__.py, NKI 0.6).  ``nc_version`` is ordered
(``nisa.get_nc_version() <= nisa.nc_version.gen2``, ``>= 3``: AWS's nki-library compares generations both ways),
so it is an ``IntEnum``.
"""

from __future__ import annotations

from enum import Enum as _Enum
from enum import IntEnum as _IntEnum

from nkisim.core.sealed import SealedEnum as _SealedEnum


class engine(_Enum, metaclass=_SealedEnum):  # noqa: N801 - NKI name
    tensor = 1
    vector = 5
    scalar = 2
    gpsimd = 3
    dma = 4
    sync = 6
    unknown = 0


class reduce_cmd(_Enum, metaclass=_SealedEnum):  # noqa: N801
    idle = 0
    reset = 1
    reduce = 2
    reset_reduce = 3
    load_reduce = 4


class dge_mode(_Enum, metaclass=_SealedEnum):  # noqa: N801
    unknown = 0
    swdge = 1
    hwdge = 2
    none = 3


class oob_mode(_Enum, metaclass=_SealedEnum):  # noqa: N801
    error = 0
    skip = 1


class matmul_perf_mode(_Enum, metaclass=_SealedEnum):  # noqa: N801
    none = "none"
    double_row = "double_row"


class nc_version(_IntEnum, metaclass=_SealedEnum):  # noqa: N801
    gen2 = 2
    gen3 = 3
    gen4 = 4


class dma_engine(_Enum, metaclass=_SealedEnum):  # noqa: N801
    dma = 1
    gpsimd_dma = 2


del annotations  # the __future__ import must not leak as an NKI name
