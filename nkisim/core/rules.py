"""The constraint catalogue: every rule nkisim enforces, with its code, wording and source.

Codes starting with ``err_`` are the Neuron compiler's own error codes (nki.errors, SDK 2.26) and use its
wording; the ``nkisim_`` codes are hardware limits the docs state without an official error text.  The docs and
the tests list the rules from this one table.
"""

from __future__ import annotations

from dataclasses import dataclass

from nkisim.core.sealed import Sealed

ERRORS_URL = "https://awsdocs-neuron.readthedocs-hosted.com/en/latest/general/nki/api/nki.errors.html"


@dataclass(frozen=True, slots=True)
class Rule:
    code: str
    template: str
    source: str
    official: bool  # True when ``code`` and the wording are the Neuron compiler's
    eras: tuple[str, ...] = ("2024", "2025", "nki")  # rule eras that enforce it (nkisim.core.config.ERAS)
    era_note: str = ""  # what differs between the eras, and the evidence


class NKIError(ValueError, metaclass=Sealed):
    """A kernel broke an NKI or hardware rule.  ``code`` names the rule in :data:`RULES`."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


class DeviceFault(NKIError):
    """A run-time error of the device program (an access outside its tensor, ...), raised once the kernel's Python
    has returned.  Its message names the instruction and the tensor, never a run-time value."""

    def __init__(self, message: str, code: str = "nkisim_device_fault") -> None:
        super().__init__(code, message)


class DeviceIndexFault(DeviceFault, IndexError):
    """An access outside its tensor at run time (AWS's simulator raises ``IndexError`` for an out-of-bounds indirect
    DMA; the code is the compile-time bounds error's, ``err_tensor_access_out_of_bound``)."""

    def __init__(self, message: str) -> None:
        super().__init__(f"Out-of-bound access at run time: {message}", "err_tensor_access_out_of_bound")


class NKICapacityError(NKIError, MemoryError):
    """An SBUF capacity error the compiler's allocator reports: one instruction's tiles do not fit in a partition
    (GCA035), or a tile does not fit beside the explicit placements.  Over-subscription by automatically allocated
    tiles spills instead (core.spill), as PSUM does.  Also an HBM tensor larger than the device memory one
    NeuronCore addresses (nkisim_hbm_capacity).  A MemoryError too, as NumPy's own error for such an array was."""


class NKISimulationWarning(UserWarning):
    """A kernel AWS's simulator runs although the compiler rejects it: it returns an on-chip tile.

    The known-issues page says "Top-level tensors must be on HBM" (nki_known_issues, Unsupported Syntax 1), yet
    AWS's ``range_select`` doc test returns an SBUF tile from an ``nki.jit(mode='simulation')`` kernel and checks
    its values.  So simulation warns and returns the values; compiling still fails.  The same holds for the PSUM
    accumulation patterns that give wrong results on hardware (``nc_matmul(accumulate=True)`` onto PSUM no matmul
    wrote, or a non-matmul instruction initialised): "nc_matmul warns on PSUM accumulation patterns that produce
    incorrect results on hardware" (NKI 0.6.0 release notes)."""


class NKICapacityWarning(UserWarning):
    """A capacity limit the compiler enforces, broken under ``nki.simulate_kernel``, which does not check it.

    AWS's CPU simulator "allocates each tensor independently without ... validating against SBUF/PSUM capacity
    limits" (NKI CPU Simulator guide, "Memory Model", aws-neuron-sdk nki/guides/nki_simulator.rst), and AWS's own
    attention-tutorial test runs v9 then v10 in one simulation process although v10's direct placements then end
    past the usable SBUF (on hardware that test runs only one of the two).  So simulation warns; compiling
    (baremetal, benchmark, the grader) still fails."""


class NKIIndexError(NKIError, IndexError):
    """An out-of-bounds access (err_tensor_access_out_of_bound).  Also an IndexError: AWS's simulator raises
    IndexError for an out-of-bounds indirect DMA (its doc test general/nki/test/test_nki_isa_dma_copy.py,
    ``assertRaises(IndexError)`` for ``oob_mode=nisa.oob_mode.error``)."""


def _r(code: str, template: str, source: str, eras: tuple[str, ...] = ("2024", "2025", "nki"),
       era_note: str = "") -> Rule:
    return Rule(code, template, source, official=code.startswith("err_"), eras=eras, era_note=era_note)


def applies(code: str, era: str) -> bool:
    """Whether the rule era ``era`` ('2024' | '2025' for the legacy API's course toolchains, 'nki' for the current
    API) enforces rule ``code``."""
    return era in RULES[code].eras


_RULE_LIST = [
    # --- official compiler errors (nki.errors @2.26; wording from the docs and students' logs) ---
    _r("err_num_partition_exceed_arch_limit",
       "number of partitions {n} exceed architecture limitation of {limit}",
       "nki.errors; ValueError text seen on trn2 (shared/nki-api.md 2.3)"),
    _r("err_num_partition_mismatch",
       "number of partitions (dimension 0 size of a tile) mismatch in parameters ({params}) of '{op}'",
       "nki.errors"),
    _r("err_size_of_dimension_exceed_arch_limit",
       "size of dimension {dim} in '{param}' of '{op}' exceed architecture limitation of {limit}.",
       "nki.errors"),
    _r("err_exceed_max_supported_dimension",
       "parameter '{param}' of '{op}' exceed max supported number of dimensions of {limit}.",
       "nki.errors"),
    _r("err_unsupported_memory",
       "Expected operand '{operand}' of '{op}' to be in address space '{expected}', but got a tile in '{got}' "
       "instead.",
       "nki.errors; nki.isa memory rules (dma_copy: HBM/SBUF only; nc_matmul: SBUF in, PSUM out)"),
    _r("err_store_dst_shape_smaller_than_other_shape",
       "Illegal assignment destination shape in 'a = b': shape {dst} of parameter 'a' is smaller than other "
       "parameter shapes b{src}.",
       "nki.errors"),
    _r("err_tensor_access_out_of_bound",
       "Out-of-bound access for tensor `{name}` on dimension {dim}: index range [{lo}, {hi}] exceed dimension "
       "size of {size}",
       "nki.errors"),
    _r("err_failed_to_infer_tile_from_local_tensor",
       "Failed to infer tile from tensor '{name}', the first dimension of a tile must be the partition "
       "dimension; index away the block dimensions first",
       "nki.errors"),
    _r("err_1d_arange_not_supported",
       "indexing tensor `{name}` with 1d arange is not supported, use nl.arange(n)[:, None] or "
       "nl.arange(n)[None, :]",
       "nki.errors"),
    _r("err_unsupported_mixing_basic_advanced_tensor_indexing",
       "Mixing basic tensor indexing and advanced tensor indexing is not supported.",
       "nki.errors"),
    _r("err_cannot_assign_to_index",
       "'index' tensor does not support item assignment",
       "nki.errors"),
    _r("err_control_flow_condition_depending_on_arange",
       "Control-flow depending on `nl.arange` or `nl.mgrid` is not supported",
       "nki.errors"),
    _r("err_dynamic_control_flow_not_supported",
       "dynamic control-flow depending on tensor value is not supported.",
       "nki.errors"),
    _r("err_annotation_shape_mismatch",
       "shape of `{name}{got}` does not match the expected shape of {expected}",
       "nki.errors @2.26 (kernel parameter annotated nt.tensor[shape])"),
    _r("err_ambiguous_tensor_truth_value",
       "The truth value of an array with more than one element is ambiguous",
       "nki.errors"),
    _r("err_cannot_update_immutable_parameter",
       "Cannot update immutable parameter '{name}': kernel inputs are read-only; write results into a new "
       "nl.ndarray(..., buffer=nl.hbm) and return it",
       "nki.errors"),
    _r("err_hbm_tensor_with_init_value_not_supported",
       "Creating HBM tensor with init value is not supported.",
       "nki.errors @2.26", eras=("2025", "nki"),
       era_note="2024: accepted (kernels creating their output with nl.zeros(..., buffer=nl.hbm) passed on trn1 "
                "hardware with the course's SDK 2.20/2.21 compiler, issue 10); the error is listed from the SDK 2.26 "
                "nki.errors page on"),
    _r("err_shared_hbm_must_in_kernel_level",
       "shared_hbm buffer can only be created top level kernel scope",
       "nki.errors", eras=("2024", "2025"),
       era_note="nki (0.x compiler): not checked. The legacy nki.errors page refuses shared_hbm created in a loop, "
                "under an if or in a function the kernel calls; AWS's nki-library (d2ad3a5) kernels, run on "
                "Trainium by its fast suite without any compiler flag, create shared_hbm outputs and scratch in "
                "helpers (rotational_topk_utils.naive_scanning_topk, bwmm_bwd_dropless, "
                "attention_block_tkg_sharding) and under ifs (rotational_topk, cross_entropy_backward). The "
                "compiler's opt-out experimental_flags='skip-non-top-level-shared-hbm-check' (QKV kernel) shows a "
                "narrower check remains; which scope it covers is not documented (no nki-library kernel creates "
                "shared_hbm in a loop)"),
    _r("err_nki_api_outside_of_nki_kernel",
       "Calling NKI API outside of NKI kernels is not supported. ({api})",
       "nki.errors"),
    _r("err_transpose_on_tensor_engine_not_allowed_in_allocated_kernel",
       "'{op}' on the Tensor Engine is not allowed in a kernel with direct allocation",
       "nki.errors @2.26; nki_direct_allocation_guide.rst"),
    _r("err_tensor_output_not_written_to",
       "output tensor '{name}' returned by the kernel is never written to",
       "nki.errors"),
    # --- hardware limits stated in the ISA reference / architecture guides ---
    _r("nkisim_matmul_stationary_fmax",
       "nc_matmul: stationary free size {m} exceeds gemm_stationary_fmax {limit} (stationary {shape})",
       "nki.isa.nc_matmul; tile_size.gemm_stationary_fmax"),
    _r("nkisim_matmul_moving_fmax",
       "nc_matmul: moving free size {n} exceeds gemm_moving_fmax {limit} (moving {shape})",
       "nki.isa.nc_matmul; tile_size.gemm_moving_fmax"),
    _r("nkisim_matmul_psum_bank",
       "{op}: output {shape} ({nbytes} bytes per partition at offset {offset}) must lie within one {bank} "
       "byte PSUM bank",
       "trainium arch guide: one MultiplyMoving writes exactly one 2 KiB PSUM bank"),
    _r("nkisim_psum_tile_fmax",
       "PSUM tile '{name}' {shape} has {n} free elements of {nbytes} bytes per partition: a PSUM tile's free size "
       "must not exceed nl.tile_size.psum_fmax ({limit} fp32 elements, one {bank}-byte bank)",
       "nki.language.tile_size (legacy general/nki docs, v2.26.0): psum_fmax = 'Maximum free dimension of a tile "
       "on PSUM buffer'; programming model 'Tile size considerations' (PSUM tile free size <= 2 KiB per partition)",
       eras=("2024",),
       era_note="2025: not enforced (NKI 0.4 docs deprecate psum_fmax as a tile limit, and the trn2 course "
                "year's kernels agree with their hardware verdicts without it); no compiler wording found, the "
                "text names the documented constant"),
    _r("nkisim_matmul_dtype",
       "nc_matmul: {detail}",
       "nki.isa.nc_matmul: fp8/bf16/fp16/tf32/fp32 inputs; fp32/tf32 must pair with fp32/tf32"),
    _r("nkisim_matmul_onezero_hint",
       "{op}: {hint}=True but the {operand} tile ({dtype}) holds values other than ones and zeros: the "
       "hint lets TensorE run the fp32 matmul in fewer passes (\"could lead to 2x better performance\"), which "
       "holds only for a 0/1 tile; pass it only for tiles of zeros and ones",
       "nki.isa.nc_matmul (2.21, 2.26): is_stationary_onezero / is_moving_onezero \"hints ... whether the operand "
       "is a tile with ones/zeros only\"; fp32 only. nkisim checks the promise (grading security, G3)"),
    _r("nkisim_matmul_transpose_mode",
       "{op}: is_transpose=True turns on the Tensor Engine's transpose mode, which transposes the stationary tile "
       "(the moving tile must be the [K, K] identity), but the moving tile {shape} {why}: use is_transpose=False "
       "for a matrix product",
       "nki.isa.nc_matmul 'Transpose mode' (NeuronCore-v3: bit-accurate transpose of the stationary, identity as "
       "the moving); trainium2 arch guide, TensorE transpose mode. nkisim checks the promise (grading security, "
       "G4)"),
    _r("nkisim_transpose_limit",
       "nc_transpose on {engine}: input {shape} exceeds the {limit}x{limit} limit of that engine",
       "nki.isa.nc_transpose: Tensor Engine <= [128,128], Vector Engine <= [32,32]"),
    _r("nkisim_gpsimd_psum",
       "{op}: GpSimd Engine cannot access PSUM (operand '{operand}' is in psum)",
       "trainium arch guide; nki.isa tensor_copy/tensor_tensor"),
    _r("nkisim_two_inputs_in_psum",
       "{op}: the two input tensors cannot both be in PSUM",
       "nki.isa.tensor_tensor",
       era_note="2024: `acc[...] = acc + nl.matmul(...)` is accepted as PSUM accumulation (same meaning as "
                "`acc += nl.matmul(...)`; kernels spelling it so passed on trn1 hardware, issue 10)"),
    _r("nkisim_shape_mismatch",
       "{op}: operand shapes {shapes} are not compatible{detail}",
       "nki.isa elementwise ops: same partition size and elements per partition, or a (P, 1) operand"),
    _r("nkisim_dtype_not_supported",
       "{op}: dtype {dtype} is not supported for operand '{operand}'{detail}",
       "nki.isa per-instruction dtype lists"),
    _r("err_activation_bias_invalid_type",
       "Bias parameter of activation or activation_reduce must be a vector of type float32, float16, or bfloat16: "
       "a ({p}, 1) tile, got {got}",
       "nki.errors @2.26 (the description, verbatim); nki.isa.activation"),
    _r("err_activation_scale_invalid_type",
       "Scale parameter of activation or activation_reduce must be a scalar or vector of type float32, got {got}",
       "nki.errors @2.26 (the description, verbatim); nki.isa.activation"),
    _r("err_activation_scale_scalar_or_vector",
       "Scale parameter of activation must be either a scalar value or a 1D vector spanning the partition "
       "dimension: a ({p}, 1) tile, got {got}",
       "nki.errors @2.26 (the description, verbatim); nki.isa.activation"),
    _r("nkisim_engine_op_unsupported",
       "{op} on {engine} is not supported on {target}: {detail}",
       "nki.isa.tensor_scalar engine notes (ScalarE: multiply / add / multiply->add only; on trn1 not in the "
       "2025 era, SH-226 'Add/Multiply on ScalarE only from NC-v3'; trn1 ScalarE tensor_copy copies through fp32); "
       "GpSimd runs add, multiply, power and rsqrt only (SH-226 ALU operator table, supported engines)"),
    _r("nkisim_partition_start",
       "{op} on {engine}: the {operand} occupies {n} partition(s) starting at partition {start}; a compute-engine "
       "SBUF/PSUM operand of {n} partition(s) must start at partition {legal} (start-partition rule: 64 < P <= 128 "
       "at 0, 32 < P <= 64 at 0 or 64, P <= 32 at 0/32/64/96)",
       "trainium_inferentia2_arch.rst 'Accessing SBUF/PSUM tensors using compute engines' (start_partition / "
       "num_partition; the trainium2 guide states no change for NeuronCore-v3); nki.isa.nc_stream_shuffle. DMA "
       "instructions are exempt (grading security, G10)"),
    _r("nkisim_cross_partition",
       "{op} on {engine}: moves partitions [{s_lo}, {s_hi}) of the source {src} to partitions [{d_lo}, {d_hi}) of "
       "the destination {dst}; compute engines move {n} partition(s) across partitions only between the starts "
       "{legal} (none for P > 64, cross-half for 32 < P <= 64, cross-quadrant for P <= 32): move the data with "
       "a DMA (nisa.dma_copy) or a TensorE matmul/transpose instead",
       "trainium_inferentia2_arch.rst 'Cross-Partition Connectivity' and the start-partition rule (grading "
       "security, G10)"),
    _r("nkisim_dma_element_mismatch",
       "dma_copy: source {src} and destination {dst} must have the same number of elements",
       "nki.isa.dma_copy"),
    _r("nkisim_free_size_limit",
       "{op}: {n} elements per partition from {buffer} exceeds the engine limit of {limit}",
       "trainium arch guide: Vector/Scalar free size <= 64K elements (SBUF), 4K (PSUM)"),
    _r("nkisim_reduce_partition_axis",
       "{op}: cannot reduce along the partition axis (axis 0); reduce free axes only (got axis={axis})",
       "nki.isa.tensor_reduce"),
    _r("nkisim_scalar_operand_shape",
       "{op}: operand {operand} must be a scalar or a per-partition vector of shape ({p}, 1), got {shape}",
       "nki.isa.tensor_scalar / activation"),
    _r("nkisim_reduce_res_shape",
       "{op}: reduce_res must be a SBUF/PSUM tile with the same partition axis size as the input tile and one "
       "element per partition, shape ({p}, 1); got {shape}",
       "nki.isa.activation_reduce / tensor_scalar_reduce (NKI 0.6): reduce_res 'must be a SBUF/PSUM tile with the "
       "same partition axis size as the input tile data and one element per partition', 'a tile of shape "
       "(data.shape[0], 1)'; select_reduce: 'a vector of shape (on_true.shape[0], 1)'"),
    _r("nkisim_hbm_opaque",
       "HBM tensor '{name}' lives in device memory: kernel code cannot read or compute on it on the host "
       "({action}). Move data on-chip with nisa.dma_copy(src=..., dst=...) or nl.load(...) first",
       "NKI programming model: compute engines only address SBUF/PSUM"),
    _r("nkisim_reshape",
       "reshape of '{name}' {shape} to {new}: {detail}",
       "nki tensor.reshape"),
    _r("nkisim_hbm_capacity",
       "HBM tensor{name} {shape} {dtype} needs {nbytes} bytes ({size}), more than the {limit} bytes "
       "({limit_gib} GiB) of device memory one NeuronCore of {target} can address: split it over several kernel "
       "launches or make it smaller",
       "HBM 16 GiB per NeuronCore on trn1 (32 GiB per chip, 2 cores: trainium_inferentia2_arch.rst; 'On inf2/trn1, "
       "each Neuron core has 16GB of memory', nxd-inference api-guide.rst), 24 GiB on trn2 (96 GiB in 4 banks of "
       "24 GiB, each shared by two physical NeuronCore-v3: trainium2_arch.rst, logical-neuroncore-config.rst); "
       "checked once per HBM tensor (kernel arguments, nl.ndarray/nl.zeros in HBM)"),
    _r("nkisim_sbuf_capacity",
       "SBUF over-subscribed on {target}: {peak} bytes per partition live, capacity {capacity} bytes per "
       "partition. Largest live tiles: {tiles}",
       "SBUF 192 KiB (trn1) / 224 KiB (trn2) per partition minus the compiler reserve (tile_size)"),
    _r("nkisim_sbuf_instruction",
       "Instruction: {op} at {where} couldn't be allocated in SB. Memory Location Accessed: {locations}. Total "
       "Accessed Bytes per partition by instruction: {total}, Total SB Partition Size: {size}. The SBUF tiles one "
       "instruction reads and writes must fit in one partition together (the compiler can spill other tiles, not "
       "these): split the instruction over smaller tiles of the free dimension",
       "neuronx-cc GCA035 (aws-neuron-sdk issue #1060, trn1: 'Total Accessed Bytes per partition by instruction: "
       "198024, Total SB Partition Size: 196608'); every operand counted, the same tile once per operand (the current "
       "API: each distinct tile once, narrow tiles placed apart by partition range: core.spill.packed_bytes)"),
    _r("nkisim_direct_alloc",
       "direct allocation: {detail}",
       "nki.compiler.sbuf.mod_alloc; nki_direct_allocation_guide.rst"),
    # --- explicit placement of the current API: nl.ndarray(..., address=(partition_offset, free_offset)) ---
    # (core.placement.placed / AddressPlacement; free_offset counts bytes: see the note there)
    _r("nkisim_address_form",
       "nl.ndarray: address={got} must be a (partition_offset, free_offset) pair of integers (the partition lane "
       "and the byte offset within each partition)",
       "nki.language.ndarray (nki/api/nki/language/__init__.py, NKI 0.6): 'address: optional memory address "
       "(partition_offset, free_offset)'", eras=("nki",)),
    _r("nkisim_address_negative",
       "nl.ndarray: address=({p}, {f}) has a negative offset: partition_offset and free_offset count from the "
       "first partition and from the first byte of each partition",
       "nki.language.ndarray; NKI migration guide 'Improved allocation API' (physical partition lane, offset "
       "within each partition)", eras=("nki",)),
    _r("nkisim_address_hbm",
       "nl.ndarray: address=({p}, {f}) places a tensor in the two-dimensional on-chip memories (nl.sbuf, nl.psum); "
       "a tensor in {buffer} is placed by the runtime: leave address unset",
       "NKI data representation overview (nki/get-started/about): an HBM tensor has 'only one offset and size', "
       "SBUF and PSUM tensors a (partition, free) pair; NKI migration guide 'Improved allocation API' (SBUF and "
       "PSUM addresses only). No compiler wording found", eras=("nki",)),
    _r("nkisim_address_partitions",
       "nl.ndarray: tensor '{name}' at partition_offset {p} with {parts} partitions needs partitions [{p}, "
       "{p} + {parts}), beyond the {limit} partitions of the memory",
       "NKI migration guide 'Improved allocation API': the partition offset 'corresponds to a physical partition "
       "lane'; SBUF and PSUM have 128 partitions (trainium arch guides)", eras=("nki",)),
    _r("nkisim_address_sbuf_range",
       "nl.ndarray: SBUF tensor '{name}' at free_offset {f} needs bytes [{f}, {end}) of each partition ({nbytes} "
       "per partition), beyond the {limit} usable on {target} (nl.tile_size.sbuf_fmax_bytes)",
       "nki.language.tile_size.sbuf_fmax_bytes ('Usable SBUF free size per partition, in bytes'); "
       "nki_direct_allocation_guide.rst (2.26): a byte address from 0 to the physical partition size minus the "
       "compiler's reserve (exclusive)", eras=("nki",)),
    _r("nkisim_address_psum_bank",
       "nl.ndarray: PSUM tensor '{name}' at free_offset {f} does not start at the beginning of a {bank}-byte bank "
       "(the nearest bank starts are {lo} and {hi})",
       "NKI migration guide 'Improved allocation API': 'The allocation for PSUM tensors must start at the "
       "beginning of each bank -- the compiler will throw an error otherwise' (error text not published)",
       eras=("nki",)),
    _r("nkisim_address_psum_range",
       "nl.ndarray: PSUM tensor '{name}' at free_offset {f} needs bytes [{f}, {end}) of each partition ({nbytes} "
       "per partition), beyond the {limit} bytes of PSUM ({banks} banks of {bank} bytes)",
       "NKI migration guide 'Improved allocation API': PSUM is 128 partitions of 16KB, 8 banks of 2KB each",
       eras=("nki",)),
    _r("nkisim_bad_argument",
       "{op}: {detail}",
       "nki API signatures"),
    _r("nkisim_partition_lanes",
       "{op} on {engine}: the {side} {shape} view of '{name}' cannot be an engine operand: {why}. An engine "
       "instruction reads a contiguous run of partitions, every partition walking the same free pattern in its "
       "own memory; move data across partitions with a DMA (nl.load/nl.store, dma_copy) or a TensorE transpose "
       "(nc_transpose)",
       "trainium_inferentia2_arch.rst 'Accessing SBUF/PSUM tensors using compute engines' (no P-dimension "
       "striding; a continuous run of partitions; one free pattern); message wording is nkisim's"),
    # --- rules of the current API (nki, NKI 0.2+) ---
    _r("nkisim_view",
       "{op} of '{name}': {detail}",
       "nki.language.NkiTensor view methods (nki/api/nki/language/__init__.py, NKI 0.6): permute, broadcast, "
       "expand_dim, squeeze_dim, reshape_dim, flatten_dims, slice, select, view, ap"),
    _r("nkisim_output_view",
       "kernel output '{name}' is a {what} view of its tensor: a view shares the tensor's storage and copies no "
       "data, so the host receives the storage as it lies, not the view; write the output in the layout you return "
       "and return the tensor (or a reshape of it)",
       "nki.language.NkiTensor (NKI 0.6): 'All view operations (slice, permute, reshape, etc.) return new NkiTensor "
       "objects that share the same underlying storage -- no data is copied. Views are consumed by NKI ISA "
       "instructions'; what the host receives is the output tensor's storage (grading security S12)"),
    _r("nkisim_output_buffer",
       "kernel output '{name}' is in {buffer}: all kernel output (return) tensors must be allocated with "
       "buffer=nl.shared_hbm",
       "NKI migration guide (0.2 -> 0.3): 'Using nl.hbm for output tensors will cause compilation failures'",
       eras=("nki",), era_note="legacy API: nl.hbm outputs are the course's convention"),
    _r("nkisim_kernel_signature",
       "kernel '{kernel}': {detail}",
       "NKI migration guide (0.2 -> 0.3), 'NKI 0.3.0 compiler has stricter validation': 'does not support list as a "
       "kernel argument type. Convert list arguments to tuples at the call site'; 'does not support the * separator "
       "in kernel function signatures'",
       eras=("nki",), era_note="legacy API: the 2.2x compiler took list arguments and keyword-only parameters"),
    _r("nkisim_reduce_axes",
       "{op}: the reduction axes {axes} of a {ndim}-D tile must be the last contiguous free dimension(s) (for a "
       "4-D tile: (3,), (2, 3) or (1, 2, 3))",
       "nki.isa.tensor_reduce (NKI 0.6): 'must be the last contiguous free dimension(s) ending at the final dim'; "
       "NKI 0.3 migration guide, 'tensor_reduce axis handling fix'",
       eras=("nki",), era_note="legacy API: any free axes"),
    _r("nkisim_scalar_engine_copy",
       "tensor_copy on the Scalar Engine is not supported on NeuronCore-v2 ({target}): use nisa.activation(dst, "
       "op=nl.copy, data=src)",
       "nki.isa.tensor_copy (NKI 0.6): 'On NeuronCore v2, tensor_copy is not supported on the Scalar Engine'",
       eras=("nki",), era_note="legacy API (2.21 / 2.26 docs): ScalarE copies through fp32 on NeuronCore-v2"),
    _r("nkisim_lnc_lockstep",
       "{detail}",
       "nki/get-started/about/lnc.rst ('the program on each core is \"the same\"'); nki.isa.sendrecv ('operations "
       "with the same pipe_id ... must complete before any can proceed'), nki.isa.core_barrier ('all specified "
       "NeuronCores must reach before any can proceed')",
       eras=("nki",)),
    _r("nkisim_memset_value",
       "memset: value {value!r} does not match dst '{name}' of dtype {dtype} (an integer tensor takes an integer "
       "value)",
       "NKI 0.3 migration guide, 'nisa.memset - strict type matching'",
       eras=("nki",), era_note="legacy API: the value is cast.  A float zero is accepted (AWS's nki-library memsets "
                               "uint32 tiles with value=0.0 in the router top-k path its fast suite runs)"),
    _r("nkisim_mixed_namespaces",
       "'{call}' called in a kernel written for {kernel}: a kernel uses one NKI namespace, so call {kernel}'s "
       "spelling of it (or launch the kernel with {used}'s nki.jit)",
       "NKI 0.4 migration guide: 'Using the deprecated neuronxcc.nki.* namespace inside NKI kernels now raises a "
       "compilation error'"),
    _r("nkisim_matmul_accumulate_uninit",
       "{op}: accumulate=True adds to the PSUM destination {dst}, but part of it holds no data yet: the first "
       "matmul into a PSUM location must overwrite it (accumulate=False, or None to let the compiler choose)",
       "nki.isa.nc_matmul (NKI 0.6), 'Accumulation mode': \"Using accumulate=True on an uninitialized PSUM "
       "location is undefined behavior on all targets\"", eras=("nki",)),
    _r("nkisim_matmul_accumulate_value_init",
       "{op}: accumulate=True adds to the PSUM destination {dst}, but part of it was initialised by a non-matmul "
       "instruction (memset, tensor_copy, ...): on {target} (NeuronCore-v2/v3) a matmul cannot accumulate onto "
       "such values; start the accumulation group with a matmul (accumulate=False, or None to let the compiler "
       "choose) and add other values after it",
       "nki.isa.nc_matmul (NKI 0.6), 'Accumulation mode' note: \"On NeuronCore-v2 and NeuronCore-v3, matmul "
       "accumulating into a PSUM location that was value-initialized by a non-matmul instruction (e.g., memset, "
       "tensor_copy) is not supported and is undefined behavior on hardware\"", eras=("nki",)),
    _r("nkisim_dst_mismatch",
       "{op}: dst {dst} does not match the result {result}{detail}",
       "nki.isa (NKI 0.2+): ISA calls write their destination; its partitions and elements per partition are the "
       "result's (dma_transpose: dst.shape must equal the transposed src.shape exactly, NKI 0.4)"),
]

RULES: dict[str, Rule] = {rule.code: rule for rule in _RULE_LIST}


def message(code: str, **fields) -> str:
    """The catalogue message of ``code`` with its fields filled in."""
    rule = RULES[code]
    text = rule.template.format(**fields)
    if rule.official:
        sep = "" if text.endswith(".") else "."  # templates that end a sentence already: no '..'
        text += f"{sep} Info on how to fix: {ERRORS_URL}#{code.replace('_', '-')}"
    return text


_ERROR_CLASSES = {"nkisim_sbuf_capacity": NKICapacityError, "nkisim_sbuf_instruction": NKICapacityError,
                  "nkisim_hbm_capacity": NKICapacityError,
                  "err_tensor_access_out_of_bound": NKIIndexError}


def error(code: str, **fields) -> NKIError:
    """The catalogue error ``code`` with its message filled in (not raised: a fault is raised later)."""
    return _ERROR_CLASSES.get(code, NKIError)(code, message(code, **fields))


def fail(code: str, **fields) -> None:
    """Raise the catalogue error ``code`` with its message filled in."""
    raise error(code, **fields)


def markdown() -> str:
    """The catalogue as a Markdown table (docs/constraints.md is generated from it)."""
    lines = [
        "# nkisim constraint catalogue",
        "",
        "Generated by `python -m nkisim.core.rules > docs/constraints.md` from `nkisim/core/rules.py`; do not edit.",
        "",
        "Codes starting with `err_` are the Neuron compiler's own error codes and use its wording (official "
        f"descriptions: {ERRORS_URL}); `nkisim_` codes are hardware/API limits the docs state without an "
        "official error text. `{...}` fields are filled in with the offending values.",
        "",
        "The *eras* column says which toolchain enforces a rule: `2024` is the Fall 2024 course toolchain "
        "(Neuron SDK 2.20/2.21 on trn1), `2025` the Fall 2025 one (Neuron SDK 2.26 on trn2), both for the legacy "
        "`neuronxcc.nki` API; `nki` is the current `nki` API (NKI 0.6, Neuron SDK 2.32). For legacy kernels nkisim "
        "derives the era from the target (trn1 -> 2024, trn2 -> 2025; `NKISIM_TOOLCHAIN_ERA=2024|2025` overrides "
        "it), `nki` kernels always run under `nki`; `python -m nkisim info` shows them.",
        "",
        "| code | official | eras | message template | source |",
        "|---|---|---|---|---|",
    ]
    for rule in _RULE_LIST:
        template = rule.template.replace("|", "\\|")
        source = rule.source.replace("|", "\\|")
        if rule.era_note:
            source += "; **era**: " + rule.era_note.replace("|", "\\|")
        eras = ", ".join(rule.eras)
        lines.append(f"| `{rule.code}` | {'yes' if rule.official else 'no'} | {eras} | {template} | {source} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(markdown(), end="")
