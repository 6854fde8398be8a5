"""FLOP and byte models of PyTorch operators from the shapes and dtypes the profiler recorded.

``op_work(name, dims, types, concrete)`` takes an op's ``Input Dims``, ``Input type`` and
``Concrete Inputs`` (``record_shapes=True``; parsed JSON lists) and returns its ``Work``: the
floating-point operations, the bytes it must move to and from device memory at the least (each
input read once, each output written once: the roofline's compulsory traffic, as in XProf and
Inductor), the dtype whose peak applies, and an op class. ``None`` when the op is not modelled or
its shapes are missing.

FLOP conventions (a multiply-add is 2 FLOPs):

* matrix products, convolutions and attention count exactly what
  ``torch.utils.flop_counter.FlopCounterMode`` counts (2·M·N·K; the bias add of ``addmm`` is
  ignored), except that causal attention counts only the unmasked part of the score matrix
  (about half: the fused kernels skip the masked blocks) and grouped-query attention counts the
  query heads; the attention backward is 2.5× the forward (five matrix products, as in
  FlopCounterMode);
* elementwise ops count one FLOP per output element (two for ternary ops such as ``addcmul``),
  as TraceLens does; transcendental functions are not weighted;
* reductions one per input element; softmax 5 per element (max, subtract, exp, sum, divide) and
  its backward 4; layer norm 8 per element forward (mean; subtract, square, sum; subtract,
  multiply; scale, shift) and RMS norm 4; their backward twice that; copies, casts, gathers and
  fills none.

The FLOP figures of elementwise and normalization ops only place them on the roofline (they are
far below any ridge point); their bytes are what matter.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

# "Input type" strings (c10 scalar type names as the profiler prints them) → (dtype, bytes).
DTYPE_OF: dict[str, tuple[str, int]] = {
    "float": ("fp32", 4),
    "double": ("fp64", 8),
    "c10::Half": ("fp16", 2),
    "c10::BFloat16": ("bf16", 2),
    "c10::Float8_e4m3fn": ("fp8", 1),
    "c10::Float8_e5m2": ("fp8", 1),
    "c10::Float8_e4m3fnuz": ("fp8", 1),
    "c10::Float8_e5m2fnuz": ("fp8", 1),
    "c10::Float8_e8m0fnu": ("fp8", 1),
    "signed char": ("int8", 1),
    "unsigned char": ("uint8", 1),
    "bool": ("bool", 1),
    "short int": ("int16", 2),
    "short": ("int16", 2),
    "int": ("int32", 4),
    "unsigned int": ("uint32", 4),
    "long int": ("int64", 8),
    "long": ("int64", 8),
    "long long": ("int64", 8),
    "unsigned long": ("uint64", 8),
    "c10::complex<c10::Half>": ("c32", 4),
    "c10::complex<float>": ("c64", 8),
    "c10::complex<double>": ("c128", 16),
}
# c10::ScalarType codes (``dtype=`` arguments in Concrete Inputs) → (dtype, bytes).
SCALAR_TYPE_CODE: dict[int, tuple[str, int]] = {
    0: ("uint8", 1),
    1: ("int8", 1),
    2: ("int16", 2),
    3: ("int32", 4),
    4: ("int64", 8),
    5: ("fp16", 2),
    6: ("fp32", 4),
    7: ("fp64", 8),
    9: ("c64", 8),
    10: ("c128", 16),
    11: ("bool", 1),
    15: ("bf16", 2),
    23: ("fp8", 1),
    24: ("fp8", 1),
    25: ("fp8", 1),
    26: ("fp8", 1),
}
# Element types as they appear in kernel template arguments (the dtype of TensorList inputs,
# which the profiler records without a type, is read from the op's kernel name).
_KERNEL_DTYPES: tuple[tuple[re.Pattern[str], tuple[str, int]], ...] = (
    (re.compile(r"BFloat16|bfloat16|__nv_bfloat16|\bbf16\b"), ("bf16", 2)),
    (re.compile(r"c10::Half|half_t|__half\b|\bfp16\b"), ("fp16", 2)),
    (re.compile(r"\bdouble\b"), ("fp64", 8)),
    (re.compile(r"\bfloat\b"), ("fp32", 4)),
)

COMPUTE_DTYPES = {"fp64", "fp32", "bf16", "fp16", "fp8", "int8"}
MATRIX_CLASSES = {"matmul", "conv", "attention"}
# A custom Triton kernel, placed by its launch record (``triton_work``) rather than by an op model.
TRITON_CLASS = "triton"
# Op classes whose kernels a compiler (Inductor) fuses into neighbours: pointwise, reductions,
# normalization, softmax, copies/casts and gathers.
FUSIBLE_CLASSES = {"elementwise", "reduction", "softmax", "norm", "copy", "gather"}


@dataclass(frozen=True, slots=True)
class Work:
    """What one op does: FLOPs, compulsory bytes, the dtype of its peak, and its class."""

    flops: float
    bytes: float
    dtype: str  # compute dtype (``fp32``, ``bf16``, ``fp8``...); matrix ops: the operand dtype
    op_class: str  # matmul, conv, attention, elementwise, reduction, softmax, norm, gather, copy, optimizer
    out_numel: int = 0  # elements of the main output (links a producer to its consumer)
    out_bytes: float = 0.0
    in_numels: tuple[int, ...] = ()  # elements of the tensor inputs (filled in by ``op_work``)

    @property
    def kind(self) -> str:
        """``matrix`` (tensor/matrix-core peaks apply) or ``vector``; Triton kernels: see ``triton_work``."""
        return "matrix" if self.op_class in MATRIX_CLASSES or self.op_class == TRITON_CLASS else "vector"


@dataclass(frozen=True, slots=True)
class Tensor:
    """One recorded tensor input: shape, dtype, element size (``itemsize`` 0 when unknown)."""

    shape: tuple[int, ...]
    dtype: str
    itemsize: int

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> float:
        return float(self.numel * self.itemsize)


class Inputs:
    """An op's recorded inputs, by position."""

    def __init__(self, dims: Sequence[Any], types: Sequence[Any], concrete: Sequence[Any], hint: str = "") -> None:
        self.dims = list(dims)
        self.types = [str(t) for t in types] if types else [""] * len(self.dims)
        self.concrete = [str(c) for c in concrete] if concrete else [""] * len(self.dims)
        self.hint = hint  # a kernel name: dtype of TensorList inputs

    def tensor(self, i: int) -> Tensor | None:
        """Input ``i`` if it is a tensor with a known dtype and shape."""
        if i >= len(self.dims) or i >= len(self.types):
            return None
        dt = DTYPE_OF.get(self.types[i])
        shape = self.dims[i]
        if dt is None or not _is_shape(shape):
            return None
        return Tensor(tuple(shape), dt[0], dt[1])

    def tensors(self) -> list[Tensor]:
        """Every tensor input, TensorList members included (their dtype from the kernel name)."""
        out: list[Tensor] = []
        for i in range(len(self.dims)):
            t = self.tensor(i)
            if t is not None:
                out.append(t)
            else:
                out.extend(self.tensor_list(i))
        return out

    def tensor_list(self, i: int) -> list[Tensor]:
        """Members of a ``TensorList`` input (empty when not one, or when the dtype is unknown)."""
        if i >= len(self.dims) or i >= len(self.types) or self.types[i] != "TensorList":
            return []
        shapes = self.dims[i]
        if not isinstance(shapes, list) or not all(_is_shape(s) for s in shapes):
            return []
        dt = kernel_dtype(self.hint)
        if dt is None:
            return []
        return [Tensor(tuple(s), dt[0], dt[1]) for s in shapes]

    def value(self, i: int) -> str:
        return self.concrete[i] if i < len(self.concrete) else ""

    def ints(self, i: int) -> list[int] | None:
        """A concrete int or int list (``'[1, 1]'``, ``'2'``)."""
        text = self.value(i).strip()
        if not text:
            return None
        found = re.findall(r"-?\d+", text)
        if not found or re.search(r"[^\d\s\[\],()\-]", text):
            return None
        return [int(x) for x in found]

    def flag(self, i: int) -> bool | None:
        v = self.value(i).strip()
        return {"True": True, "False": False, "true": True, "false": False}.get(v)


def kernel_dtype(kernel_name: str) -> tuple[str, int] | None:
    """The element type in a kernel's template arguments (``FusedAdamMathFunctor<float, ...>``).

    Copy kernels name only the element size (``CatArrayBatchedCopy<OpaqueType<2u>, ...>``).
    """
    if not kernel_name:
        return None
    opaque = _OPAQUE.search(kernel_name)
    if opaque:
        size = int(opaque.group(1))
        return f"{8 * size}-bit", size
    # The earliest type named wins: the element type is the functor's first template argument;
    # scalars come later (FusedAdamMathFunctor<float, ...>(..., double lr, double beta1, ...)
    # is an fp32 update, not fp64).
    found = [(m.start(), dt) for pat, dt in _KERNEL_DTYPES if (m := pat.search(kernel_name))]
    return min(found)[1] if found else None


_OPAQUE = re.compile(r"OpaqueType<(\d+)u?>")


def triton_work(nbytes: int, flops: int, types: Any) -> Work | None:
    """The work of one Triton launch from its record (``traceadvisor.analyses.triton_launches``).

    ``nbytes`` and ``flops`` are the record's fields (-1: not recorded), ``types`` the record's
    ``Input type`` (its tensor arguments, with ``record_shapes``). ``None`` for a record without
    bytes (a launch path that gave the name only): there is nothing to place.

    * Bytes: the tensor arguments' sizes, each counted once. Not the measured traffic: a lower
      bound when the kernel reads an argument more than once from DRAM (a tiled matmul re-reads
      tiles of A and B that the L2 cache no longer holds), an upper bound when it touches only
      part of one (masked or strided access, a lookup table read at a few rows, a buffer it does
      not write).
    * FLOPs: what the kernel declares in its ``launch_metadata`` (Proton's convention); NaN when
      it declares none, and then only the memory roof applies.
    * Dtype: the narrowest compute dtype among the tensor arguments (``""`` when the record has no
      types: the memory roof only). The record cannot say whether the kernel uses ``tl.dot``, so
      it is judged against its dtype's matrix (tensor-core) peak, the highest the data allows: a
      roof must bound what the hardware can do, and a matmul judged against the vector rate
      would sit above its roof. The view takes fp32 at the TF32 rate, as ``tl.dot`` computes fp32
      by default (``input_precision="tf32"``).
    """
    if nbytes < 0:
        return None
    dtype, size = "", 0
    for t in types if isinstance(types, list) else []:
        dt = DTYPE_OF.get(str(t))
        if dt is not None and dt[0] in COMPUTE_DTYPES and (not size or dt[1] < size):
            dtype, size = dt
    return Work(float(flops) if flops >= 0 else math.nan, float(nbytes), dtype, TRITON_CLASS)


def _is_shape(v: Any) -> bool:
    return isinstance(v, list) and all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in v)


def broadcast(shapes: Sequence[tuple[int, ...]]) -> tuple[int, ...]:
    """NumPy/PyTorch broadcasting of shapes (size-1 and missing leading dims stretch)."""
    ndim = max((len(s) for s in shapes), default=0)
    out = [1] * ndim
    for s in shapes:
        for k, d in enumerate(s):
            j = ndim - len(s) + k
            if d != 1:
                out[j] = d if out[j] == 1 else max(out[j], d)
    return tuple(out)


# -- matrix products ----------------------------------------------------------------------------


def _mm(a: Tensor, b: Tensor, extra: float = 0.0) -> Work | None:
    """(Batched) matrix product a[B?, M, K] · b[B?, K, N]."""
    if len(a.shape) not in (2, 3) or len(b.shape) != len(a.shape):
        return None
    m, k = a.shape[-2], a.shape[-1]
    n = b.shape[-1]
    bt = a.shape[0] if len(a.shape) == 3 else 1
    out = bt * m * n
    out_bytes = float(out * _out_itemsize(a))
    return Work(2.0 * bt * m * n * k, a.nbytes + b.nbytes + extra + out_bytes, a.dtype, "matmul", out, out_bytes)


def _out_itemsize(a: Tensor) -> int:
    # fp8 and int8 products are written in a wider type (bf16 / int32) by _scaled_mm / _int_mm.
    return 2 if a.dtype == "fp8" else 4 if a.dtype == "int8" else a.itemsize


def _matmul(x: Inputs, name: str) -> Work | None:
    if name in ("aten::mm", "aten::_scaled_mm", "aten::_int_mm", "aten::bmm"):
        a, b = x.tensor(0), x.tensor(1)
        if a is None or b is None:
            return None
        scales = [x.tensor(i) for i in range(2, 6)] if name == "aten::_scaled_mm" else []
        extra = sum(s.nbytes for s in scales if s is not None)
        return _mm(a, b, extra)
    if name in ("aten::addmm", "aten::_addmm_activation", "aten::baddbmm"):
        c, a, b = x.tensor(0), x.tensor(1), x.tensor(2)
        if a is None or b is None:
            return None
        return _mm(a, b, c.nbytes if c is not None else 0.0)
    if name == "aten::addbmm":
        c, a, b = x.tensor(0), x.tensor(1), x.tensor(2)
        if a is None or b is None or len(a.shape) != 3:
            return None
        bt, m, k = a.shape
        n = b.shape[-1]
        out = m * n * a.itemsize
        flops = 2.0 * bt * m * n * k
        return Work(flops, a.nbytes + b.nbytes + (c.nbytes if c else 0.0) + out, a.dtype, "matmul", m * n, out)
    if name in ("aten::mv", "aten::addmv"):
        off = 1 if name == "aten::addmv" else 0
        a, v = x.tensor(off), x.tensor(off + 1)
        if a is None or v is None or len(a.shape) != 2:
            return None
        m, n = a.shape
        y = x.tensor(0) if off else None
        extra = y.nbytes if y is not None else 0.0
        return Work(2.0 * m * n, a.nbytes + v.nbytes + extra + m * a.itemsize, a.dtype, "matmul", m, m * a.itemsize)
    if name in ("aten::dot", "aten::vdot"):
        a, b = x.tensor(0), x.tensor(1)
        if a is None or b is None:
            return None
        return Work(2.0 * a.numel, a.nbytes + b.nbytes + a.itemsize, a.dtype, "matmul", 1, a.itemsize)
    if name == "aten::linear":
        a, w, bias = x.tensor(0), x.tensor(1), x.tensor(2)
        if a is None or w is None or not a.shape or len(w.shape) != 2:
            return None
        rows = math.prod(a.shape[:-1])
        n, k = w.shape
        out = rows * n
        extra = bias.nbytes if bias is not None else 0.0
        flops = 2.0 * rows * n * k
        return Work(flops, a.nbytes + w.nbytes + extra + out * a.itemsize, a.dtype, "matmul", out, out * a.itemsize)
    if name == "aten::matmul":
        a, b = x.tensor(0), x.tensor(1)
        if a is None or b is None or not a.shape or not b.shape:
            return None
        sa = a.shape if len(a.shape) > 1 else (1, *a.shape)
        sb = b.shape if len(b.shape) > 1 else (*b.shape, 1)
        batch = math.prod(broadcast([sa[:-2], sb[:-2]]))
        m, k, n = sa[-2], sa[-1], sb[-1]
        out = batch * m * n
        flops = 2.0 * batch * m * n * k
        return Work(flops, a.nbytes + b.nbytes + out * a.itemsize, a.dtype, "matmul", out, out * a.itemsize)
    return None


# -- convolution --------------------------------------------------------------------------------

# name → positions of (bias, stride, padding, dilation, transposed, output_padding, groups);
# None = absent (transposed: fixed by the op name).
_CONV_ARGS: dict[str, tuple[int | None, int, int, int, int | bool, int | None, int]] = {
    "aten::convolution": (2, 3, 4, 5, 6, 7, 8),
    "aten::_convolution": (2, 3, 4, 5, 6, 7, 8),
    "aten::conv1d": (2, 3, 4, 5, False, None, 6),
    "aten::conv2d": (2, 3, 4, 5, False, None, 6),
    "aten::conv3d": (2, 3, 4, 5, False, None, 6),
    "aten::conv_transpose1d": (2, 3, 4, 7, True, 5, 6),
    "aten::conv_transpose2d": (2, 3, 4, 7, True, 5, 6),
    "aten::conv_transpose3d": (2, 3, 4, 7, True, 5, 6),
    "aten::cudnn_convolution": (None, 3, 2, 4, False, None, 5),
    "aten::cudnn_convolution_transpose": (None, 4, 2, 5, True, 3, 6),
    "aten::miopen_convolution": (2, 4, 3, 5, False, None, 6),
    "aten::miopen_convolution_transpose": (2, 5, 3, 6, True, 4, 7),
    "aten::miopen_depthwise_convolution": (2, 4, 3, 5, False, None, 6),
    "aten::mkldnn_convolution": (2, 4, 3, 5, False, None, 6),
}


def conv_output_spatial(
    spatial: Sequence[int],
    kernel: Sequence[int],
    stride: Sequence[int],
    padding: Sequence[int],
    dilation: Sequence[int],
    transposed: bool,
    output_padding: Sequence[int],
) -> list[int]:
    """Output size per spatial dim (the formulas of ``torch.nn.Conv*d`` / ``ConvTranspose*d``)."""
    out = []
    for i, n in enumerate(spatial):
        k, s, p, d = kernel[i], stride[i], padding[i], dilation[i]
        if transposed:
            out.append((n - 1) * s - 2 * p + d * (k - 1) + output_padding[i] + 1)
        else:
            out.append((n + 2 * p - d * (k - 1) - 1) // s + 1)
    return out


def _expand(v: list[int] | None, nd: int, default: int) -> list[int]:
    if not v:
        return [default] * nd
    return v * nd if len(v) == 1 else v[:nd] + [v[-1]] * (nd - len(v))


def conv_flops(x_shape: Sequence[int], w_shape: Sequence[int], out_shape: Sequence[int], transposed: bool) -> float:
    """2 · batch · (output positions, input positions if transposed) · prod(weight shape): FlopCounterMode's count."""
    spatial = (x_shape if transposed else out_shape)[2:]
    return 2.0 * x_shape[0] * math.prod(spatial) * math.prod(w_shape)


def _conv(x: Inputs, name: str) -> Work | None:
    if name == "aten::convolution_backward":
        return _conv_backward(x)
    spec = _CONV_ARGS.get(name)
    inp, w = x.tensor(0), x.tensor(1)
    if spec is None or inp is None or w is None or len(inp.shape) < 3 or len(w.shape) != len(inp.shape):
        return None
    bias_i, stride_i, pad_i, dil_i, trans_i, opad_i, groups_i = spec
    nd = len(inp.shape) - 2
    transposed = trans_i if isinstance(trans_i, bool) else bool(x.flag(trans_i))
    # Stride and padding must be recorded (Concrete Inputs): ``conv2d(padding="same")`` records
    # no value for its string padding, and guessing 0 would misstate the output size.
    stride_v, pad_v = x.ints(stride_i), x.ints(pad_i)
    if stride_v is None or pad_v is None:
        return None
    stride, padding = _expand(stride_v, nd, 1), _expand(pad_v, nd, 0)
    dilation = _expand(x.ints(dil_i), nd, 1)
    kernel = list(w.shape[2:])
    opad = _expand(x.ints(opad_i) if opad_i is not None else None, nd, 0)
    spatial = conv_output_spatial(inp.shape[2:], kernel, stride, padding, dilation, transposed, opad)
    if any(s <= 0 for s in spatial):
        return None
    c_out = w.shape[1] * max(1, (x.ints(groups_i) or [1])[0]) if transposed else w.shape[0]
    out_shape = [inp.shape[0], c_out, *spatial]
    bias = x.tensor(bias_i) if bias_i is not None else None
    out_numel = math.prod(out_shape)
    out_bytes = float(out_numel * inp.itemsize)
    nbytes = inp.nbytes + w.nbytes + (bias.nbytes if bias is not None else 0.0) + out_bytes
    return Work(conv_flops(inp.shape, w.shape, out_shape, transposed), nbytes, inp.dtype, "conv", out_numel, out_bytes)


def _conv_backward(x: Inputs) -> Work | None:
    # convolution_backward(grad_output, input, weight, bias_sizes, stride, padding, dilation,
    #                      transposed, output_padding, groups, output_mask)
    go, inp, w = x.tensor(0), x.tensor(1), x.tensor(2)
    if go is None or inp is None or w is None or len(inp.shape) < 3:
        return None
    transposed = bool(x.flag(7))
    mask_text = x.value(10)
    mask = [m == "True" for m in re.findall(r"True|False", mask_text)] or [True, True, True]
    mask += [True] * (3 - len(mask))
    one = conv_flops(inp.shape, w.shape, go.shape, transposed)
    flops = one * (int(mask[0]) + int(mask[1]))
    nbytes = go.nbytes
    if mask[0]:  # grad_input = conv_transpose(grad_output, weight)
        nbytes += w.nbytes + inp.nbytes
    if mask[1]:  # grad_weight = conv(input, grad_output)
        nbytes += inp.nbytes + w.nbytes
    if mask[2]:  # grad_bias = sum(grad_output)
        nbytes += go.shape[1] * go.itemsize
    return Work(flops, nbytes, go.dtype, "conv", inp.numel, inp.nbytes)


# -- attention ----------------------------------------------------------------------------------

# Forward and backward attention ops: (index of query among the tensor inputs, layout, backward)
# layout "bhld" = (batch, heads, length, head dim); "blhd" = (batch, length, heads, head dim).
_ATTENTION: dict[str, tuple[int, str, bool]] = {
    "aten::scaled_dot_product_attention": (0, "bhld", False),
    "aten::_scaled_dot_product_attention_math": (0, "bhld", False),
    "aten::_scaled_dot_product_flash_attention": (0, "bhld", False),
    "aten::_scaled_dot_product_flash_attention_for_cpu": (0, "bhld", False),
    "aten::_scaled_dot_product_efficient_attention": (0, "bhld", False),
    "aten::_scaled_dot_product_cudnn_attention": (0, "bhld", False),
    "aten::_scaled_dot_product_fused_attention_overrideable": (0, "bhld", False),
    "aten::_cudnn_attention_forward": (0, "bhld", False),
    "aten::_flash_attention_forward": (0, "blhd", False),
    "aten::_efficient_attention_forward": (0, "blhd", False),
    "aten::_scaled_dot_product_flash_attention_backward": (1, "bhld", True),
    "aten::_scaled_dot_product_efficient_attention_backward": (1, "bhld", True),
    "aten::_scaled_dot_product_cudnn_attention_backward": (1, "bhld", True),
    "aten::_scaled_dot_product_fused_attention_overrideable_backward": (1, "bhld", True),
    "aten::_cudnn_attention_backward": (1, "bhld", True),
    "aten::_flash_attention_backward": (1, "blhd", True),
    "aten::_efficient_attention_backward": (1, "blhd", True),
}
# Position of ``is_causal`` (a bool) in each op's schema, by number of recorded inputs where the
# schema changed between torch versions; ``custom_mask_type`` (an int: 1 or 2 = causal) for the
# memory-efficient kernels.
_CAUSAL_FLAG: dict[str, dict[int, int] | int] = {
    "aten::scaled_dot_product_attention": 5,
    "aten::_scaled_dot_product_attention_math": 5,
    "aten::_scaled_dot_product_flash_attention": 4,
    "aten::_scaled_dot_product_flash_attention_for_cpu": 4,
    "aten::_scaled_dot_product_efficient_attention": 6,
    "aten::_scaled_dot_product_cudnn_attention": {7: 4, 9: 6},
    "aten::_scaled_dot_product_fused_attention_overrideable": 5,
    "aten::_cudnn_attention_forward": 10,
    "aten::_flash_attention_forward": 8,
    "aten::_scaled_dot_product_flash_attention_backward": 11,
    "aten::_scaled_dot_product_efficient_attention_backward": 11,
    "aten::_scaled_dot_product_cudnn_attention_backward": 14,
    "aten::_cudnn_attention_backward": 14,
    "aten::_flash_attention_backward": 11,
}
_MASK_TYPE: dict[str, int] = {"aten::_efficient_attention_forward": 9, "aten::_efficient_attention_backward": 14}


def causal_fraction(lq: int, lk: int) -> float:
    """Share of the Lq×Lk score matrix a causal mask keeps (top-left aligned, PyTorch's ``is_causal``)."""
    if lq <= 0 or lk <= 0:
        return 0.0
    if lq <= lk:
        kept = lq * (lq + 1) // 2
    else:
        kept = lk * (lk + 1) // 2 + (lq - lk) * lk
    return kept / (lq * lk)


def attention_is_causal(x: Inputs, name: str) -> bool:
    if name in _MASK_TYPE:
        v = x.ints(_MASK_TYPE[name])
        return bool(v and v[0] in (1, 2))
    pos = _CAUSAL_FLAG.get(name)
    if isinstance(pos, dict):
        pos = pos.get(len(x.dims))
    return pos is not None and x.flag(pos) is True


def _attention(x: Inputs, name: str) -> Work | None:
    qi, layout, backward = _ATTENTION[name]
    q, k, v = x.tensor(qi), x.tensor(qi + 1), x.tensor(qi + 2)
    if q is None or k is None or v is None or len(q.shape) != 4 or len(k.shape) != 4 or len(v.shape) != 4:
        return None
    if layout == "bhld":
        b, h, lq, d = q.shape
        lk, dv = k.shape[2], v.shape[3]
    else:
        b, lq, h, d = q.shape
        lk, dv = k.shape[1], v.shape[3]
    fraction = causal_fraction(lq, lk) if attention_is_causal(x, name) else 1.0
    forward = 2.0 * b * h * lq * lk * (d + dv) * fraction
    out_numel = b * h * lq * dv
    out_bytes = float(out_numel * q.itemsize)
    lse = 4.0 * b * h * lq  # fp32 log-sum-exp per query row
    if not backward:
        nbytes = q.nbytes + k.nbytes + v.nbytes + out_bytes + lse
        return Work(forward, nbytes, q.dtype, "attention", out_numel, out_bytes)
    # reads grad_out, q, k, v, out, lse; writes dq, dk, dv
    nbytes = 2 * out_bytes + lse + 2 * (q.nbytes + k.nbytes + v.nbytes)
    return Work(2.5 * forward, nbytes, q.dtype, "attention", q.numel, q.nbytes)


# -- pointwise ----------------------------------------------------------------------------------

_UNARY = {
    "abs", "neg", "exp", "exp2", "expm1", "log", "log1p", "log2", "log10", "sin", "cos", "tan", "tanh", "sinh",
    "cosh", "asin", "acos", "atan", "asinh", "acosh", "atanh", "sigmoid", "logit", "relu", "gelu", "silu", "mish",
    "hardswish", "hardsigmoid", "elu", "selu", "celu", "leaky_relu", "softplus", "softshrink", "hardshrink", "sqrt",
    "rsqrt", "reciprocal", "sign", "sgn", "floor", "ceil", "round", "trunc", "frac", "erf", "erfc", "erfinv",
    "square", "bitwise_not", "logical_not", "isnan", "isinf", "isfinite", "nan_to_num", "clamp", "clamp_min",
    "clamp_max", "hardtanh", "threshold", "relu6", "lgamma", "digamma", "angle", "conj_physical", "triu",
    "tril", "deg2rad", "rad2deg", "signbit", "positive", "bernoulli", "uniform", "normal", "exponential",
    "random", "cauchy", "log_normal", "geometric", "glu", "prelu", "rrelu_with_noise",
}  # fmt: skip
_BINARY = {
    "add", "sub", "rsub", "mul", "div", "true_divide", "floor_divide", "fmod", "remainder", "maximum", "minimum",
    "fmax", "fmin", "atan2", "hypot", "copysign", "xlogy", "eq", "ne", "lt", "le", "gt", "ge", "logical_and",
    "logical_or", "logical_xor", "bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_left_shift",
    "bitwise_right_shift", "__and__", "__or__", "__xor__", "__lshift__", "__rshift__", "masked_fill",
    "gelu_backward", "silu_backward", "sigmoid_backward", "tanh_backward", "threshold_backward",
    "hardtanh_backward", "leaky_relu_backward", "elu_backward", "softplus_backward", "mish_backward",
    "hardswish_backward", "hardsigmoid_backward", "logit_backward", "native_dropout_backward", "mse_loss",
    "smooth_l1_loss", "l1_loss", "huber_loss", "binary_cross_entropy",
    "binary_cross_entropy_with_logits", "heaviside", "nextafter", "ldexp", "float_power", "polar", "pow",
    "mse_loss_backward", "l1_loss_backward", "smooth_l1_loss_backward", "huber_loss_backward",
}  # fmt: skip
_TERNARY = {"addcmul", "addcdiv", "lerp", "where", "clamp", "masked_scatter", "_s_where"}
# Tensor inputs read where the class default (unary 1, binary 2, ternary 3) does not hold.
_ARITY = {
    "mse_loss_backward": 3, "l1_loss_backward": 3, "smooth_l1_loss_backward": 3, "huber_loss_backward": 3,
    "masked_fill": 3, "native_dropout": 1, "native_dropout_backward": 2,
}  # fmt: skip
_COMPARISONS = {
    "eq", "ne", "lt", "le", "gt", "ge", "logical_and", "logical_or", "logical_xor", "logical_not", "isnan", "isinf",
    "isfinite", "signbit",
}  # fmt: skip
# Losses reduce to one element unless reduction="none" (0): position of the reduction argument.
_LOSS_REDUCTION = {
    "mse_loss": 2, "l1_loss": 2, "smooth_l1_loss": 2, "huber_loss": 2, "binary_cross_entropy": 3,
    "binary_cross_entropy_with_logits": 4,
}  # fmt: skip
_FILLS = {"fill", "zero", "zeros", "ones", "full", "zeros_like", "ones_like", "full_like", "arange", "linspace"}
_COPIES = {"copy", "clone", "contiguous", "_to_copy", "to", "_copy_from", "_copy_from_and_resize", "type_as"}


def _base(name: str) -> str:
    """``aten::add_`` → ``add`` (namespace and in-place suffix stripped)."""
    short = name.split("::", 1)[-1]
    return short[:-1] if short.endswith("_") and not short.endswith("__") else short


def _elementwise(x: Inputs, name: str, base: str) -> Work | None:
    # The first ``arity`` tensor arguments are read; a further tensor is an ``out=`` destination
    # (``mul.out(self, other, *, out)``, recorded as an input) and is written, not read.
    args = x.tensors()
    arity = _ARITY.get(base, 3 if base in _TERNARY else 2 if base in _BINARY else 1)
    ts = [t for t in args[:arity] if t.numel > 0]
    if not ts:
        return None
    # The main operand decides the output dtype: the first tensor that is not a 0-dim wrapped
    # number (``where``: the first value, not the condition).
    shaped = [t for t in ts if t.shape]
    main = (shaped[1] if base in ("where", "_s_where") and len(shaped) > 1 else shaped[0]) if shaped else ts[0]
    out_shape = broadcast([t.shape for t in ts])
    out_numel = math.prod(out_shape)
    if base in _LOSS_REDUCTION and x.ints(_LOSS_REDUCTION[base]) != [0]:
        out_numel = 1  # reduction="mean" or "sum": one element
    out_size = 1 if base in _COMPARISONS else main.itemsize
    if base == "native_dropout":  # writes the output and a bool mask
        out_size = main.itemsize + 1
    reads = sum(t.nbytes for t in ts)
    out_bytes = float(out_numel * out_size)
    per_element = 2.0 if len(shaped) >= 3 else 1.0
    return Work(per_element * out_numel, reads + out_bytes, main.dtype, "elementwise", out_numel, out_bytes)


def _fill(x: Inputs, base: str) -> Work | None:
    t = x.tensor(0)
    if base in ("fill", "zero") and t is not None:
        return Work(0.0, t.nbytes, t.dtype, "elementwise", t.numel, t.nbytes)
    return None  # factory functions: the output shape is not an input


def _copy(x: Inputs, base: str) -> Work | None:
    if base == "copy":  # copy_(self=destination, src)
        dst, src = x.tensor(0), x.tensor(1)
        if dst is None or src is None:
            return None
        return Work(0.0, dst.nbytes + src.nbytes, dst.dtype, "copy", dst.numel, dst.nbytes)
    src = x.tensor(0)
    if src is None:
        return None
    dtype, itemsize = src.dtype, src.itemsize
    if base in ("_to_copy", "to"):
        code = x.ints(1)
        if base == "_to_copy" and code and len(code) == 1 and code[0] in SCALAR_TYPE_CODE:
            dtype, itemsize = SCALAR_TYPE_CODE[code[0]]
    out_bytes = float(src.numel * itemsize)
    return Work(0.0, src.nbytes + out_bytes, dtype, "copy", src.numel, out_bytes)


def _cat(x: Inputs) -> Work | None:
    parts = x.tensor_list(0)
    if not parts:
        return None
    total = sum(t.nbytes for t in parts)
    numel = sum(t.numel for t in parts)
    return Work(0.0, 2 * total, parts[0].dtype, "copy", numel, total)


# -- reductions, softmax, normalization ---------------------------------------------------------

_REDUCTIONS: dict[str, int | None] = {  # base name → position of the dim argument (None: full)
    "sum": 1, "nansum": 1, "mean": 1, "nanmean": 1, "amax": 1, "amin": 1, "max": 1, "min": 1, "prod": 1,
    "argmax": 1, "argmin": 1, "any": 1, "all": 1, "logsumexp": 1, "var": 1, "std": 1, "var_mean": 1,
    "std_mean": 1, "norm": 2, "linalg_vector_norm": 2, "count_nonzero": 1, "aminmax": 1,
}  # fmt: skip
_INT_DIM = {"max", "min", "argmax", "argmin", "any", "all", "aminmax"}
_SCANS = {"cumsum", "cumprod", "cummax", "cummin", "logcumsumexp", "_logcumsumexp"}


def _reduction(x: Inputs, base: str) -> Work | None:
    t = x.tensor(0)
    if t is None or t.numel == 0:
        return None
    if base in _SCANS:
        return Work(float(t.numel), 2 * t.nbytes, t.dtype, "reduction", t.numel, t.nbytes)
    pos = _REDUCTIONS[base]
    text = x.value(pos).strip() if pos is not None else ""
    # A dim list ("[0, 1]"; "[]" = all dims), or a single int dim for the ops that take one.
    dims = x.ints(pos) if pos is not None and (text.startswith("[") or base in _INT_DIM) else None
    if dims and t.shape:
        kept = math.prod(d for i, d in enumerate(t.shape) if i not in {k % len(t.shape) for k in dims})
    else:
        kept = 1
    out_size = 8 if base in ("argmax", "argmin") else 1 if base in ("any", "all") else t.itemsize
    out_bytes = float(kept * out_size)
    return Work(float(t.numel), t.nbytes + out_bytes, t.dtype, "reduction", kept, out_bytes)


def _softmax(x: Inputs, base: str) -> Work | None:
    if base in ("_softmax_backward_data", "_log_softmax_backward_data"):
        g, y = x.tensor(0), x.tensor(1)
        if g is None or y is None:
            return None
        code = x.ints(3)
        itemsize = SCALAR_TYPE_CODE[code[0]][1] if code and code[0] in SCALAR_TYPE_CODE else g.itemsize
        out = float(g.numel * itemsize)
        return Work(4.0 * g.numel, g.nbytes + y.nbytes + out, g.dtype, "softmax", g.numel, out)
    t = x.tensor(0)
    if t is None:
        return None
    itemsize = 4 if base in ("_softmax", "_log_softmax") and x.flag(2) else t.itemsize  # half_to_float
    out = float(t.numel * itemsize)
    return Work(5.0 * t.numel, t.nbytes + out, t.dtype, "softmax", t.numel, out)


def _norm(x: Inputs, base: str) -> Work | None:
    t = x.tensors()
    if not t:
        return None
    if base in ("native_layer_norm_backward", "_fused_rms_norm_backward", "native_batch_norm_backward",
                "cudnn_batch_norm_backward", "miopen_batch_norm_backward", "native_group_norm_backward"):  # fmt: skip
        g = t[0]
        per = 8.0 if "rms" in base else 16.0
        # reads every input (grad, input, statistics, weight); writes grad_input (+ small param grads)
        return Work(per * g.numel, sum(s.nbytes for s in t) + g.nbytes, g.dtype, "norm", g.numel, g.nbytes)
    inp = t[0]
    per = 4.0 if "rms" in base else 8.0
    rows = inp.numel // max(1, inp.shape[-1]) if inp.shape else 1
    # fp32 statistics per normalized row: mean and rstd (layer norm), rstd (RMS norm)
    stats = 8.0 * rows if "layer_norm" in base else 4.0 * rows if "rms" in base else 0.0
    nbytes = sum(s.nbytes for s in t) + inp.nbytes + stats
    return Work(per * inp.numel, nbytes, inp.dtype, "norm", inp.numel, inp.nbytes)


_NORMS = {
    "native_layer_norm", "layer_norm", "_fused_rms_norm", "rms_norm", "native_batch_norm", "cudnn_batch_norm",
    "miopen_batch_norm", "_batch_norm_impl_index", "_native_batch_norm_legit", "_native_batch_norm_legit_no_training",
    "batch_norm", "group_norm", "instance_norm",
    "native_group_norm", "native_layer_norm_backward", "_fused_rms_norm_backward", "native_batch_norm_backward",
    "cudnn_batch_norm_backward", "miopen_batch_norm_backward", "native_group_norm_backward",
}  # fmt: skip
_SOFTMAX = {"softmax", "_softmax", "_safe_softmax", "log_softmax", "_log_softmax", "_softmax_backward_data",
            "_log_softmax_backward_data"}  # fmt: skip


# -- gathers, embeddings, pooling, optimizers ---------------------------------------------------


def _gather(x: Inputs, base: str) -> Work | None:
    if base in ("embedding", "index_select"):
        w, idx = (x.tensor(0), x.tensor(1)) if base == "embedding" else (x.tensor(0), x.tensor(2))
        if w is None or idx is None or not w.shape:
            return None
        dim = (x.ints(1) or [0])[0] if base == "index_select" else 0
        row = w.numel // max(1, w.shape[dim % len(w.shape)])
        out = idx.numel * row
        return Work(0.0, 2.0 * out * w.itemsize + idx.nbytes, w.dtype, "gather", out, float(out * w.itemsize))
    if base in ("embedding_dense_backward", "embedding_backward"):
        g, idx = x.tensor(0), x.tensor(1)
        rows = x.ints(2)
        if g is None or idx is None or not g.shape or not rows:
            return None
        table = rows[0] * g.shape[-1] * g.itemsize
        return Work(float(g.numel), g.nbytes + idx.nbytes + table, g.dtype, "gather", rows[0] * g.shape[-1], table)
    if base == "gather":
        src, idx = x.tensor(0), x.tensor(2)
        if src is None or idx is None:
            return None
        out = idx.numel * src.itemsize
        return Work(0.0, 2.0 * out + idx.nbytes, src.dtype, "gather", idx.numel, float(out))
    if base in ("scatter", "scatter_add", "index_add", "index_copy", "scatter_reduce"):
        self_t, idx = x.tensor(0), x.tensor(2)
        src = x.tensor(3)
        if self_t is None or idx is None:
            return None
        moved = (src.nbytes if src is not None else idx.numel * self_t.itemsize) + idx.nbytes
        flops = float(idx.numel) if "add" in base or "reduce" in base else 0.0
        return Work(flops, 2.0 * moved, self_t.dtype, "gather", self_t.numel, self_t.nbytes)
    return None


def _pool(x: Inputs, base: str) -> Work | None:
    t = x.tensor(0)
    if t is None or len(t.shape) < 3:
        return None
    nd = 2 if "2d" in base else 3 if "3d" in base else 1
    if base.startswith("_adaptive"):
        size = _expand(x.ints(1), nd, 1)
        out = math.prod(t.shape[:-nd]) * math.prod(size)
        return Work(float(t.numel), t.nbytes + out * t.itemsize, t.dtype, "reduction", out, float(out * t.itemsize))
    if base.endswith("_backward"):  # reads grad_output (+ max indices), writes grad_input
        g, inp = x.tensor(0), x.tensor(1)
        if g is None or inp is None:
            return None
        idx = x.tensor(7) if "max" in base else None
        reads = g.nbytes + (idx.nbytes if idx is not None else 0.0)
        return Work(float(g.numel), reads + inp.nbytes, g.dtype, "reduction", inp.numel, inp.nbytes)
    kernel = _expand(x.ints(1), nd, 1)
    stride = _expand(x.ints(2), nd, 0) if x.ints(2) else kernel
    padding = _expand(x.ints(3), nd, 0)
    dilation = _expand(x.ints(4), nd, 1) if "max" in base else [1] * nd
    spatial = conv_output_spatial(t.shape[-nd:], kernel, stride, padding, dilation, False, [0] * nd)
    if any(s <= 0 for s in spatial):
        return None
    out = math.prod(t.shape[:-nd]) * math.prod(spatial)
    extra = 8 * out if "with_indices" in base else 0
    work = float(out * math.prod(kernel))
    return Work(work, t.nbytes + out * t.itemsize + extra, t.dtype, "reduction", out, float(out * t.itemsize))


_POOLS = {
    "max_pool1d", "max_pool2d", "max_pool3d", "max_pool2d_with_indices", "max_pool3d_with_indices",
    "avg_pool1d", "avg_pool2d", "avg_pool3d", "_adaptive_avg_pool2d", "_adaptive_avg_pool3d",
    "max_pool2d_with_indices_backward", "max_pool3d_with_indices_backward", "avg_pool2d_backward",
    "avg_pool3d_backward", "_adaptive_avg_pool2d_backward", "_adaptive_avg_pool3d_backward",
}  # fmt: skip


def _optimizer(x: Inputs, base: str) -> Work | None:
    # _fused_adam(w)_(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps, ...):
    # params, exp_avgs and exp_avg_sqs are read and written, grads read (state_steps are scalars).
    lists = [x.tensor_list(i) for i in range(5)]
    if not lists[0]:
        return None
    params = sum(t.nbytes for t in lists[0])
    numel = sum(t.numel for t in lists[0])
    moved = 2 * params + sum(t.nbytes for t in lists[1]) + 2 * sum(t.nbytes for t in lists[2] + lists[3] + lists[4])
    return Work(12.0 * numel, moved, lists[0][0].dtype, "optimizer", numel, params)


def _foreach(x: Inputs, base: str) -> Work | None:
    lists = [x.tensor_list(i) for i in range(len(x.dims))]
    lists = [lst for lst in lists if lst]
    if not lists:
        return None
    n = sum(t.numel for t in lists[0])
    reads = sum(t.nbytes for lst in lists for t in lst)
    writes = sum(t.nbytes for t in lists[0])
    if "norm" in base:
        return Work(2.0 * n, reads + 4.0 * len(lists[0]), lists[0][0].dtype, "optimizer", len(lists[0]), 0.0)
    return Work(float(n), reads + writes, lists[0][0].dtype, "optimizer", n, writes)


# -- dispatch -----------------------------------------------------------------------------------

_MATMUL = {
    "aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::addbmm", "aten::matmul", "aten::linear",
    "aten::_scaled_mm", "aten::_int_mm", "aten::_addmm_activation", "aten::mv", "aten::addmv", "aten::dot",
    "aten::vdot",
}  # fmt: skip


def op_work(
    name: str, dims: Any, types: Any, concrete: Any = None, hint: str = "", oversized: list[str] | None = None
) -> Work | None:
    """FLOPs, compulsory bytes, dtype and class of one op; ``None`` when not modelled.

    ``hint`` is the name of a kernel the op launched: it gives the element type of ``TensorList``
    inputs, which the profiler records without a dtype.

    Sizes are computed with Python integers, which do not overflow; an op whose element counts do
    not fit the roofline's int64 columns, or whose FLOPs or bytes are infinite as floats, has
    damaged shapes (no tensor holds 2^63 elements): it is not modelled, and its name is added to
    ``oversized`` for a warning (``oversized_warning``).
    """
    if not isinstance(dims, list) or not dims:
        return None
    x = Inputs(dims, types if isinstance(types, list) else [], concrete if isinstance(concrete, list) else [], hint)
    try:
        work = _dispatch(x, name)
        if work is None:
            return None
        work = replace(work, in_numels=tuple(t.numel for t in x.tensors() if t.numel > 1))
    except OverflowError:  # a float of a product beyond 1.8e308
        work = None
    except (TypeError, ValueError, IndexError, ZeroDivisionError):
        return None
    if work is None or not _fits(work):
        if oversized is not None:
            oversized.append(name)
        return None
    return work


_INT64 = range(-(2**63), 2**63)


def _fits(work: Work) -> bool:
    """Whether ``work``'s counts fit int64 and its FLOPs and bytes are finite."""
    counts_fit = all(n in _INT64 for n in (work.out_numel, *work.in_numels))
    return counts_fit and not math.isinf(work.flops) and not math.isinf(work.bytes) and not math.isinf(work.out_bytes)


def oversized_warning(names: list[str]) -> str:
    """The warning for the ops ``op_work`` left out of the roofline for sizes beyond int64."""
    distinct = sorted(set(names))
    shown = ", ".join(n[:60] for n in distinct[:3]) + (f" and {len(distinct) - 3} more" if len(distinct) > 3 else "")
    return f"ops left out of the roofline: their Input Dims give sizes beyond int64 (damaged shapes): {shown}"


def _dispatch(x: Inputs, name: str) -> Work | None:
    base = _base(name)
    if name in _MATMUL:
        return _matmul(x, name)
    if name in _CONV_ARGS or name == "aten::convolution_backward":
        return _conv(x, name)
    if name in _ATTENTION:
        return _attention(x, name)
    if base in _SOFTMAX:
        return _softmax(x, base)
    if base in _NORMS:
        return _norm(x, base)
    if base in ("max", "min") and (t1 := x.tensor(1)) is not None and t1.shape:
        return _elementwise(x, name, base)  # max(self, other): elementwise
    if base in _REDUCTIONS or base in _SCANS:
        return _reduction(x, base)
    if base in ("cat", "stack", "_cat", "concat", "concatenate"):
        return _cat(x)
    if base in _COPIES:
        return _copy(x, base)
    if base in _FILLS:
        return _fill(x, base)
    if base in _POOLS:
        return _pool(x, base)
    if base in ("embedding", "index_select", "embedding_dense_backward", "embedding_backward", "gather",
                "scatter", "scatter_add", "index_add", "index_copy", "scatter_reduce"):  # fmt: skip
        return _gather(x, base)
    if base in ("_fused_adam", "_fused_adamw", "_fused_sgd", "_fused_adagrad"):
        return _optimizer(x, base)
    if base.startswith("_foreach_"):
        return _foreach(x, base)
    if base in _UNARY or base in _BINARY or base in _TERNARY or base == "native_dropout":
        return _elementwise(x, name, base)
    return None
