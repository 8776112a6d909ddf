"""``nki.collectives`` (``ncol``) of the current API (NKI 0.6) as nkisim implements it: refused.

AWS documents the collectives only for LNC=2 launches with rank-lists of exactly 4 ranks (nki.collectives,
all_gather_v / all_to_all_v "Current limitations"); nkisim models one NeuronCore, so every collective raises
``NotImplementedError`` naming the documented configuration (``nkisim.core.ops.collectives.check_group``).  A group
of one rank at LNC=1, which nkisim used to run as a local copy, is no documented form (grading security, V5).
``ReplicaGroup`` and ``rank_id`` (0 in a register) remain.  AWS's own simulator implements none of them
("nki.collectives APIs are not implemented in the simulator", nki/guides/nki_simulator.rst, "Known Gaps").
Thin adapters over ``nkisim.core.ops.collectives``.
"""

from __future__ import annotations

from nkisim.core.ops import collectives as _col
from nkisim.core.ops import registers as _reg
from nkisim.frontends._operators import alu as _alu
from nkisim.frontends.nki import isa as _isa
from nkisim.frontends.nki.isa import VirtualRegister as _VirtualRegister
from nkisim.frontends.nki.language import NKIObject, NkiTensor  # noqa: F401  (as the stub does)


class ReplicaGroup(NKIObject):
    """The groups of ranks a collective runs over (lists of ranks, no overlap): ``ReplicaGroup([[0]])``.

    The docs (nki.collectives.ReplicaGroup, NKI 0.6) show the dataclass without its fields; nkisim takes the list of
    rank lists positionally or as ``replica_groups=``."""

    def __init__(self, replica_groups=None, **kwargs) -> None:
        groups = kwargs.pop("groups", replica_groups)
        super().__init__(**kwargs)
        if groups is None:
            raise TypeError("ReplicaGroup needs the list of rank lists, e.g. ReplicaGroup([[0]])")
        self.replica_groups = [list(g) for g in groups]
        seen = [r for g in self.replica_groups for r in g]
        if len(seen) != len(set(seen)):
            raise ValueError(f"ReplicaGroup {self.replica_groups}: sub-groups must not overlap")

    def __repr__(self) -> str:
        return f"ReplicaGroup({self.replica_groups})"


def _groups(replica_group) -> list:
    if not isinstance(replica_group, ReplicaGroup):
        raise TypeError(f"replica_group must be an ncol.ReplicaGroup, got {type(replica_group).__name__}")
    return replica_group.replica_groups


def all_reduce(srcs, dsts, replica_group, op, priority=None, name=None) -> None:
    """Reduce ``srcs`` over the group into ``dsts`` (one rank: a copy)."""
    _col.all_reduce(srcs, dsts, _groups(replica_group), _alu(op, "all_reduce"))


def all_gather(srcs, dsts, replica_group, collective_dim, priority=None, name=None) -> None:
    """Concatenate every rank's src along ``collective_dim`` (one rank: a copy)."""
    _col.all_gather(srcs, dsts, _groups(replica_group), collective_dim)


def all_gather_v(srcs, dsts, replica_group, metadata_tensor, recv_counts_known=False, has_rdispls=False,
                 priority=None, name=None) -> None:
    """Variable-length all-gather of flat element chunks described by a uint32 metadata tensor."""
    if has_rdispls:
        raise NotImplementedError("ncol.all_gather_v: has_rdispls=True is not supported (nki.collectives."
                                  "all_gather_v, 'Current limitations')")
    _col.variable(srcs, dsts, _groups(replica_group), metadata_tensor, recv_counts_known, False, "all_gather_v")


def reduce_scatter(srcs, dsts, replica_group, collective_dim, op, priority=None, name=None) -> None:
    """Reduce over the group and keep this rank's chunk along ``collective_dim`` (one rank: a copy)."""
    _col.reduce_scatter(srcs, dsts, _groups(replica_group), collective_dim, _alu(op, "reduce_scatter"))


def all_to_all(srcs, dsts, replica_group, collective_dim, priority=None, name=None) -> None:
    """Exchange chunks along ``collective_dim`` (one rank: a copy; HBM only)."""
    _col.all_to_all(srcs, dsts, _groups(replica_group), collective_dim)


def all_to_all_v(srcs, dsts, replica_group, metadata_tensor, recv_counts_known=False, has_rdispls=False,
                 priority=None, name=None) -> None:
    """All-to-all of flat element chunks whose counts and displacements a uint32 metadata tensor holds."""
    _col.variable(srcs, dsts, _groups(replica_group), metadata_tensor, recv_counts_known, bool(has_rdispls),
                  "all_to_all_v")


def collective_permute(srcs, dsts, source_target_pairs, priority=None, name=None) -> None:
    """Send src to the targets of explicit (source, target) pairs (one rank: only (0, 0))."""
    _col.collective_permute(srcs, dsts, source_target_pairs)


def collective_permute_implicit(srcs_by_channel, dsts_by_channel, replica_group, channel_ids=(0,), priority=None,
                                name=None) -> None:
    """Send to the ring successor, receive from the predecessor, per channel (one rank: itself)."""
    _col.collective_permute_implicit(srcs_by_channel, dsts_by_channel, _groups(replica_group), channel_ids)


def collective_permute_implicit_reduce(srcs0_by_channel, srcs1_by_channel, dsts_by_channel, replica_group, op,
                                       channel_ids=(0,), priority=None, name=None) -> None:
    """Send ``op(src0, src1)`` to the ring successor (one rank: into its own dst)."""
    _col.collective_permute_implicit_reduce(srcs0_by_channel, srcs1_by_channel, dsts_by_channel,
                                            _groups(replica_group), _alu(op, "collective_permute_implicit_reduce"),
                                            channel_ids)


def collective_permute_implicit_current_processing_rank_id(iteration_id, replica_group, channel_id=0, name=None):
    """The rank whose data ring step ``iteration_id`` processes, in a register (one rank: always 0)."""
    _col.check_group(_groups(replica_group), "collective_permute_implicit_current_processing_rank_id")


def rank_id(name=None):
    """This rank's id in a register (nkisim's single rank: 0)."""
    reg = _VirtualRegister()
    _isa.register_move(reg, 0)  # the front end's instruction (recorded in a dynamic loop body)
    return reg


_reg.wrap_api(globals(), exclude={"rank_id"})
rank_id = _reg.stream_only(rank_id)


def __getattr__(name: str):
    from nkisim.frontends import NKI, _unsupported

    return _unsupported.missing(NKI, "ncol", name)


del annotations  # the __future__ import must not leak as an NKI name
