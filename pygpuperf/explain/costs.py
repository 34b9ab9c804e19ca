"""FLOPs and bytes of one aten op, from what the profiler records of its call.

The profiler (``record_shapes=True``) gives each op's positional arguments as
``input_shapes`` (``[]`` for a non-tensor argument and for a 0-dim tensor), their
``dtypes`` (``"float"``, ``"c10::Half"``, ``"Scalar"``, ``"TensorList"``, ...) and the
values of its non-tensor arguments (``FunctionEvent.concrete_inputs``: stride, padding,
``output_mask``, ...; the chrome trace's "Concrete Inputs", as strings), which
:func:`op_cost` takes as ``extra``. A tensor-list argument (``_foreach_*``, fused
optimizers, ``cat``) is a list of shapes, as the chrome trace's "Input Dims" gives it;
the profiler's event objects record every tensor list as ``[]``, and then the op's work
counts as zero and its formula says so.

FLOPs (an FMA is 2, a transcendental such as exp or sqrt is 1):

* GEMM, convolution and attention use ``torch.utils.flop_counter``'s registered
  formulas, so they agree with ``FlopCounterMode`` and with the step totals of
  :mod:`pygpuperf.workloads.accounting`. Two corrections, both named in the formula:
  the weight gradient of a convolution counts what its forward does (flop_counter's
  ``conv_backward_flop`` agrees for ``groups == 1`` but counts a grouped convolution's
  ``groups`` times over), and causal attention counts only the unmasked (query, key) pairs.
* Everything flop_counter counts as zero gets a per-element constant from the tables
  below (elementwise, normalisation, pooling, softmax, reductions, losses, optimizers).
  Those kernels are bound by memory traffic, so the constants only need to be
  the right size; each is derived in a comment next to it.

Bytes follow one convention, ``BYTES_CONVENTION``: the minimum traffic of the op run
alone, each tensor input read once and each output written once at its dtype's element
size. A tensor updated in place counts as read and written; allocation and view ops
move nothing. Exceptions, each named in the formula: inputs passed only for their
shape are not read, and gathers (embedding, nll_loss) read only the rows they gather.
An op with no rule here costs ``UNKNOWN`` (0 FLOPs; its inputs as bytes, plus any
``output_shapes`` given).
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import math
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

import torch
from torch.utils import flop_counter

from pygpuperf.core.precision import PRECISIONS, element_bytes, precision_in_kernel_name

BYTES_CONVENTION = (
    "minimum traffic: each tensor input read once and each output written once at its dtype's size; "
    "in-place tensors count as read and written; views and allocations count nothing"
)
UNKNOWN = "unknown op"

_READ_WRITE = "inputs read once + outputs written once"

_BOOL = 1
_STATS = 4  # normalisation statistics are kept in fp32 whatever the input dtype
_INDEX = 8  # int64 indices (max pooling)
_LIST_DEFAULT = 4  # a tensor list with no dtype recorded: fp32, as optimizer state is
# c10::ScalarType codes, as concrete_inputs gives a dtype argument.
_SCALAR_TYPE_BYTES = {0: 1, 1: 1, 2: 2, 3: 4, 4: 8, 5: 2, 6: 4, 7: 8, 9: 8, 10: 16, 11: 1, 15: 2,
                      23: 1, 24: 1, 25: 1, 26: 1}

# FLOPs per output element of elementwise ops (and of their in-place and _foreach_ forms).
_ONE_OP = (
    "add", "sub", "rsub", "mul", "div", "neg", "abs", "relu", "relu6", "clamp", "clamp_min", "clamp_max",
    "threshold", "threshold_backward", "maximum", "minimum", "fmax", "fmin", "sqrt", "rsqrt", "reciprocal",
    "exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "sin", "cos", "tanh", "erf", "sign", "pow",
    "square", "floor", "ceil", "round", "trunc", "frac", "where", "masked_fill", "hardtanh",
    "hardtanh_backward", "leaky_relu", "leaky_relu_backward", "eq", "ne", "lt", "le", "gt", "ge", "isnan",
    "isinf", "isfinite", "logical_not", "logical_and", "logical_or", "bitwise_and", "bitwise_or",
    "bitwise_not", "bitwise_xor", "remainder", "fmod", "copysign", "sgn",
)
ELEMENTWISE_FLOPS: dict[str, float] = {
    **dict.fromkeys(_ONE_OP, 1.0),
    # value * t1 (op) t2 + self: two multiplies (or a multiply and a divide) and an add
    "addcmul": 3.0, "addcdiv": 3.0,
    "lerp": 3.0,  # self + w * (end - self): a subtract and an FMA
    "sigmoid": 4.0,  # 1 / (1 + exp(-x)): negate, exp, add, divide
    "sigmoid_backward": 3.0,  # g * y * (1 - y)
    "tanh_backward": 3.0,  # g * (1 - y * y)
    "silu": 5.0,  # x * sigmoid(x)
    "silu_backward": 9.0,  # s = sigmoid(x) (4); g * s * (1 + x * (1 - s)) (5)
    "hardsigmoid": 3.0, "hardsigmoid_backward": 2.0,
    "hardswish": 4.0, "hardswish_backward": 4.0,
    "elu": 3.0, "elu_backward": 3.0,
    "gelu": 5.0,  # erf form: x/sqrt2, erf, +1, *x, *0.5 (the tanh form: GELU_TANH_FLOPS)
    "gelu_backward": 11.0,  # Phi(x) (4) + x * phi(x) (5: square, scale, exp, scale, multiply), add, * g
    "native_dropout_backward": 2.0,  # g * mask * scale
    "xlogy": 3.0, "special_xlogy": 3.0,  # x * log(y), 0 where x == 0: log, multiply, select
}
GELU_TANH_FLOPS = 9.0  # x^3 (2), *0.044715, +x, *sqrt(2/pi), tanh, +1, *x, *0.5
GELU_TANH_BACKWARD_FLOPS = 18.0  # inner polynomial (5), tanh, its derivative (3), 1 - t^2 (2), 5 products/sums, * g
DROPOUT_FLOPS = 3.0  # random number, compare with p, scale
_BOOL_OUTPUT = {"eq", "ne", "lt", "le", "gt", "ge", "isnan", "isinf", "isfinite", "logical_not", "logical_and",
                "logical_or"}

# FLOPs per input element of reductions.
REDUCTION_FLOPS: dict[str, float] = {
    **dict.fromkeys(("sum", "mean", "amax", "amin", "max", "min", "argmax", "argmin", "prod", "any", "all",
                     "cumsum", "nansum"), 1.0),
    **dict.fromkeys(("var", "std", "var_mean", "std_mean"), 3.0),  # subtract the mean, square-accumulate (FMA)
    **dict.fromkeys(("norm", "linalg_vector_norm", "frobenius_norm"), 2.0),  # square-accumulate (FMA)
    "logsumexp": 4.0,  # max, subtract, exp, accumulate
}

# Normalisation, FLOPs per element of the normalised input.
NORM_TRAIN_FLOPS = 8.0  # mean (1) + variance (subtract, FMA: 3) + normalise and scale: sub, mul, FMA (4)
NORM_EVAL_FLOPS = 4.0  # statistics given: sub, mul, FMA
NORM_BACKWARD_FLOPS = 9.0  # x_hat again (2), sum(g) (1), sum(g * x_hat) (2), g - mean - x_hat * mean' then * scale (4)
RMS_NORM_FLOPS = 4.0  # square-accumulate (2), * rstd, * weight
RMS_NORM_BACKWARD_FLOPS = 8.0  # sum(g * w * x) (3), x * rstd, rstd * (g * w - x_hat * mean) (4)

SOFTMAX_FLOPS = 5.0  # per element: max, subtract, exp, sum, divide (log_softmax: subtract the log instead)
SOFTMAX_BACKWARD_FLOPS = 4.0  # softmax: y * (g - sum(g * y)); log_softmax: g - exp(y) * sum(g)

NLL_FLOPS_PER_ROW = 2.0  # gather the target's log-probability, weight it, accumulate
NLL_BACKWARD_FLOPS_PER_ROW = 1.0  # one -weight / total written per row
MSE_FLOPS = 3.0  # per element: subtract, square-accumulate (FMA); backward: subtract, * 2/N, * g
BCE_WITH_LOGITS_FLOPS = 6.0  # max(x, 0) - x * y + log(1 + exp(-|x|)): abs, neg, exp, log1p, FMA
BCE_FLOPS = 6.0  # -(y log x + (1 - y) log(1 - x)): two logs, a subtract, two products, a sum
SMOOTH_L1_FLOPS = 5.0  # subtract, abs, compare with beta, square-and-scale or shift, select

# Optimizers, FLOPs per parameter element; they equal the sum of the per-element costs of the
# _foreach_ ops that torch's non-fused implementation runs for the same update.
ADAM_FLOPS = 13.0  # m: lerp (3); v: mul + addcmul (4); denom: sqrt, div, add eps (3); p: addcdiv (3)
ADAMW_FLOPS = 14.0  # Adam + decoupled decay p *= 1 - lr * wd (1)
ADAM_L2_FLOPS = 2.0  # Adam's weight_decay: g + wd * p (FMA)
AMSGRAD_FLOPS = 1.0  # max(v_max, v)
SGD_FLOPS = 2.0  # p -= lr * d (FMA)
SGD_MOMENTUM_FLOPS = 3.0  # buf = momentum * buf + (1 - dampening) * g: mul + FMA
SGD_WEIGHT_DECAY_FLOPS = 2.0  # g + wd * p
SGD_NESTEROV_FLOPS = 2.0  # g + momentum * buf
UNSCALE_FLOPS = 2.0  # _amp_foreach_non_finite_check_and_unscale_: multiply, finiteness test

# Ops that only allocate, alias or reshape: no data moves.
_NO_DATA = {
    "empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "view", "_unsafe_view", "reshape",
    "_reshape_alias", "transpose", "t", "permute", "expand", "expand_as", "as_strided", "as_strided_", "slice",
    "select", "unsqueeze", "squeeze", "flatten", "unflatten", "narrow", "split", "split_with_sizes", "chunk",
    "unbind", "detach", "detach_", "alias", "view_as", "resize_", "set_", "lift_fresh", "movedim", "diagonal",
    "unfold", "real", "imag", "broadcast_tensors", "resolve_conj", "resolve_neg", "record_stream", "size", "stride", "numel", "dim",
}


@dataclass(frozen=True)
class OpCost:
    """Work of one op call: FLOPs (FMA = 2), minimum bytes moved, and how both were counted."""

    flops: float
    bytes: float
    formula: str


_OPAQUE = re.compile(r"OpaqueType<(\d+)u?>")


def kernel_element_bytes(kernel_name: str) -> int | None:
    """Element size a kernel's name gives away (its first floating-point template argument), else None.
    The profiler records no dtype for tensor lists; the kernel that ran on them does."""
    opaque = _OPAQUE.search(kernel_name)  # copies and cats move elements as opaque words of their size
    if opaque:
        return int(opaque.group(1))
    precision = precision_in_kernel_name(kernel_name)
    return PRECISIONS[precision].element_bytes if precision else None


def collective_cost(collective: str, size_bytes: float, world_size: int) -> OpCost:
    """A collective's bus bytes, as nccl-tests counts them: S x bus factor (pygpuperf.measure.collectives).

    The machine model's communication ceilings are busbw, so bytes / busbw is the time the
    collective takes at that ceiling whatever the number of ranks.
    """
    from pygpuperf.measure.collectives import bus_factor

    factor = bus_factor(collective, world_size)
    return OpCost(0.0, float(size_bytes) * factor,
                  f"{collective}: 0 FLOPs; bytes = S x {factor:g} (nccl-tests bus factor over {world_size} ranks)")


# --------------------------------------------------------------------------- parsing a call


@dataclass
class _Arg:
    """A tensor argument or output: one shape, or several for a tensor list."""

    shapes: list[list[int]]
    item: int  # bytes per element
    is_list: bool = False
    distinct: int | None = None  # elements in memory when fewer than numel (an expanded, stride-0 view)

    @property
    def shape(self) -> list[int]:
        return self.shapes[0] if self.shapes else []

    @property
    def numel(self) -> int:
        return sum(_numel(s) for s in self.shapes)

    @property
    def nbytes(self) -> int:
        return (self.numel if self.distinct is None else self.distinct) * self.item


@dataclass
class _Call:
    op: str  # base name: "convolution", "_foreach_add_"
    args: list[_Arg | None]  # per position; None where the argument is not a tensor
    values: dict[str, Any]  # non-tensor arguments by schema name
    positional: list[Any]  # the same by position (concrete_inputs), when given as a sequence
    names: list[str]  # schema names by position, where the schema is known
    output_shapes: list[list[int]] | None

    def tensor(self, i: int) -> _Arg | None:
        return self.args[i] if i < len(self.args) else None

    def shape(self, i: int) -> list[int]:
        t = self.tensor(i)
        return list(t.shape) if t is not None else []

    def value(self, name: str, pos: int | None = None, default: Any = None) -> Any:
        """A non-tensor argument by schema name; by position only where the schema is unknown."""
        v = self.values.get(name)
        if v is None and not self.names and pos is not None and pos < len(self.positional):
            v = self.positional[pos]
        return default if v is None else v

    def tensors(self) -> list[tuple[int, _Arg]]:
        return [(i, a) for i, a in enumerate(self.args) if a is not None]

    @property
    def item(self) -> int:
        """Element size of the first tensor input, fp32 when there is none."""
        return next((a.item for _, a in self.tensors()), 4)

    @property
    def lists_unrecorded(self) -> bool:
        """Every tensor list empty: the event objects' recording, which drops their shapes (one empty
        list among filled ones, like a fused Adam's max_exp_avg_sqs without amsgrad, is just empty)."""
        lists = [a for _, a in self.tensors() if a.is_list]
        return bool(lists) and all(not a.shapes for a in lists)


@dataclass
class _Rule:
    """What an op's handler found: FLOPs, outputs, the formula, and any reads that differ from the rule."""

    flops: float
    outputs: list[_Arg]
    formula: str
    not_read: set[int] = field(default_factory=set)  # positions passed only for their shape
    read_bytes: float | None = None  # replaces "every input read once" (gathers)
    bytes_note: str = _READ_WRITE


def _numel(shape: Sequence[int]) -> int:
    return math.prod(int(d) for d in shape)


def base_name(op: str) -> str:
    """'aten::_foreach_add_.Scalar' or 'aten.mm.default' -> '_foreach_add_' / 'mm'."""
    name = op.strip()
    for prefix in ("aten::", "aten."):
        if name.startswith(prefix):
            name = name[len(prefix):]
    return name.split(".", 1)[0]


def _is_shape(x: Any) -> bool:
    return isinstance(x, (list, tuple)) and all(isinstance(d, int) for d in x)


def _is_list_type(dtypes: Sequence[Any], i: int) -> bool:
    return i < len(dtypes) and isinstance(dtypes[i], str) and dtypes[i].strip() == "TensorList"


def _parse_arg(shape: Any, dtype: Any, fallback_item: int) -> _Arg | None:
    dtype_list = dtype if isinstance(dtype, (list, tuple)) else None
    item = element_bytes(dtype) if isinstance(dtype, str) else None
    if dtype_list:
        item = next((element_bytes(d) for d in dtype_list if element_bytes(d)), None)
    is_list = isinstance(dtype, str) and dtype.strip() == "TensorList"
    if isinstance(shape, (list, tuple)) and shape and all(_is_shape(s) for s in shape):
        return _Arg([list(s) for s in shape], item or fallback_item, is_list=True)
    if is_list or dtype_list is not None:
        return _Arg([], item or fallback_item, is_list=True)
    if _is_shape(shape) and shape:
        return _Arg([list(shape)], item or fallback_item)
    if _is_shape(shape) and item is not None:
        return _Arg([[]], item)  # a 0-dim tensor
    return None


@functools.lru_cache(maxsize=None)
def _schemas(op: str) -> tuple[tuple[str, tuple[tuple[str, bool], ...]], ...]:
    """(overload, ((argument name, is a tensor), ...)) of each overload of aten::op."""
    packet = getattr(torch.ops.aten, op, None)
    if packet is None:
        return ()
    out = []
    for overload in packet.overloads():
        try:
            schema = getattr(packet, overload)._schema
        except (AttributeError, RuntimeError):
            continue
        out.append((overload, tuple((a.name, "Tensor" in str(a.type)) for a in schema.arguments)))
    return tuple(out)


def _argument_names(op: str, is_tensor: list[bool]) -> list[str]:
    """Schema names of the recorded positions: the overload with as many arguments whose
    tensor positions agree best with the recorded ones ('default' on a tie)."""
    best: tuple[int, int, int, list[str]] | None = None
    for overload, args in _schemas(op):
        if len(args) < len(is_tensor):
            continue
        # A shorter record than the schema is its positional prefix (trailing keyword-only arguments unrecorded).
        score = sum(t == a for t, (_, a) in zip(is_tensor, args))
        rank = (len(args) == len(is_tensor), score, overload == "default")
        if best is None or rank > best[:3]:
            best = (*rank, [n for n, _ in args][:len(is_tensor)])
    return best[3] if best else []


def _concrete(v: Any) -> Any:
    """A concrete input as the chrome trace writes it ('[2, 2]', 'False', '' for a tensor) -> its value."""
    if not isinstance(v, str):
        return v
    text = v.strip()
    if not text:
        return None
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text  # a bare string argument, e.g. gelu's approximate="tanh"


def _distinct(shape: list[int], strides: Any) -> int | None:
    """Elements a tensor really holds when some of its dims are broadcast (stride 0); None when none are."""
    if not isinstance(strides, (list, tuple)) or len(strides) != len(shape) or not all(
            isinstance(x, int) for x in strides) or 0 not in strides:
        return None
    return _numel([d for d, st in zip(shape, strides) if st != 0])


def _parse(op: str, input_shapes: Sequence[Any], dtypes: Sequence[Any], output_shapes: Any, extra: Any,
           input_strides: Sequence[Any] = (), list_item: int | None = None) -> _Call:
    base = base_name(op)
    dtypes = list(dtypes or [])
    known = [element_bytes(d) for d in dtypes if isinstance(d, str) and element_bytes(d)]
    fallback = known[0] if known else (list_item or (_LIST_DEFAULT if base.startswith(("_foreach", "_fused")) else 4))
    args = [_parse_arg(s, dtypes[i] if i < len(dtypes) else "", list_item if _is_list_type(dtypes, i) and list_item
                       else fallback) for i, s in enumerate(input_shapes)]
    for i, arg in enumerate(args):
        if arg is not None and not arg.is_list and i < len(input_strides):
            arg.distinct = _distinct(arg.shape, input_strides[i])
    positional: list[Any] = []
    values: dict[str, Any] = {}
    n = len(input_shapes) or (len(extra) if isinstance(extra, (list, tuple)) else 0)
    is_tensor = [a is not None for a in args] + [False] * max(0, n - len(args))
    names = _argument_names(base, is_tensor[:n]) if n else []
    if isinstance(extra, Mapping):
        values = {name: _concrete(v) for name, v in extra.items()}
    elif isinstance(extra, (list, tuple)):
        positional = [_concrete(v) for v in extra]
        values = {name: v for name, v in zip(names, positional)}
    outs = [list(s) for s in output_shapes] if output_shapes is not None else None
    return _Call(base, args, values, positional, names, outs)


# --------------------------------------------------------------------------- the public entry


def op_cost(op: str, input_shapes: Sequence[Any], dtypes: Sequence[Any],
            output_shapes: Sequence[Sequence[int]] | None = None,
            extra: Sequence[Any] | Mapping[str, Any] | None = None, *,
            input_strides: Sequence[Any] = (), list_item: int | None = None) -> OpCost:
    """FLOPs and minimum bytes of one call of aten `op`, with the formula that counted them.

    `input_shapes` and `dtypes` are per positional argument as the profiler records them
    (a tensor-list argument may be a list of shapes); `extra` holds the non-tensor
    arguments, positionally as ``FunctionEvent.concrete_inputs`` gives them or by schema
    name; `output_shapes`, when known, replaces the outputs the rules infer.
    `input_strides` (the profiler's "Input Strides") count an expanded input's broadcast
    dims once; `list_item` is the element size of tensor lists, whose dtype the profiler
    does not record (else fp32).
    """
    call = _parse(op, input_shapes, dtypes, output_shapes, extra, input_strides, list_item)
    handler = _handler(call.op)
    if handler is None:
        outputs = [_Arg([s], call.item) for s in (call.output_shapes or [])]
        read = sum(a.nbytes for _, a in call.tensors())
        return OpCost(0.0, float(read + sum(o.nbytes for o in outputs)), UNKNOWN)
    try:
        rule = handler(call)
    except (ValueError, TypeError, IndexError, KeyError, AttributeError, AssertionError, ZeroDivisionError) as err:
        # Shapes that do not fit the op's rule (a different overload, missing arguments).
        read = sum(a.nbytes for _, a in call.tensors())
        return OpCost(0.0, float(read), f"{UNKNOWN}: {call.op} arguments did not fit its rule ({err})")
    outputs = rule.outputs
    if call.output_shapes is not None:
        items = [o.item for o in rule.outputs]
        outputs = [_Arg([s], items[i] if i < len(items) else call.item) for i, s in enumerate(call.output_shapes)]
    read = rule.read_bytes if rule.read_bytes is not None else sum(
        a.nbytes for i, a in call.tensors() if i not in rule.not_read)
    total = read + sum(o.nbytes for o in outputs)
    formula = f"{call.op}: {rule.formula}; bytes: {rule.bytes_note}"
    if call.lists_unrecorded:
        formula += " (tensor-list shapes not recorded: their work counts as 0)"
    return OpCost(float(rule.flops), float(total), formula)


def moves_no_data(op: str) -> bool:
    """Whether an aten op only allocates, aliases or reshapes ("aten::view"): it launches no kernel."""
    return op.removeprefix("aten::") in _NO_DATA


def has_rule(op: str) -> bool:
    """Whether aten `op` has a FLOP and byte rule (views and allocations included)."""
    return _handler(base_name(op)) is not None


def is_math_op(op: str) -> bool:
    """Whether aten `op` is a GEMM, convolution or attention (what tensor cores or BLAS would run)."""
    return _handler(base_name(op)) in _MATH_HANDLERS


def _handler(op: str) -> Callable[[_Call], _Rule] | None:
    if op in _HANDLERS:
        return _HANDLERS[op]
    if op in _NO_DATA:
        return _no_data
    if op.startswith("_foreach_"):
        return _foreach
    name = op[:-1] if op.endswith("_") else op
    if name in ELEMENTWISE_FLOPS:
        return _elementwise
    if name in REDUCTION_FLOPS:
        return _reduction
    return None


# --------------------------------------------------------------------------- GEMM, convolution, attention

_aten = torch.ops.aten
_REGISTRY = flop_counter.flop_registry


def _registry(packet: Any, *args: Any, out: Any = None) -> int:
    """A formula torch.utils.flop_counter registers for `packet`, called with shapes."""
    return int(_REGISTRY[packet](*args, out_val=out))


def _mm(call: _Call) -> _Rule:
    a, b = call.shape(0), call.shape(1)
    return _Rule(_registry(_aten.mm, a, b), [_Arg([[a[0], b[1]]], call.tensor(0).item)],
                 "2*m*n*k (torch.utils.flop_counter)")


def _addmm(call: _Call) -> _Rule:
    a, b = call.shape(1), call.shape(2)
    return _Rule(_registry(_aten.addmm, call.shape(0), a, b), [_Arg([[a[0], b[1]]], call.tensor(1).item)],
                 "2*m*n*k, bias add not counted (torch.utils.flop_counter)")


def _bmm(call: _Call) -> _Rule:
    a, b = call.shape(0), call.shape(1)
    return _Rule(_registry(_aten.bmm, a, b), [_Arg([[a[0], a[1], b[2]]], call.tensor(0).item)],
                 "2*batch*m*n*k (torch.utils.flop_counter)")


def _baddbmm(call: _Call) -> _Rule:
    a, b = call.shape(1), call.shape(2)
    return _Rule(_registry(_aten.baddbmm, call.shape(0), a, b), [_Arg([[a[0], a[1], b[2]]], call.tensor(1).item)],
                 "2*batch*m*n*k (torch.utils.flop_counter)")


def _scaled_mm(call: _Call) -> _Rule:
    a, b = call.shape(0), call.shape(1)
    out_dtype = call.value("out_dtype", 5)
    item = _SCALAR_TYPE_BYTES.get(out_dtype, call.tensor(0).item) if isinstance(out_dtype, int) else call.tensor(0).item
    return _Rule(_registry(_aten._scaled_mm, a, b, call.shape(2), call.shape(3)), [_Arg([[a[0], b[1]]], item)],
                 "2*m*n*k (torch.utils.flop_counter)")


def _matmul(call: _Call) -> _Rule:
    a, b = call.shape(0), call.shape(1)
    a2 = [1] + a if len(a) == 1 else a
    b2 = b + [1] if len(b) == 1 else b
    batch = list(torch.broadcast_shapes(tuple(a2[:-2]), tuple(b2[:-2])))
    m, k, n = a2[-2], a2[-1], b2[-1]
    out = batch + ([m] if len(a) > 1 else []) + ([n] if len(b) > 1 else [])
    return _Rule(2 * _numel(batch) * m * n * k, [_Arg([out], call.tensor(0).item)],
                 "2*batch*m*n*k over the broadcast batch (as mm/bmm in torch.utils.flop_counter)")


def _linear(call: _Call) -> _Rule:
    x, w = call.shape(0), call.shape(1)
    rows = _numel(x[:-1])
    return _Rule(_registry(_aten.mm, [rows, x[-1]], [w[1], w[0]]), [_Arg([x[:-1] + [w[0]]], call.tensor(0).item)],
                 "2*rows*in*out, bias add not counted (as addmm in torch.utils.flop_counter)")


def _pair(v: Any, n: int, default: int) -> list[int]:
    if v is None or (isinstance(v, (list, tuple)) and not v):
        return [default] * n
    if isinstance(v, (list, tuple)):
        return [int(x) for x in v] * (n if len(v) == 1 else 1)
    return [int(v)] * n


def _conv_out_shape(x: list[int], w: list[int], stride: Any, padding: Any, dilation: Any, transposed: bool,
                    output_padding: Any, groups: int) -> list[int]:
    n = len(x) - 2
    s, p, d, op_ = _pair(stride, n, 1), _pair(padding, n, 0), _pair(dilation, n, 1), _pair(output_padding, n, 0)
    if transposed:
        spatial = [(x[2 + i] - 1) * s[i] - 2 * p[i] + d[i] * (w[2 + i] - 1) + op_[i] + 1 for i in range(n)]
        return [x[0], w[1] * groups] + spatial
    spatial = [(x[2 + i] + 2 * p[i] - d[i] * (w[2 + i] - 1) - 1) // s[i] + 1 for i in range(n)]
    return [x[0], w[0]] + spatial


def _convolution(call: _Call) -> _Rule:
    x, w = call.shape(0), call.shape(1)
    transposed = bool(call.value("transposed", None, call.op == "cudnn_convolution_transpose"))
    # Without the argument, the shapes fix it: weight is [C_out, C_in / groups, ...]; a transposed
    # convolution's [C_in, C_out / groups, ...] does not, and counts as one group.
    groups = int(call.value("groups", None, 0) or 0) or (1 if transposed else max(1, x[1] // max(1, w[1])))
    out = call.output_shapes[0] if call.output_shapes else _conv_out_shape(
        x, w, call.value("stride"), call.value("padding"), call.value("dilation"), transposed,
        call.value("output_padding"), groups)
    flops = _registry(_aten.convolution, x, w, None, None, None, None, transposed, out=out)
    rule = _Rule(flops, [_Arg([out], call.tensor(0).item)],
                 "2*N*out_spatial*kernel*C_out*C_in/groups, bias not counted (torch.utils.flop_counter)")
    touched = 1.0 if transposed else _touched_input_share(x, w, out, call.value("stride"), call.value("dilation"))
    if touched < 1.0:
        # A window smaller than its stride (a strided 1x1 downsample) skips input rows and columns.
        rule.read_bytes = sum(a.nbytes for _, a in call.tensors()) - call.tensor(0).nbytes * (1.0 - touched)
        rule.bytes_note = (_READ_WRITE + f"; the input only where the windows land ({100 * touched:.0f}%: "
                           "a window smaller than its stride skips the rest)")
    return rule


def _touched_input_share(x: list[int], w: list[int], out: list[int], stride: Any, dilation: Any) -> float:
    """Share of the input's spatial positions some window reads: below 1 only when a window is smaller than its stride."""
    n = len(x) - 2
    s, d = _pair(stride, n, 1), _pair(dilation, n, 1)
    share = 1.0
    for i in range(n):
        span = d[i] * (w[2 + i] - 1) + 1
        if span < s[i] and x[2 + i] > 0:
            share *= min(1.0, out[2 + i] * w[2 + i] / x[2 + i])
    return share


def _convolution_backward(call: _Call) -> _Rule:
    grad_out, x, w = call.shape(0), call.shape(1), call.shape(2)
    transposed = bool(call.value("transposed", 7, False))
    mask = list(call.value("output_mask", 10, [True, True, True]))
    # Groups from the shapes: weight is [C_out, C_in/g, ...], or [C_in, C_out/g, ...] transposed.
    groups = int(call.value("groups", 9, 0) or 0) or max(1, (grad_out[1] if transposed else x[1]) // max(1, w[1]))
    bias = [grad_out[1]]
    flops = 0
    if mask[0]:
        flops += _registry(_aten.convolution_backward, grad_out, x, w, None, None, None, None, transposed, None,
                           groups, [True, False, False], out=(x, w, bias))
    if mask[1]:
        # The weight gradient costs what the forward does. flop_counter's conv_backward_flop counts it
        # groups times over for a grouped convolution; for groups == 1 the two agree.
        flops += flop_counter.conv_flop_count(x, w, grad_out, transposed=transposed)
    item = call.tensor(0).item
    outputs = [_Arg([s], item) for s, m in zip((x, w, bias), mask) if m]
    # grad_input needs grad_out and the weight; grad_weight needs grad_out and the input.
    not_read = ({1} if not mask[1] else set()) | ({2} if not mask[0] else set())
    return _Rule(flops, outputs, "grad_input (torch.utils.flop_counter) + grad_weight (the forward's count, "
                 "which flop_counter multiplies by groups); bias gradient not counted", not_read=not_read,
                 bytes_note="grad_output read, input read if grad_weight is computed, weight read if grad_input "
                            "is; gradients written once")


def _kept_pairs(s_q: int, s_k: int, causal: int) -> float:
    """Share of (query, key) pairs a causal mask keeps: 1 top-left aligned (torch's is_causal),
    2 bottom-right aligned; 0 keeps all."""
    if not causal or s_q <= 0 or s_k <= 0:
        return 1.0
    offset = 0 if causal == 1 else s_k - s_q
    kept = sum(min(max(i + 1 + offset, 0), s_k) for i in range(s_q))
    return kept / (s_q * s_k)


def _attention(q: list[int], k: list[int], v: list[int], causal: int, backward: bool, layout: str) -> tuple[float, str]:
    """Attention FLOPs from torch.utils.flop_counter's sdpa counts; q/k/v as [b, h, s, d]."""
    if backward:
        count = flop_counter.sdpa_backward_flop_count(q[:3] + [v[3]], q, k, v)
    else:
        count = flop_counter.sdpa_flop_count(q, k, v)
    share = _kept_pairs(q[2], k[2], causal)
    note = ("2 GEMMs (QK^T, PV)" if not backward else "5 GEMMs (recomputed QK^T, dV, dP, dQ, dK)") + \
        " (torch.utils.flop_counter)" + layout
    if share < 1.0:
        note += f", x {share:.4f} for the causal mask's kept (query, key) pairs"
    return count * share, note


def _sdpa(call: _Call) -> _Rule:
    backward = call.op.endswith("_backward")
    first = 1 if backward else 0
    q, k, v = call.shape(first), call.shape(first + 1), call.shape(first + 2)
    causal = 1 if call.value("is_causal", None, False) else 0
    flops, note = _attention(q, k, v, causal, backward, "")
    item = call.tensor(first).item
    if backward:
        outputs = [_Arg([q], item), _Arg([k], item), _Arg([v], item)]
    else:
        outputs = [_Arg([q[:3] + [v[3]]], item)]
        if call.op != "scaled_dot_product_attention":
            outputs.append(_Arg([q[:3]], _STATS))  # logsumexp
    return _Rule(flops, outputs, note)


def _to_bhsd(shape: list[int]) -> list[int]:
    """The kernels' [b, s, h, d] (packed varlen: [total, h, d]) -> [b, h, s, d]."""
    if len(shape) == 3:
        return [1, shape[1], shape[0], shape[2]]
    return [shape[0], shape[2], shape[1], shape[3]]


# Position of the cumulative sequence lengths that mark packed varlen inputs.
_VARLEN_POS = {"_flash_attention_forward": 3, "_flash_attention_backward": 6, "_efficient_attention_forward": 4,
               "_efficient_attention_backward": 6}


def _flash_efficient(call: _Call) -> _Rule:
    backward = call.op.endswith("_backward")
    first = 1 if backward else 0
    raw_q, raw_k, raw_v = call.shape(first), call.shape(first + 1), call.shape(first + 2)
    q, k, v = _to_bhsd(raw_q), _to_bhsd(raw_k), _to_bhsd(raw_v)
    layout = ", from the kernel's [b, s, h, d] layout"
    max_k = call.value("max_k", None) or call.value("max_seqlen_k", None)
    if len(raw_q) == 3 or call.tensor(_VARLEN_POS[call.op]) is not None:
        # Packed sequences: each query sees at most max_k keys, so all queries against max_k keys
        # bounds the work from above.
        keys = int(max_k) if max_k else k[2]
        k, v = [1, k[1], keys, k[3]], [1, v[1], keys, v[3]]
        layout += ", packed varlen sequences: an upper bound (every query against max_k keys)"
    if call.op.startswith("_flash"):
        causal = 1 if call.value("is_causal", None, False) else 0
    else:
        causal = int(call.value("custom_mask_type", None, 0) or 0)
    flops, note = _attention(q, k, v, causal, backward, layout)
    item = call.tensor(first).item
    if backward:
        outputs = [_Arg([raw_q], item), _Arg([raw_k], item), _Arg([raw_v], item)]
    else:
        outputs = [_Arg([raw_q[:-1] + [raw_v[-1]]], item), _Arg([[q[0], q[1], q[2]]], _STATS)]
    return _Rule(flops, outputs, note)


# --------------------------------------------------------------------------- memory-bound ops


def _out_item(call: _Call) -> int:
    """Type promotion, roughly: the widest tensor input with dimensions (0-dim tensors do not promote)."""
    sized = [a.item for _, a in call.tensors() if a.shape]
    return max(sized) if sized else call.item


def _elementwise(call: _Call) -> _Rule:
    inplace = call.op.endswith("_")
    name = call.op[:-1] if inplace else call.op
    per = _elementwise_flops(call, name)
    shapes = [tuple(a.shape) for _, a in call.tensors() if not a.is_list]
    out_shape = list(call.shape(0)) if inplace else list(torch.broadcast_shapes(*shapes)) if shapes else []
    item = _BOOL if name in _BOOL_OUTPUT else (call.tensor(0).item if inplace and call.tensor(0) else _out_item(call))
    outputs = [_Arg([out_shape], item)]
    if name == "native_dropout":
        outputs.append(_Arg([out_shape], _BOOL))
    where = "in place: " if inplace else ""
    return _Rule(per * _numel(out_shape), outputs, f"{where}{per:g} FLOP per output element")


def _elementwise_flops(call: _Call, name: str) -> float:
    if name == "native_dropout":
        return DROPOUT_FLOPS
    if name in ("gelu", "gelu_backward") and call.value("approximate", None, "none") == "tanh":
        return GELU_TANH_FLOPS if name == "gelu" else GELU_TANH_BACKWARD_FLOPS
    per = ELEMENTWISE_FLOPS[name]
    alpha = call.value("alpha", None, 1)
    if name in ("add", "sub") and alpha not in (None, 1, 1.0):
        per += 1.0  # a scaled add is an FMA
    return per


def _reduced_shape(shape: list[int], dim: Any, keepdim: bool) -> list[int]:
    if dim is None or (isinstance(dim, (list, tuple)) and not dim):
        return [1] * len(shape) if keepdim else []
    dims = {d % len(shape) for d in (dim if isinstance(dim, (list, tuple)) else [dim])} if shape else set()
    return [1 if i in dims else s for i, s in enumerate(shape) if keepdim or i not in dims]


def _reduction(call: _Call) -> _Rule:
    name = call.op.rstrip("_")
    if name in ("max", "min") and call.tensor(1) is not None:  # max(a, b): elementwise
        return _elementwise(dataclasses.replace(call, op="maximum" if name == "max" else "minimum"))
    x = call.shape(0)
    per = REDUCTION_FLOPS[name]
    if name == "cumsum":
        return _Rule(per * _numel(x), [_Arg([x], call.item)], f"{per:g} FLOP per input element")
    out = _reduced_shape(x, call.value("dim", 1), bool(call.value("keepdim", None, False)))
    outputs = [_Arg([out], call.item)]
    if name in ("max", "min") and call.value("dim", 1) is not None:
        outputs.append(_Arg([out], _INDEX))  # values and indices
    if name in ("var_mean", "std_mean"):
        outputs.append(_Arg([out], call.item))
    return _Rule(per * _numel(x), outputs, f"{per:g} FLOP per input element")


def _no_data(call: _Call) -> _Rule:
    return _Rule(0.0, [], "view or allocation", not_read={i for i, _ in call.tensors()},
                 bytes_note="no data moved")


def _fill(call: _Call) -> _Rule:
    """fill_, zero_, zeros, ones_like, ...: written, never read."""
    if call.tensor(0) is not None:
        shape, item = call.shape(0), call.tensor(0).item
    else:
        size = call.value("size", 0, [])
        shape, item = list(size), _dtype_item(call.value("dtype", None), 4)
    if call.op.endswith("_like"):
        item = _dtype_item(call.value("dtype", 1), item)
    return _Rule(0.0, [_Arg([shape], item)], "0 FLOPs (memset)", not_read={i for i, _ in call.tensors()},
                 bytes_note="output written once, nothing read")


def _dtype_item(code: Any, default: int) -> int:
    if isinstance(code, int) and code in _SCALAR_TYPE_BYTES:
        return _SCALAR_TYPE_BYTES[code]
    if isinstance(code, str) and element_bytes(code):
        return element_bytes(code) or default
    return default


def _copy(call: _Call) -> _Rule:
    """copy_(self, src): src read, self written; clone/contiguous/_to_copy: input read, copy written."""
    if call.op == "copy_":
        return _Rule(0.0, [_Arg([call.shape(0)], call.tensor(0).item)], "0 FLOPs (copy)", not_read={0},
                     bytes_note="source read once, destination written once")
    item = _dtype_item(call.value("dtype", 1), call.tensor(0).item) if call.op in ("_to_copy", "to") else \
        call.tensor(0).item
    return _Rule(0.0, [_Arg([call.shape(0)], item)], "0 FLOPs (copy)")


def _cat(call: _Call) -> _Rule:
    parts = call.tensor(0)
    if parts is None or not parts.shapes:
        return _Rule(0.0, [], "0 FLOPs (copy)")
    dim = int(call.value("dim", 1, 0))
    shapes = [s for s in parts.shapes if _numel(s) or len(s) > 1]
    ref = shapes[0]
    d = dim % len(ref)
    if call.op == "stack":
        out = ref[:d] + [len(shapes)] + ref[d:]
    else:
        out = ref[:d] + [sum(s[d] for s in shapes)] + ref[d + 1:]
    return _Rule(0.0, [_Arg([out], parts.item)], "0 FLOPs (copy)")


def _constant_pad(call: _Call) -> _Rule:
    x = list(call.shape(0))
    pad = list(call.value("pad", 1, []))
    for i in range(len(pad) // 2):  # pairs from the last dimension backwards
        x[-1 - i] += pad[2 * i] + pad[2 * i + 1]
    return _Rule(0.0, [_Arg([x], call.tensor(0).item)], "0 FLOPs (copy)")


def _index_select(call: _Call) -> _Rule:
    x, index = call.shape(0), call.tensor(2)
    dim = int(call.value("dim", 1, 0)) % max(1, len(x))
    out = x[:dim] + [index.numel if index else 0] + x[dim + 1:]
    item = call.tensor(0).item
    read = _numel(out) * item + (index.nbytes if index else 0)
    return _Rule(0.0, [_Arg([out], item)], "0 FLOPs (gather)", read_bytes=read,
                 bytes_note="index and the gathered elements read once, output written once")


def _gather(call: _Call) -> _Rule:
    index = call.tensor(2)
    item = call.tensor(0).item
    out = index.shape if index else []
    read = _numel(out) * item + (index.nbytes if index else 0)
    return _Rule(0.0, [_Arg([out], item)], "0 FLOPs (gather)", read_bytes=read,
                 bytes_note="index and the gathered elements read once, output written once")


# Normalisation --------------------------------------------------------------


def _batch_norm(call: _Call) -> _Rule:
    x = call.shape(0)
    channels = x[1] if len(x) > 1 else 1
    training = call.op in ("_batch_norm_with_update",) or (
        call.op not in ("_native_batch_norm_legit_no_training", "_batch_norm_no_update")
        and bool(call.value("training", 5, True)))
    item = call.tensor(0).item
    outputs = [_Arg([x], item)]
    if training:
        outputs += [_Arg([[channels]], _STATS), _Arg([[channels]], _STATS)]  # saved mean, saved inverse std
        outputs += [_Arg([a.shape], a.item) for i in (3, 4) if (a := call.tensor(i)) is not None]  # running stats
    per = NORM_TRAIN_FLOPS if training else NORM_EVAL_FLOPS
    how = "training: statistics, normalise, scale" if training else "running statistics given: normalise, scale"
    return _Rule(per * _numel(x), outputs, f"{per:g} FLOP per element ({how})",
                 bytes_note=_READ_WRITE + "; running statistics updated in place when training")


def _batch_norm_backward(call: _Call) -> _Rule:
    # cudnn_batch_norm_backward puts the input first, the others grad_out.
    x_pos, w_pos = (0, 2) if call.op == "cudnn_batch_norm_backward" else (1, 2)
    x = call.shape(x_pos)
    mask = list(call.value("output_mask", None, [True, True, True]))
    weight = call.tensor(w_pos)
    item = call.tensor(x_pos).item
    outputs = [_Arg([x], item)] if mask[0] else []
    if weight is not None:
        outputs += [_Arg([weight.shape], weight.item) for m in mask[1:] if m]
    train = call.op != "native_batch_norm_backward" or bool(call.value("train", 7, True))
    not_read = {3, 4} if train else {5, 6}  # running statistics (training) or saved ones (eval)
    return _Rule(NORM_BACKWARD_FLOPS * _numel(x), outputs, f"{NORM_BACKWARD_FLOPS:g} FLOP per element",
                 not_read=not_read)


def _normalized_rows(call: _Call, shape_pos: int, weight_pos: int) -> tuple[list[int], int]:
    x = call.shape(0)
    normalized = call.value("normalized_shape", shape_pos)
    if not normalized:
        w = call.tensor(weight_pos)
        normalized = w.shape if w is not None else x[-1:]
    n = len(list(normalized))
    return x, _numel(x[:len(x) - n])


def _layer_norm(call: _Call) -> _Rule:
    x, rows = _normalized_rows(call, 1, 2)
    rms = call.op in ("_fused_rms_norm", "rms_norm")
    per = RMS_NORM_FLOPS if rms else NORM_TRAIN_FLOPS
    outputs = [_Arg([x], call.tensor(0).item)] + [_Arg([[rows]], _STATS)] * (1 if rms else 2)  # mean, rstd
    return _Rule(per * _numel(x), outputs, f"{per:g} FLOP per element")


def _layer_norm_backward(call: _Call) -> _Rule:
    x = call.shape(1)
    rms = call.op == "_fused_rms_norm_backward"
    weight = call.tensor(4 if rms else 5)
    mask = list(call.value("output_mask", None, [True, True] if rms else [True, True, True]))
    item = call.tensor(0).item
    outputs = [_Arg([x], item)] if mask[0] else []
    if weight is not None:
        outputs += [_Arg([weight.shape], weight.item) for m in mask[1:] if m]
    per = RMS_NORM_BACKWARD_FLOPS if rms else NORM_BACKWARD_FLOPS
    return _Rule(per * _numel(x), outputs, f"{per:g} FLOP per element", not_read=set() if rms else {6})


def _group_norm(call: _Call) -> _Rule:
    x = call.shape(0)
    groups = int(call.value("group", 6, 0) or call.value("num_groups", 1, 1))
    item = call.tensor(0).item
    outputs = [_Arg([x], item), _Arg([[x[0], groups]], _STATS), _Arg([[x[0], groups]], _STATS)]
    return _Rule(NORM_TRAIN_FLOPS * _numel(x), outputs, f"{NORM_TRAIN_FLOPS:g} FLOP per element")


def _group_norm_backward(call: _Call) -> _Rule:
    x = call.shape(1)
    mask = list(call.value("output_mask", 9, [True, True, True]))
    channels = x[1] if len(x) > 1 else 1
    item = call.tensor(0).item
    outputs = ([_Arg([x], item)] if mask[0] else []) + [_Arg([[channels]], item) for m in mask[1:] if m]
    return _Rule(NORM_BACKWARD_FLOPS * _numel(x), outputs, f"{NORM_BACKWARD_FLOPS:g} FLOP per element")


# Softmax and losses ----------------------------------------------------------


def _softmax(call: _Call) -> _Rule:
    x = call.shape(0)
    item = _STATS if call.value("half_to_float", 2, False) else call.tensor(0).item
    return _Rule(SOFTMAX_FLOPS * _numel(x), [_Arg([x], item)], f"{SOFTMAX_FLOPS:g} FLOP per element")


def _softmax_backward(call: _Call) -> _Rule:
    x = call.shape(0)
    item = _dtype_item(call.value("input_dtype", 3), call.tensor(0).item)
    return _Rule(SOFTMAX_BACKWARD_FLOPS * _numel(x), [_Arg([x], item)], f"{SOFTMAX_BACKWARD_FLOPS:g} FLOP per element")


def _nll_loss(call: _Call) -> _Rule:
    logp, target = call.tensor(0), call.tensor(1)
    rows = target.numel if target else 0
    reduction = int(call.value("reduction", 3, 1))
    out = [list(target.shape)] if reduction == 0 and target else [[]]
    weight = call.tensor(2)
    read = rows * logp.item + (target.nbytes if target else 0) + (weight.nbytes if weight else 0)
    return _Rule(NLL_FLOPS_PER_ROW * rows, [_Arg(out, logp.item), _Arg([[]], logp.item)],
                 f"{NLL_FLOPS_PER_ROW:g} FLOP per target", read_bytes=read,
                 bytes_note="targets, weights and one gathered log-probability per target read once; "
                            "outputs written once")


def _nll_loss_backward(call: _Call) -> _Rule:
    target = call.tensor(2)
    rows = target.numel if target else 0
    # aten zero-fills grad_input in an op of its own; this one writes one entry per target.
    return _Rule(NLL_BACKWARD_FLOPS_PER_ROW * rows, [_Arg([[rows]], call.tensor(1).item)],
                 f"{NLL_BACKWARD_FLOPS_PER_ROW:g} FLOP per target", not_read={1},
                 bytes_note="grad_output, targets and weights read once (the input only for its shape); one "
                            "grad_input entry written per target (the zero fill is a separate op)")


def _cross_entropy(call: _Call) -> _Rule:
    x, target = call.tensor(0), call.tensor(1)
    rows = target.numel if target and target.item == 8 else (x.numel // max(1, x.shape[1]) if len(x.shape) > 1 else 1)
    flops = SOFTMAX_FLOPS * x.numel + NLL_FLOPS_PER_ROW * rows
    out = [list(target.shape)] if int(call.value("reduction", 3, 1)) == 0 and target else [[]]
    return _Rule(flops, [_Arg(out, x.item)],
                 f"log_softmax ({SOFTMAX_FLOPS:g} per element) + nll ({NLL_FLOPS_PER_ROW:g} per target)")


# FLOPs per element of the losses that work element by element, forward and backward alike.
_POINTWISE_LOSS_FLOPS = {"mse_loss": MSE_FLOPS, "binary_cross_entropy_with_logits": BCE_WITH_LOGITS_FLOPS,
                         "binary_cross_entropy": BCE_FLOPS, "smooth_l1_loss": SMOOTH_L1_FLOPS,
                         "huber_loss": SMOOTH_L1_FLOPS}
_POINTWISE_LOSS_OPS = tuple(op for base in _POINTWISE_LOSS_FLOPS for op in (base, f"{base}_backward"))


def _pointwise_loss(call: _Call) -> _Rule:
    """mse, (logit) binary cross-entropy, smooth_l1 and huber: per element, reduced to a scalar unless
    reduction is none; the backward gives the input's gradient."""
    backward = call.op.endswith("_backward")
    x = call.tensor(1 if backward else 0)
    per = _POINTWISE_LOSS_FLOPS[call.op.removesuffix("_backward")]
    if backward:
        out = [x.shape]
    else:
        out = [x.shape] if int(call.value("reduction", None, 1)) == 0 else [[]]
    return _Rule(per * x.numel, [_Arg(out, x.item)], f"{per:g} FLOP per element")


def _embedding(call: _Call) -> _Rule:
    weight, indices = call.tensor(0), call.tensor(1)
    out = list(indices.shape) + [weight.shape[-1]]
    read = indices.nbytes + _numel(out) * weight.item
    return _Rule(0.0, [_Arg([out], weight.item)], "0 FLOPs (gather)", read_bytes=read,
                 bytes_note="indices and the gathered rows read once, output written once")


def _embedding_backward(call: _Call) -> _Rule:
    grad = call.tensor(0)
    rows = int(call.value("num_weights", 2, 0))
    out = [rows, grad.shape[-1]]
    return _Rule(float(grad.numel), [_Arg([out], grad.item)], "1 FLOP (an accumulate) per grad_output element")


# Pooling and resampling --------------------------------------------------------


def _pool_out_shape(x: list[int], kernel: list[int], stride: list[int], padding: list[int], dilation: list[int],
                    ceil_mode: bool) -> list[int]:
    n = len(kernel)
    out = list(x[:len(x) - n])
    for i in range(n):
        size = x[len(x) - n + i]
        span = size + 2 * padding[i] - dilation[i] * (kernel[i] - 1) - 1
        o = (-(-span // stride[i]) if ceil_mode else span // stride[i]) + 1
        if ceil_mode and (o - 1) * stride[i] >= size + padding[i]:
            o -= 1  # the last window must start inside the input or its left padding
        out.append(o)
    return out


def _pool_geometry(call: _Call, k_pos: int, dims: int) -> tuple[list[int], list[int], list[int], list[int], bool]:
    kernel = _pair(call.value("kernel_size", k_pos), dims, 1)
    stride = call.value("stride", k_pos + 1)
    stride = kernel if not stride else _pair(stride, dims, 1)
    padding = _pair(call.value("padding", k_pos + 2), dims, 0)
    avg = "avg" in call.op
    dilation = [1] * dims if avg else _pair(call.value("dilation", k_pos + 3), dims, 1)
    ceil_mode = bool(call.value("ceil_mode", k_pos + (3 if avg else 4), False))
    return kernel, stride, padding, dilation, ceil_mode


def _pool_dims(op: str) -> int:
    return 1 if "1d" in op else 3 if "3d" in op else 2


def _pool(call: _Call) -> _Rule:
    dims = _pool_dims(call.op)
    x = call.shape(0)
    kernel, stride, padding, dilation, ceil_mode = _pool_geometry(call, 1, dims)
    out = _pool_out_shape(x, kernel, stride, padding, dilation, ceil_mode)
    window = _numel(kernel)
    item = call.tensor(0).item
    outputs = [_Arg([out], item)] + ([_Arg([out], _INDEX)] if "with_indices" in call.op else [])
    return _Rule(window * _numel(out), outputs, f"1 FLOP per window element ({window}) per output element")


def _pool_backward(call: _Call) -> _Rule:
    grad, x = call.tensor(0), call.shape(1)
    if "max" in call.op:  # each grad_output element lands on its argmax
        return _Rule(float(grad.numel), [_Arg([x], grad.item)], "1 FLOP per grad_output element", not_read={1},
                     bytes_note="grad_output and indices read once (the input only for its shape); "
                                "grad_input written once")
    dims = _pool_dims(call.op)
    kernel, *_ = _pool_geometry(call, 2, dims)
    window = _numel(kernel)
    return _Rule(window * grad.numel, [_Arg([x], grad.item)],
                 f"1 FLOP per window element ({window}) per grad_output element", not_read={1},
                 bytes_note="grad_output read once (the input only for its shape); grad_input written once")


def _adaptive_pool(call: _Call) -> _Rule:
    x = call.shape(0)
    size = list(call.value("output_size", 1, [1]))
    out = x[:len(x) - len(size)] + [int(s) for s in size]
    item = call.tensor(0).item
    outputs = [_Arg([out], item)] + ([_Arg([out], _INDEX)] if "max" in call.op else [])
    return _Rule(float(_numel(x)), outputs, "1 FLOP per input element (windows tile the input)")


def _adaptive_pool_backward(call: _Call) -> _Rule:
    grad, x = call.tensor(0), call.shape(1)
    return _Rule(float(_numel(x)), [_Arg([x], grad.item)], "1 FLOP per grad_input element", not_read={1},
                 bytes_note="grad_output read once (the input only for its shape); grad_input written once")


def _upsample(call: _Call) -> _Rule:
    backward = call.op.endswith("_backward")
    bilinear = "linear" in call.op or "bicubic" in call.op
    per = 8.0 if bilinear else 0.0  # bilinear: 4 taps, one FMA each
    grad = call.tensor(0)
    if backward:
        size = list(call.value("input_size", 2, []))
        return _Rule((per or 1.0) * grad.numel, [_Arg([size], grad.item)],
                     f"{per or 1.0:g} FLOP per grad_output element (accumulated into grad_input)")
    x = call.shape(0)
    size = list(call.value("output_size", 1, []) or [])
    if not size:  # scale factors instead of a size
        scales = list(call.value("scale_factors", 2, []) or [])
        size = [int(math.floor(d * s)) for d, s in zip(x[2:], scales)]
    out = x[:2] + [int(s) for s in size]
    return _Rule(per * _numel(out), [_Arg([out], grad.item)], f"{per:g} FLOP per output element")


# Optimizers and tensor lists -----------------------------------------------------


def _foreach(call: _Call) -> _Rule:
    inplace = call.op.endswith("_")
    name = call.op[len("_foreach_"):].rstrip("_")
    first = call.tensor(0)
    if first is None:
        raise ValueError("no tensor list")
    shapes, item = first.shapes, first.item
    if name in ("zero", "fill"):
        return _Rule(0.0, [_Arg(shapes, item, is_list=True)], "0 FLOPs (memset)",
                     not_read={i for i, _ in call.tensors()}, bytes_note="outputs written once, nothing read")
    if name == "copy":
        return _Rule(0.0, [_Arg(shapes, item, is_list=True)], "0 FLOPs (copy)", not_read={0},
                     bytes_note="sources read once, destinations written once")
    if name in REDUCTION_FLOPS:
        per = REDUCTION_FLOPS[name]
        return _Rule(per * first.numel, [_Arg([[]] * len(shapes), _STATS, is_list=True)],
                     f"{per:g} FLOP per element of each tensor")
    per = ELEMENTWISE_FLOPS.get(name)
    if per is None:
        raise KeyError(f"no per-element cost for {name}")
    if name in ("add", "sub") and call.value("alpha", None, 1) not in (None, 1, 1.0):
        per += 1.0
    where = "in place, " if inplace else ""
    return _Rule(per * first.numel, [_Arg(shapes, item, is_list=True)],
                 f"{where}{per:g} FLOP per element of each tensor")


def _fused_adam(call: _Call) -> _Rule:
    params = call.tensor(0)
    decoupled = call.op == "_fused_adamw_"
    amsgrad = bool(call.value("amsgrad", 11, False))
    per = ADAMW_FLOPS if decoupled else ADAM_FLOPS
    parts = ["AdamW" if decoupled else "Adam", f"{per:g}"]
    if not decoupled and float(call.value("weight_decay", 9, 0.0) or 0.0):
        per += ADAM_L2_FLOPS
        parts.append(f"+ {ADAM_L2_FLOPS:g} weight decay")
    if amsgrad:
        per += AMSGRAD_FLOPS
        parts.append(f"+ {AMSGRAD_FLOPS:g} amsgrad")
    # Updated in place: parameters, both moments, and the running max with amsgrad.
    outputs = [_Arg(a.shapes, a.item, is_list=True) for i in (0, 2, 3, 4) if (a := call.tensor(i)) is not None]
    return _Rule(per * (params.numel if params else 0), outputs,
                 f"{parts[0]}: {' '.join(parts[1:])} FLOP per parameter element",
                 bytes_note="parameters, gradients, moments and steps read once; parameters and moments written once")


def _fused_sgd(call: _Call) -> _Rule:
    params, buffers = call.tensor(0), call.tensor(2)
    momentum = call.value("momentum", 4, None)
    has_momentum = float(momentum) != 0.0 if momentum is not None else bool(buffers and buffers.shapes)
    per, parts = SGD_FLOPS, [f"{SGD_FLOPS:g}"]
    if float(call.value("weight_decay", 3, 0.0) or 0.0):
        per += SGD_WEIGHT_DECAY_FLOPS
        parts.append(f"+ {SGD_WEIGHT_DECAY_FLOPS:g} weight decay")
    if has_momentum:
        per += SGD_MOMENTUM_FLOPS
        parts.append(f"+ {SGD_MOMENTUM_FLOPS:g} momentum")
        if call.value("nesterov", 7, False):
            per += SGD_NESTEROV_FLOPS
            parts.append(f"+ {SGD_NESTEROV_FLOPS:g} nesterov")
    outputs = [_Arg(a.shapes, a.item, is_list=True) for i in (0, 2) if (a := call.tensor(i)) is not None]
    return _Rule(per * (params.numel if params else 0), outputs, f"SGD: {' '.join(parts)} FLOP per parameter element")


def _unscale(call: _Call) -> _Rule:
    grads = call.tensor(0)
    return _Rule(UNSCALE_FLOPS * (grads.numel if grads else 0),
                 [_Arg(grads.shapes, grads.item, is_list=True)] if grads else [],
                 f"{UNSCALE_FLOPS:g} FLOP per gradient element (unscale, finiteness test)")


# Recurrent nets, embedding bags, more losses, indexing and the AMP scaler -------------

RNN_GATE_FLOPS = 6.0  # per gate element and position: two bias adds, the activation (sigmoid ~4), the combine
_RNN_GATES = {0: 1, 1: 1, 2: 4, 3: 3}  # cuDNN/oneDNN mode (RNN_RELU, RNN_TANH, LSTM, GRU) -> gates per hidden unit
_RNN_OP_GATES = {"lstm": 4, "gru": 3, "rnn_tanh": 1, "rnn_relu": 1}
# Argument positions by op: (input, weight list or first weight, hidden size source)
_RNN_LAYOUT = {
    "_cudnn_rnn": (0, (1,)), "_cudnn_rnn_backward": (0, (1,)),
    "lstm": (0, (2,)), "gru": (0, (2,)), "rnn_tanh": (0, (2,)), "rnn_relu": (0, (2,)),
    "mkldnn_rnn_layer": (0, (1, 2)), "mkldnn_rnn_layer_backward": (0, (1, 2)),
}


def _rnn_weights(call: _Call) -> list[list[int]]:
    """The 2-D weight matrices of a recurrent op ([gates x hidden, in] each), as recorded."""
    _, positions = _RNN_LAYOUT[call.op]
    mats: list[list[int]] = []
    for i in positions:
        arg = call.tensor(i)
        if arg is not None:
            mats += [list(s) for s in arg.shapes if len(s) == 2]
    return mats


def _rnn_hidden(call: _Call) -> int:
    h = call.value("hidden_size", None)
    if h:
        return int(h)
    hx = call.tensor(1)  # lstm/gru/rnn_*: hx (a tensor, or the (h, c) list)
    return int(hx.shapes[0][-1]) if hx is not None and hx.shapes and hx.shapes[0] else 0


def _rnn_weights_from_sizes(call: _Call, features: int) -> list[list[int]]:
    """The weight matrices from hidden size, layers, directions and mode, where the lists were not recorded."""
    hidden = _rnn_hidden(call)
    gates = _RNN_OP_GATES.get(call.op) or _RNN_GATES.get(int(call.value("mode", None, 2) or 2), 4)
    layers = 1 if call.op.startswith("mkldnn") else int(call.value("num_layers", None, 1) or 1)
    dirs = 1 if call.op.startswith("mkldnn") else (2 if call.value("bidirectional", None, False) else 1)
    if not hidden:
        raise ValueError("no hidden size")
    mats = []
    for layer in range(layers):
        inputs = features if layer == 0 else hidden * dirs
        mats += [[gates * hidden, inputs], [gates * hidden, hidden]] * dirs
    return mats


def _rnn(call: _Call) -> _Rule:
    """cuDNN/oneDNN/ATen RNN, LSTM and GRU, forward or backward, over all layers and directions: each
    (time step, sequence) position multiplies every weight matrix once (2 FLOPs per weight element),
    and its gates' elementwise math; backward does the GEMMs twice (data and weight gradients)."""
    backward = call.op.endswith("_backward")
    x = call.tensor(0)
    features = x.shape[-1] if x is not None and x.shape else 0
    positions = x.numel // features if features else 0  # time steps x batch (packed: total tokens)
    mats = _rnn_weights(call) or _rnn_weights_from_sizes(call, features)
    weight_elements = sum(_numel(m) for m in mats)
    gate_elements = sum(m[0] for m in mats) / 2  # input and hidden matrices share each layer's gates
    gemm = 2.0 * positions * weight_elements
    flops = (2 if backward else 1) * (gemm + RNN_GATE_FLOPS * positions * gate_elements)
    item = x.item if x is not None else 4
    hidden = _rnn_hidden(call) or (mats[1][1] if len(mats) > 1 else 0)  # w_hh is [gates x hidden, hidden]
    dirs = 2 if call.value("bidirectional", None, False) and not call.op.startswith("mkldnn") else 1
    if backward:
        outputs = [_Arg([list(x.shape)], item), _Arg([[weight_elements]], item)]  # grad_input, grad weights
        note = "2 x (2 FLOPs per weight element per position + gates), as data and weight gradients"
    else:
        out = list(x.shape[:-1]) + [hidden * dirs]
        outputs = [_Arg([out], item)]
        if bool(call.value("train", None, True)):
            outputs.append(_Arg([[int(positions * gate_elements)]], item))  # gate activations kept for backward
        note = (f"2 FLOPs per weight element per position + {RNN_GATE_FLOPS:g} per gate element "
                "(all layers and directions)")
    return _Rule(flops, outputs, note, bytes_note="inputs, weights and states read once; outputs (and the gate "
                 "activations kept for backward) written once")


def _embedding_bag(call: _Call) -> _Rule:
    weight, indices, offsets = call.tensor(0), call.tensor(1), call.tensor(2)
    bags = max(1, offsets.numel) if offsets is not None and offsets.shape else (indices.shape[0] if indices else 1)
    if indices is not None and len(indices.shape) == 2:
        bags = indices.shape[0]
    dim = weight.shape[-1]
    looked_up = indices.numel if indices else 0
    read = (indices.nbytes if indices else 0) + (offsets.nbytes if offsets is not None else 0) + \
        looked_up * dim * weight.item
    return _Rule(float(looked_up * dim), [_Arg([[bags, dim]], weight.item)], "1 FLOP (an accumulate) per gathered element",
                 read_bytes=read, bytes_note="indices, offsets and the gathered rows read once, output written once")


def _embedding_bag_backward(call: _Call) -> _Rule:
    grad, indices = call.tensor(0), call.tensor(1)
    rows = int(call.value("num_weights", None, 0) or 0)
    dim = grad.shape[-1]
    return _Rule(float((indices.numel if indices else 0) * dim), [_Arg([[rows, dim]], grad.item)],
                 "1 FLOP (an accumulate) per scattered element")


def _scatter_into(call: _Call) -> _Rule:
    """select_backward, slice_backward: a zero-filled gradient of the input's size with grad_output copied in."""
    grad = call.tensor(0)
    size = [int(d) for d in call.value("input_sizes", 1, [])] or grad.shape
    return _Rule(0.0, [_Arg([size], grad.item)], "0 FLOPs (zero fill and copy)",
                 bytes_note="grad_output read once; the input-sized gradient written once")


def _index(call: _Call) -> _Rule:
    """x[indices]: the gathered elements and the indices read, the result written."""
    x, idx = call.tensor(0), call.tensor(1)
    shapes = idx.shapes if idx is not None else []
    gathered = (_numel(shapes[0]) if shapes else 0) * _numel(x.shape[len(shapes):]) if x is not None else 0
    read = gathered * x.item + (idx.nbytes if idx is not None else 0)
    return _Rule(0.0, [_Arg([[gathered]], x.item)], "0 FLOPs (gather)", read_bytes=read,
                 bytes_note="indices and the gathered elements read once, output written once")


def _index_put(call: _Call) -> _Rule:
    """x[indices] = values (or += with accumulate): values and indices read, the addressed elements written."""
    values = call.tensor(2)
    n = values.numel if values is not None else 0
    accumulate = bool(call.value("accumulate", 3, False))
    item = call.tensor(0).item
    idx = call.tensor(1)
    read = (values.nbytes if values is not None else 0) + (idx.nbytes if idx is not None else 0) + (n * item if accumulate else 0)
    return _Rule(float(n) if accumulate else 0.0, [_Arg([[n]], item)], "1 FLOP per accumulated element",
                 read_bytes=read, bytes_note="values and indices (and, accumulating, the addressed elements) read "
                 "once; the addressed elements written once")


def _index_add(call: _Call) -> _Rule:
    """index_add_ / scatter_add_ / scatter_: the source's elements accumulated (or written) into self."""
    src = call.tensor(3) if call.op != "scatter" else None
    idx = call.tensor(2)
    n = src.numel if src is not None else (idx.numel if idx is not None else 0)
    item = call.tensor(0).item
    accumulate = call.op in ("index_add_", "scatter_add_", "index_add", "scatter_add")
    read = (src.nbytes if src is not None else 0) + (idx.nbytes if idx is not None else 0) + (n * item if accumulate else 0)
    return _Rule(float(n) if accumulate else 0.0, [_Arg([[n]], item)], "1 FLOP per accumulated element",
                 read_bytes=read, bytes_note="source and index (and the addressed elements) read once; the addressed "
                 "elements written once")


def _sort(call: _Call) -> _Rule:
    x = call.tensor(0)
    dim = int(call.value("dim", 1, -1))
    n = x.shape[dim % len(x.shape)] if x.shape else 1
    per = max(1.0, math.log2(max(n, 2)))
    return _Rule(per * x.numel, [_Arg([x.shape], x.item), _Arg([x.shape], _INDEX)],
                 "log2(n) compares per element (a comparison sort)")


def _arange(call: _Call) -> _Rule:
    end = call.value("end", 0, None)
    positional = [v for v in call.positional if isinstance(v, (int, float)) and not isinstance(v, bool)]
    start, stop, step = (0, end, 1) if call.value("start", None) is None else \
        (call.value("start"), call.value("end"), call.value("step", None, 1))
    if stop is None and positional:
        stop = positional[0]
    n = max(0, math.ceil((float(stop or 0) - float(start or 0)) / float(step or 1)))
    item = _dtype_item(call.value("dtype", None), 8)
    return _Rule(float(n), [_Arg([[n]], item)], "1 FLOP per element (start + i x step)",
                 bytes_note="output written once, nothing read")


def _amp_update_scale(call: _Call) -> _Rule:
    return _Rule(4.0, [_Arg([[]], 4), _Arg([[]], 4)], "a few FLOPs on the scale and its growth tracker")


def _native_mha(call: _Call) -> _Rule:
    """nn.MultiheadAttention's fused path: QKV projection, attention, output projection."""
    q, k = call.shape(0), call.shape(1)
    embed = int(call.value("embed_dim", 3, q[-1]))
    heads = int(call.value("num_head", 4, 1)) or 1
    tokens, keys = _numel(q[:-1]), _numel(k[:-1])
    batch = q[0] if len(q) == 3 else 1
    seq_q, seq_k = tokens // max(1, batch), keys // max(1, batch)
    proj = 2 * tokens * embed * embed + 2 * 2 * keys * embed * embed + 2 * tokens * embed * embed
    attention = 4 * batch * heads * seq_q * seq_k * (embed // heads) + SOFTMAX_FLOPS * batch * heads * seq_q * seq_k
    return _Rule(float(proj + attention), [_Arg([q], call.tensor(0).item)],
                 "QKV and output projections (2 per weight element per token) + 2 attention GEMMs + softmax")


def _transform_qkv(call: _Call) -> _Rule:
    qkv = call.tensor(0)
    return _Rule(2.0 * qkv.numel, [_Arg([qkv.shape], qkv.item)], "2 FLOPs per element (bias add, scale)")


_HANDLERS: dict[str, Callable[[_Call], _Rule]] = {
    "mm": _mm, "addmm": _addmm, "_addmm_activation": _addmm, "bmm": _bmm, "baddbmm": _baddbmm,
    "_scaled_mm": _scaled_mm, "matmul": _matmul, "linear": _linear,
    **dict.fromkeys(("convolution", "_convolution", "conv1d", "conv2d", "conv3d", "cudnn_convolution",
                     "cudnn_convolution_transpose", "mkldnn_convolution", "_slow_conv2d_forward",
                     "convolution_overrideable", "miopen_convolution"), _convolution),
    "convolution_backward": _convolution_backward, "convolution_backward_overrideable": _convolution_backward,
    **dict.fromkeys(("scaled_dot_product_attention", "_scaled_dot_product_flash_attention",
                     "_scaled_dot_product_efficient_attention", "_scaled_dot_product_cudnn_attention",
                     "_scaled_dot_product_flash_attention_backward",
                     "_scaled_dot_product_efficient_attention_backward",
                     "_scaled_dot_product_cudnn_attention_backward", "_scaled_dot_product_flash_attention_for_cpu",
                     "_scaled_dot_product_flash_attention_for_cpu_backward", "_cudnn_attention_forward",
                     "_cudnn_attention_backward"), _sdpa),
    **dict.fromkeys(("_flash_attention_forward", "_flash_attention_backward", "_efficient_attention_forward",
                     "_efficient_attention_backward"), _flash_efficient),
    **dict.fromkeys(("native_batch_norm", "_native_batch_norm_legit", "_native_batch_norm_legit_no_training",
                     "cudnn_batch_norm", "miopen_batch_norm", "_batch_norm_with_update", "_batch_norm_no_update",
                     "batch_norm"), _batch_norm),
    **dict.fromkeys(("native_batch_norm_backward", "cudnn_batch_norm_backward", "batch_norm_backward",
                     "miopen_batch_norm_backward"), _batch_norm_backward),
    **dict.fromkeys(("native_layer_norm", "layer_norm", "_fused_rms_norm", "rms_norm"), _layer_norm),
    "native_layer_norm_backward": _layer_norm_backward, "_fused_rms_norm_backward": _layer_norm_backward,
    "native_group_norm": _group_norm, "group_norm": _group_norm, "native_group_norm_backward": _group_norm_backward,
    **dict.fromkeys(("softmax", "_softmax", "log_softmax", "_log_softmax"), _softmax),
    **dict.fromkeys(("_softmax_backward_data", "_log_softmax_backward_data"), _softmax_backward),
    **dict.fromkeys(("nll_loss_forward", "nll_loss2d_forward", "nll_loss", "nll_loss_nd", "nll_loss2d"), _nll_loss),
    **dict.fromkeys(("nll_loss_backward", "nll_loss2d_backward"), _nll_loss_backward),
    "cross_entropy_loss": _cross_entropy,
    **dict.fromkeys(_POINTWISE_LOSS_OPS, _pointwise_loss),
    "embedding": _embedding, "embedding_dense_backward": _embedding_backward,
    **dict.fromkeys(("max_pool1d", "max_pool2d", "max_pool3d", "max_pool2d_with_indices", "max_pool3d_with_indices",
                     "avg_pool1d", "avg_pool2d", "avg_pool3d"), _pool),
    **dict.fromkeys(("max_pool2d_with_indices_backward", "max_pool3d_with_indices_backward", "avg_pool2d_backward",
                     "avg_pool3d_backward"), _pool_backward),
    **dict.fromkeys(("_adaptive_avg_pool2d", "_adaptive_avg_pool3d", "adaptive_avg_pool2d", "adaptive_avg_pool1d",
                     "adaptive_max_pool2d"), _adaptive_pool),
    **dict.fromkeys(("_adaptive_avg_pool2d_backward", "_adaptive_avg_pool3d_backward",
                     "adaptive_max_pool2d_backward"), _adaptive_pool_backward),
    **dict.fromkeys(("upsample_nearest2d", "upsample_nearest3d", "upsample_bilinear2d", "_upsample_nearest_exact2d",
                     "upsample_nearest2d_backward", "upsample_bilinear2d_backward",
                     "_upsample_nearest_exact2d_backward"), _upsample),
    **dict.fromkeys(("fill_", "zero_", "zeros", "ones", "full", "zeros_like", "ones_like", "full_like", "new_zeros",
                     "new_ones", "new_full"), _fill),
    **dict.fromkeys(("copy_", "clone", "contiguous", "_to_copy", "to", "_copy_from", "_copy_from_and_resize",
                     "_reshape_copy", "item", "_local_scalar_dense"), _copy),
    "cat": _cat, "stack": _cat, "constant_pad_nd": _constant_pad, "index_select": _index_select, "gather": _gather,
    "native_dropout": _elementwise,
    "_fused_adam_": _fused_adam, "_fused_adamw_": _fused_adam, "_fused_sgd_": _fused_sgd,
    "_amp_foreach_non_finite_check_and_unscale_": _unscale, "_amp_update_scale_": _amp_update_scale,
    **dict.fromkeys(_RNN_LAYOUT, _rnn),
    **dict.fromkeys(("embedding_bag", "_embedding_bag", "_embedding_bag_forward_only"), _embedding_bag),
    **dict.fromkeys(("_embedding_bag_backward", "_embedding_bag_dense_backward"), _embedding_bag_backward),
    **dict.fromkeys(("select_backward", "slice_backward"), _scatter_into),
    "index": _index, **dict.fromkeys(("index_put_", "_index_put_impl_", "index_put"), _index_put),
    **dict.fromkeys(("index_add_", "index_add", "scatter_add_", "scatter_add", "scatter", "scatter_"), _index_add),
    "sort": _sort, "arange": _arange,
    "_native_multi_head_attention": _native_mha, "_transform_bias_rescale_qkv": _transform_qkv,
}

_MATH_HANDLERS = {_mm, _addmm, _bmm, _baddbmm, _scaled_mm, _matmul, _linear, _convolution, _convolution_backward,
                  _sdpa, _flash_efficient, _rnn, _native_mha}
