"""Hand-built instruction traces: for scheduler unit tests and model experiments without the NKI front end."""

from __future__ import annotations

from itertools import count

from nkisim.core.instr import Buf, Engine, Instr, Operand, Region, Trace

_ITEMSIZE = {"float32": 4, "bfloat16": 2, "float16": 2, "int32": 4, "float8_e4m3": 1, "uint8": 1}


class TraceBuilder:
    """Append instructions with explicit physical buffers: ``tile()`` makes a region, the op helpers emit."""

    def __init__(self, target: str = "trn2", kernel_name: str = "synthetic") -> None:
        self.trace = Trace(target, kernel_name)
        self._phys = count(1)

    # ---- regions --------------------------------------------------------------------------------------------
    def new_phys(self) -> int:
        return next(self._phys)

    def operand(
        self,
        buf: Buf,
        phys: int,
        partitions: int,
        free: int,
        dtype: str = "float32",
        *,
        p_lo: int = 0,
        b_lo: int = 0,
        stride_elems: int = 1,
        contiguous_bytes: int | None = None,
    ) -> Operand:
        isz = _ITEMSIZE[dtype]
        span = free * isz * stride_elems
        if buf == Buf.HBM:
            region = Region(buf, phys, 0, 1, b_lo, b_lo + partitions * span)
            contig = contiguous_bytes if contiguous_bytes is not None else partitions * free * isz
        else:
            region = Region(buf, phys, p_lo, p_lo + partitions, b_lo, b_lo + span)
            contig = contiguous_bytes if contiguous_bytes is not None else (free * isz if stride_elems == 1 else isz)
        return Operand(
            region=region,
            shape=(partitions, free),
            dtype=dtype,
            itemsize=isz,
            partitions=partitions,
            free_elems=free,
            inner_stride_bytes=isz * stride_elems,
            contiguous_bytes=contig,
        )

    def sbuf(self, partitions: int, free: int, dtype: str = "float32", phys: int | None = None, **kw) -> Operand:
        return self.operand(Buf.SBUF, phys if phys is not None else self.new_phys(), partitions, free, dtype, **kw)

    def psum(self, partitions: int, free: int, dtype: str = "float32", phys: int | None = None, **kw) -> Operand:
        return self.operand(Buf.PSUM, phys if phys is not None else self.new_phys(), partitions, free, dtype, **kw)

    def hbm(self, partitions: int, free: int, dtype: str = "float32", phys: int | None = None, **kw) -> Operand:
        return self.operand(Buf.HBM, phys if phys is not None else self.new_phys(), partitions, free, dtype, **kw)

    # ---- instructions ---------------------------------------------------------------------------------------
    def emit(self, op: str, engine: Engine, srcs, dsts, where: str = "", **attrs) -> Instr:
        ins = Instr(len(self.trace.instrs), op, engine, tuple(srcs), tuple(dsts), dict(attrs), where)
        self.trace.instrs.append(ins)
        return ins

    def dma(self, src: Operand, dst: Operand, where: str = "", via: str = "dma_copy") -> Instr:
        nbytes = dst.partitions * dst.free_elems * dst.itemsize
        cast = src.dtype != dst.dtype
        return self.emit("dma_copy", Engine.DMA, [src], [dst], where, bytes=nbytes, via=via, cast=cast)

    def matmul(self, stationary: Operand, moving: Operand, psum: Operand, accumulate: bool = False,
               where: str = "", is_transpose: bool = False) -> Instr:
        return self.emit(
            "nc_matmul", Engine.TENSOR, [stationary, moving], [psum], where,
            K=stationary.partitions, M=stationary.free_elems, N=moving.free_elems,
            accumulate=accumulate, is_transpose=is_transpose,
        )

    def tensor_tensor(self, a: Operand, b: Operand, out: Operand, alu: str = "add",
                      engine: Engine = Engine.VECTOR, where: str = "") -> Instr:
        return self.emit("tensor_tensor", engine, [a, b], [out], where, alu=alu)

    def tensor_scalar(self, a: Operand, out: Operand, operand: Operand | None = None, alu: str = "add",
                      engine: Engine = Engine.VECTOR, where: str = "") -> Instr:
        srcs = [a] if operand is None else [a, operand]
        return self.emit("tensor_scalar", engine, srcs, [out], where, alu0=alu, alu1=None)

    def tensor_copy(self, a: Operand, out: Operand, engine: Engine = Engine.VECTOR, where: str = "") -> Instr:
        return self.emit("tensor_copy", engine, [a], [out], where)

    def activation(self, a: Operand, out: Operand, func: str = "exp", where: str = "") -> Instr:
        return self.emit("activation", Engine.SCALAR, [a], [out], where, func=func)
