"""The instruction builders: one function per NKI hardware instruction, shared by every front end.

Each builder validates its operands against the constraint catalogue (``nkisim/core/rules.py``), emits exactly
one :class:`~nkisim.core.instr.Instr` per hardware instruction and, in full mode, computes the values.  By engine /
job:

* :mod:`~nkisim.core.ops.common` -- operand checks, ``mask=`` evaluation, fresh results, engine limits, registers
* :mod:`~nkisim.core.ops.dma` -- ``dma_copy``, ``load`` / ``store``, ``dma_transpose``, atomic read-modify-write
* :mod:`~nkisim.core.ops.tensor_engine` -- ``nc_matmul`` (incl. FP8 double-row) and the TensorE transpose
* :mod:`~nkisim.core.ops.elementwise` -- Vector/Scalar/GpSimd ALU ops, copies, activations, select, memset
* :mod:`~nkisim.core.ops.reduce` -- reductions, scans, batch-norm statistics, range/select reductions, top-8
* :mod:`~nkisim.core.ops.gpsimd` -- iota, affine_select, gathers, the partition shuffle, random numbers
* :mod:`~nkisim.core.ops.assign` -- ``dst[...] = value`` and ``dst += value`` (retargeting fresh results)

Builders read tensors only through their public properties and :mod:`nkisim.core.access`.
"""
