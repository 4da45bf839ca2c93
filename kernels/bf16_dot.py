"""bf16 dot products with float32 sums (`vdpbf16ps`) for numba kernels, on CPUs with AVX512-BF16 and no AMX.

numba has no bf16 type and no way to ask for the instruction, so these are numba intrinsics that emit LLVM's
`llvm.x86.avx512bf16.dpbf16ps.512` (16 float32 lanes, each adding the products of one pair of bf16 values). bf16
data reach them as int32 arrays, each element a pair of bf16 values, the lower address in the low half, as the
instruction reads them. Two shapes of tile:

- `dot_tile(rows, lanes)`: rows x (16 x lanes) sums kept in registers over a run of pairs, each row's pair
  broadcast to every lane (a small matrix product: kernels/prefill_attention_bf16.py).
- `key_tile(...)`: the dot products of one query row with 16 keys stored row by row (a paged cache's layout),
  each over the head dimension in vectors, then the 16 vectors reduced together in 4 shuffle-and-add levels into
  one vector of 16 scores (kernels/decode_attention_bf16.py).
- `value_tile(...)`: eight bf16 value rows widened to float32 in registers and added, weighted by float32 scores,
  into each query row's float32 sums (kernels/decode_attention_bf16.py; no `vdpbf16ps`, which would round the
  weights to bf16).

`available()` is False without numba, where numba is told to compile for a named CPU (NUMBA_CPU_NAME, a portable
cache: the instruction might not be there), where LLVM does not see AVX512-BF16 on this CPU, and on CPUs with AMX,
where torch's own bf16 kernels multiply with AMX tiles and were not measured against these.
"""

from __future__ import annotations

try:
    import numba
    from llvmlite import ir
    from numba import types
    from numba.core import cgutils
    from numba.extending import intrinsic
except ImportError:  # pragma: no cover - numba is a core dependency
    numba = None

__all__ = ["available", "dot_tile", "key_tile", "value_tile"]


def _cpu_has_bf16_dot() -> bool:
    """Does numba compile for this CPU, and has it AVX512-BF16?"""
    if numba is None or numba.config.CPU_NAME or numba.config.CPU_FEATURES:
        return False
    from llvmlite import binding

    return bool(binding.get_host_cpu_features().get("avx512bf16"))


def _cpu_has_amx() -> bool:
    """AMX bf16 tiles (Intel Xeon 4th generation on), as torch's CPU dispatch sees them (as models/int_linear.py
    asks for AMX int8). kernels/ sits below engine/, so engine.core.dtypes' /proc/cpuinfo reader is not used."""
    import torch

    capabilities = torch.cpu.get_capabilities() if hasattr(torch.cpu, "get_capabilities") else {}
    return bool(capabilities.get("amx_bf16"))


_AVAILABLE = _cpu_has_bf16_dot() and not _cpu_has_amx()


def available() -> bool:
    """True where the intrinsics compile for this CPU and the kernels built on them are used."""
    return _AVAILABLE


if _AVAILABLE:
    class _BFloat(ir.Type):
        """LLVM's bfloat type, which llvmlite's IR builder does not name."""

        def _to_string(self) -> str:
            return "bfloat"

        def __eq__(self, other) -> bool:
            return isinstance(other, _BFloat)

        def __hash__(self) -> int:
            return hash("bfloat")

    _F32X16 = ir.VectorType(ir.FloatType(), 16)
    _I32X16 = ir.VectorType(ir.IntType(32), 16)
    _BF16X32 = ir.VectorType(_BFloat(), 32)
    _I64 = ir.IntType(64)
    _LANE = ir.IntType(32)

    def _dpbf16(builder):
        return cgutils.get_or_insert_function(builder.module, ir.FunctionType(_F32X16, [_F32X16, _BF16X32, _BF16X32]),
                                              "llvm.x86.avx512bf16.dpbf16ps.512")

    def _load_pairs(builder, data, at):
        """32 bf16 values (16 int32 pairs) from data[at ..] as the instruction's operand."""
        vector = builder.load(builder.bitcast(builder.gep(data, [at]), _I32X16.as_pointer()), align=4)
        return builder.bitcast(vector, _BF16X32)

    def _broadcast(builder, value, vector_type):
        lane0 = builder.insert_element(ir.Constant(vector_type, None), value, ir.Constant(_LANE, 0))
        return builder.shuffle_vector(lane0, ir.Constant(vector_type, None), ir.Constant(_I32X16, [0] * 16))

    def _at(builder, start, index, stride):
        return builder.add(start, builder.mul(ir.Constant(_I64, index), stride))

    def dot_tile(rows: int, lanes: int):
        """An intrinsic: c[r, 16 l + i] = sum over pairs p of a[r, p] . b[p, 16 l + i], for r < rows, l < lanes.

        Called as f(a, a_start, a_row_stride, b, b_start, b_pair_stride, c, c_start, c_row_stride, pairs) on flat
        int32 (a, b) and float32 (c) arrays, int64 offsets and strides (in elements); c is overwritten. The sums
        stay in registers across the pairs: rows x lanes + lanes + 1 vectors must fit AVX-512's 32.
        """

        @intrinsic
        def tile(typingctx, a, a_start, a_stride, b, b_start, b_stride, c, c_start, c_stride, pairs):
            signature = types.void(a, a_start, a_stride, b, b_start, b_stride, c, c_start, c_stride, pairs)

            def codegen(context, builder, sig, args):
                a, a_start, a_stride, b, b_start, b_stride, c, c_start, c_stride, pairs = args
                dpbf16 = _dpbf16(builder)
                a_data = context.make_array(sig.args[0])(context, builder, a).data
                b_data = context.make_array(sig.args[3])(context, builder, b).data
                c_data = context.make_array(sig.args[6])(context, builder, c).data
                sums = [[cgutils.alloca_once_value(builder, ir.Constant(_F32X16, None)) for _ in range(lanes)]
                        for _ in range(rows)]  # zeroed; promoted to registers by LLVM
                with cgutils.for_range(builder, pairs) as loop:
                    b_row = builder.add(b_start, builder.mul(loop.index, b_stride))
                    columns = [_load_pairs(builder, b_data, builder.add(b_row, ir.Constant(_I64, 16 * lane)))
                               for lane in range(lanes)]
                    for row in range(rows):
                        pair = builder.load(builder.gep(a_data, [builder.add(_at(builder, a_start, row, a_stride),
                                                                             loop.index)]))
                        broadcast = builder.bitcast(_broadcast(builder, pair, _I32X16), _BF16X32)
                        for lane in range(lanes):
                            total = builder.call(dpbf16, [builder.load(sums[row][lane]), columns[lane], broadcast])
                            builder.store(total, sums[row][lane])
                for row in range(rows):
                    for lane in range(lanes):
                        at = builder.add(_at(builder, c_start, row, c_stride), ir.Constant(_I64, 16 * lane))
                        builder.store(builder.load(sums[row][lane]),
                                      builder.bitcast(builder.gep(c_data, [at]), _F32X16.as_pointer()), align=4)
                return context.get_dummy_value()

            return signature, codegen

        return tile

    def _reduction_levels() -> list[tuple[list[int], list[int]]]:
        """Shuffle masks that sum 16 vectors lane-wise into one: level g (1, 2, 4, 8) pairs vectors x, y whose lanes
        hold partial sums of g keys in turn, and adds lane pairs so the result holds 2g keys in turn (x's first)."""
        levels = []
        for g in (1, 2, 4, 8):
            low, high = [], []
            for lane in range(16):
                block, j = divmod(lane, 2 * g)
                picked = 2 * g * block + j if j < g else 16 + 2 * g * block + j - g
                low.append(picked)
                high.append(picked + g)
            levels.append((low, high))
        return levels

    _LEVELS = _reduction_levels()

    @intrinsic(prefer_literal=True)
    def key_tile(typingctx, q, q_start, k, k_start, k_stride, s, s_start, scale, chunks):
        """s[s_start + i] = scale * (q . k_i) for the 16 keys i < 16, k_i at k_start + i * k_stride.

        Called as key_tile(q, q_start, k, k_start, k_stride, s, s_start, scale, chunks) on flat int32 (q, k) and
        float32 (s) arrays; each row is `chunks` x 16 pairs (head dimension 32 x chunks), `chunks` a constant.
        Key i's partial sums land in lane i of the result, so 16 keys pay 15 vector additions, not 16 horizontal
        sums.
        """
        if not isinstance(chunks, types.IntegerLiteral):
            return None
        count = chunks.literal_value
        signature = types.void(q, q_start, k, k_start, k_stride, s, s_start, scale, chunks)

        def codegen(context, builder, sig, args):
            q, q_start, k, k_start, k_stride, s, s_start, scale, _ = args
            dpbf16 = _dpbf16(builder)
            q_data = context.make_array(sig.args[0])(context, builder, q).data
            k_data = context.make_array(sig.args[2])(context, builder, k).data
            s_data = context.make_array(sig.args[5])(context, builder, s).data
            query = [_load_pairs(builder, q_data, builder.add(q_start, ir.Constant(_I64, 16 * c)))
                     for c in range(count)]
            sums = []
            for key in range(16):
                row = _at(builder, k_start, key, k_stride)
                total = ir.Constant(_F32X16, None)
                for c in range(count):
                    keys = _load_pairs(builder, k_data, builder.add(row, ir.Constant(_I64, 16 * c)))
                    total = builder.call(dpbf16, [total, keys, query[c]])
                sums.append(total)
            for low, high in _LEVELS:
                sums = [builder.fadd(builder.shuffle_vector(x, y, ir.Constant(_I32X16, low)),
                                     builder.shuffle_vector(x, y, ir.Constant(_I32X16, high)))
                        for x, y in zip(sums[0::2], sums[1::2])]
            scores = builder.fmul(sums[0], _broadcast(builder, scale, _F32X16))
            builder.store(scores, builder.bitcast(builder.gep(s_data, [s_start]), _F32X16.as_pointer()), align=4)
            return context.get_dummy_value()

        return signature, codegen

    _I16X16 = ir.VectorType(ir.IntType(16), 16)

    @intrinsic(prefer_literal=True)
    def value_tile(typingctx, v, v_start, v_stride, p, p_start, p_stride, acc, acc_stride, rows, chunks):
        """acc[r * acc_stride + d] += sum over i < 8 of p[p_start + r * p_stride + i] * v_i[d], r < rows, d < 16 chunks.

        v is a flat uint16 array of bf16 bits, value row i at v_start + i * v_stride; p and acc flat float32;
        `chunks` a constant. Each 16 columns of the eight rows are widened once (bits << 16) and kept in registers
        while every row's sums take them, in key order, by fused multiply-adds.
        """
        if not isinstance(chunks, types.IntegerLiteral):
            return None
        count = chunks.literal_value
        signature = types.void(v, v_start, v_stride, p, p_start, p_stride, acc, acc_stride, rows, chunks)

        def codegen(context, builder, sig, args):
            v, v_start, v_stride, p, p_start, p_stride, acc, acc_stride, rows, _ = args
            fma = cgutils.get_or_insert_function(builder.module, ir.FunctionType(_F32X16, [_F32X16] * 3),
                                                 "llvm.fma.v16f32")
            v_data = context.make_array(sig.args[0])(context, builder, v).data
            p_data = context.make_array(sig.args[3])(context, builder, p).data
            acc_data = context.make_array(sig.args[6])(context, builder, acc).data
            sixteen = ir.Constant(_I32X16, [16] * 16)
            for c in range(count):
                widened = []
                for key in range(8):
                    at = builder.add(_at(builder, v_start, key, v_stride), ir.Constant(_I64, 16 * c))
                    bits = builder.load(builder.bitcast(builder.gep(v_data, [at]), _I16X16.as_pointer()), align=2)
                    widened.append(builder.bitcast(builder.shl(builder.zext(bits, _I32X16), sixteen), _F32X16))
                with cgutils.for_range(builder, rows) as loop:
                    sums_at = builder.add(builder.mul(loop.index, acc_stride), ir.Constant(_I64, 16 * c))
                    pointer = builder.bitcast(builder.gep(acc_data, [sums_at]), _F32X16.as_pointer())
                    sums = builder.load(pointer, align=4)
                    weights_at = builder.add(p_start, builder.mul(loop.index, p_stride))
                    for key in range(8):
                        weight = builder.load(builder.gep(p_data, [builder.add(weights_at, ir.Constant(_I64, key))]))
                        sums = builder.call(fma, [_broadcast(builder, weight, _F32X16), widened[key], sums])
                    builder.store(sums, pointer, align=4)
            return context.get_dummy_value()

        return signature, codegen

    @intrinsic
    def prefetch(typingctx, array, index):
        """Ask for the cache line holding array[index] ahead of its use (`llvm.prefetch`: read, keep in all levels)."""
        signature = types.void(array, index)

        def codegen(context, builder, sig, args):
            data = context.make_array(sig.args[0])(context, builder, args[0]).data
            address = builder.bitcast(builder.gep(data, [args[1]]), ir.IntType(8).as_pointer())
            hint = cgutils.get_or_insert_function(
                builder.module, ir.FunctionType(ir.VoidType(), [ir.IntType(8).as_pointer(), _LANE, _LANE, _LANE]),
                "llvm.prefetch.p0")
            builder.call(hint, [address, ir.Constant(_LANE, 0), ir.Constant(_LANE, 3), ir.Constant(_LANE, 1)])
            return context.get_dummy_value()

        return signature, codegen
