"""Targets and the per-generation limits the front end enforces.

Cost-model constants live in nkisim.perf; this table holds only what decides whether a kernel is *legal*.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

DEFAULT_TARGET = "trn2"

# AWS's own simulator reads NEURON_PLATFORM_TARGET_OVERRIDE and accepts these spellings
# (Neuron docs, nki/guides/nki_simulator.rst "Target Platform"; nki.jit docs: trn1|inf2|gen2, trn2|gen3, trn3|gen4).
_TARGET_ALIASES = {"trn1": "trn1", "gen2": "trn1", "inf2": "trn1", "trn2": "trn2", "gen3": "trn2"}
# Targets AWS names that nkisim has no numbers for: the message says what to do instead.
_UNMODELLED = {"trn3": "trn3 (NeuronCore-v4)", "gen4": "trn3 (NeuronCore-v4)"}


@dataclass(frozen=True, slots=True)
class TargetLimits:
    name: str
    core: str
    pmax: int
    sbuf_bytes_per_partition: int
    sbuf_usable_bytes: int
    psum_banks: int
    psum_bank_bytes: int
    gemm_stationary_fmax: int
    gemm_moving_fmax: int
    vector_sbuf_fmax: int
    vector_psum_fmax: int
    vector_transpose_max: int
    hbm_bytes_per_core: int  # the device memory one kernel (one logical NeuronCore) may address

    @property
    def psum_bytes_per_partition(self) -> int:
        return self.psum_banks * self.psum_bank_bytes


TARGETS: dict[str, TargetLimits] = {
    # NeuronCore-v2. SBUF 128 x 192 KiB (trainium_inferentia2_arch.rst); 16 KiB/partition reserved for the
    # compiler -> 176 KiB usable (nki_direct_allocation_guide.rst @2.26; tile_size.total_available_sbuf_size
    # = 180224). PSUM 8 banks x 2 KiB per partition. Vector/Scalar free size <= 64K elements from SBUF, 4K
    # from PSUM (arch guide). VectorE transpose <= 32x32 (nki.isa.nc_transpose).
    "trn1": TargetLimits(
        name="trn1",
        core="NeuronCore-v2",
        pmax=128,
        sbuf_bytes_per_partition=192 * 1024,
        sbuf_usable_bytes=180224,
        psum_banks=8,
        psum_bank_bytes=2048,
        gemm_stationary_fmax=128,
        gemm_moving_fmax=512,
        vector_sbuf_fmax=64 * 1024,
        vector_psum_fmax=4 * 1024,
        vector_transpose_max=32,
        # 32 GiB per chip in 2 HBM stacks shared by its 2 NeuronCores (nki/guides/architecture/
        # trainium_inferentia2_arch.rst); "On inf2/trn1, each Neuron core has 16GB of memory"
        # (libraries/nxd-inference/api-guides/api-guide.rst, developer_guides/feature-guide.rst)
        hbm_bytes_per_core=16 << 30,
    ),
    # NeuronCore-v3. SBUF 128 x 224 KiB (trainium2_arch.rst); usable 212984 B/partition is the value of
    # tile_size.total_available_sbuf_size on trn2 (KLR Trace.lean, see shared/nki-api.md 2.3). PSUM unchanged.
    "trn2": TargetLimits(
        name="trn2",
        core="NeuronCore-v3",
        pmax=128,
        sbuf_bytes_per_partition=224 * 1024,
        sbuf_usable_bytes=212984,
        psum_banks=8,
        psum_bank_bytes=2048,
        gemm_stationary_fmax=128,
        gemm_moving_fmax=512,
        vector_sbuf_fmax=64 * 1024,
        vector_psum_fmax=4 * 1024,
        vector_transpose_max=32,
        # 96 GiB per chip in 4 stacks of 24 GiB (nki/guides/architecture/trainium2_arch.rst); "Each bank is shared
        # by two physical NeuronCore-v3", under LNC=1 "both physical NeuronCores have access to the entire 24GB HBM
        # bank" (about-neuron/arch/neuron-features/logical-neuroncore-config.rst), and "On trn2, each Neuron core
        # has 24GB of memory (with logical_nc_config set to 2)" (nxd-inference api-guide.rst): 24 GiB either way
        hbm_bytes_per_core=24 << 30,
    ),
}


def normalize_target(name: str | None) -> str:
    """Map a user spelling (trn1/gen2/trn2/gen3) to a target key; None means the environment's target."""
    if name is None:
        return current_target()
    spelled = str(name).strip().lower()
    key = _TARGET_ALIASES.get(spelled)
    if key is None and spelled in _UNMODELLED:
        raise ValueError(
            f"Neuron target {name!r} is {_UNMODELLED[spelled]}, which nkisim does not model: it has no limits (e.g. "
            "NeuronCore-v4's matmul moving free size up to 4096, bf16 PSUM outputs) or timings for it, so neither "
            "values nor latencies would be trustworthy. nkisim models trn1 (NeuronCore-v2) and trn2 "
            "(NeuronCore-v3): set NEURON_PLATFORM_TARGET_OVERRIDE=trn2 (the default)")
    if key is None:
        raise ValueError(
            f"unknown Neuron target {name!r}: nkisim models trn1 (NeuronCore-v2) and trn2 (NeuronCore-v3)"
        )
    return key


def current_target() -> str:
    """The target from NEURON_PLATFORM_TARGET_OVERRIDE (AWS's variable), trn2 when unset."""
    raw = os.environ.get("NEURON_PLATFORM_TARGET_OVERRIDE", "").strip()
    return normalize_target(raw) if raw else DEFAULT_TARGET


# Toolchain eras: the course ran on two compilers whose rules differ (shared/nki-api.md, "Toolchain versions
# actually used"): Fall 2024 on trn1 with NeuronX Compiler 2.0.x of Neuron SDK ~2.20/2.21 (docs "2.21 beta"),
# Fall 2025 on trn2 with Neuron SDK 2.26.  Rules that changed between them are tagged with their era in
# nkisim.core.rules; the era follows the target unless NKISIM_TOOLCHAIN_ERA overrides it.
ERA_ENV = "NKISIM_TOOLCHAIN_ERA"
ERAS = {"2024": "Fall 2024 course toolchain (Neuron SDK 2.20/2.21, trn1)",
        "2025": "Fall 2025 course toolchain (Neuron SDK 2.26, trn2)",
        "nki": "the current nki API (NKI 0.6, Neuron SDK 2.32): every kernel that imports `nki`"}
ERA_BY_TARGET = {"trn1": "2024", "trn2": "2025"}
_ERA_ALIASES = {"2024": "2024", "2.20": "2024", "2.21": "2024", "fall2024": "2024",
                "2025": "2025", "2.26": "2025", "fall2025": "2025"}


def normalize_era(name: str) -> str:
    key = _ERA_ALIASES.get(str(name).strip().lower())
    if key is None:
        raise ValueError(f"unknown toolchain era {name!r} (from {ERA_ENV}?): nkisim knows 2024 (Neuron SDK "
                         "2.20/2.21, the trn1 course year) and 2025 (Neuron SDK 2.26, the trn2 course year)")
    return key


def toolchain_era(target: str | None = None) -> str:
    """The era whose rules apply: NKISIM_TOOLCHAIN_ERA if set, else derived from the target (trn1 -> 2024,
    trn2 -> 2025)."""
    raw = os.environ.get(ERA_ENV, "").strip()
    if raw:
        return normalize_era(raw)
    return ERA_BY_TARGET[normalize_target(target)]


def limits(target: str | None = None) -> TargetLimits:
    return TARGETS[normalize_target(target)]


def precise_fp() -> bool:
    """NKI_PRECISE_FP (default 1): store bf16/fp8 in their own precision; 0 stores them as float32.

    Same meaning as in AWS's simulator (nki/guides/nki_simulator.rst, "Precise Floating-Point Mode").
    """
    return os.environ.get("NKI_PRECISE_FP", "1").strip() not in ("0", "false", "False", "")
