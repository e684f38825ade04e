"""Patterns over a Graph's ops that more than one rewrite looks for. Paddle-free.

`producer` maps a value id to the Op that makes it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from . import Op

SWAP_LAST_TWO = [0, 1, 3, 2]  # the transpose perm of k^T in q @ k^T, as Paddle code writes it


def unrepeated_heads(value: int | None, producer: Mapping[Any, Op]) -> int | None:
    """The [B, KV, S, D] tensor that `value` repeats as reshape(expand(unsqueeze(t, [2]), [B, KV, G, S, D]),
    [B, KV * G, S, D]), or None when it is not that. The shape operands are constants, or, with a batch
    fixed only at call time, stacks of the tensor's own dimensions (slices of its shape) and constants."""
    reshape = producer.get(value)
    if reshape is None or reshape.name != "pd_op.reshape":
        return None
    expand = producer.get(reshape.inputs[0])
    if expand is None or expand.name != "pd_op.expand":
        return None
    unsqueeze = producer.get(expand.inputs[0])
    if unsqueeze is None or unsqueeze.name != "pd_op.unsqueeze":
        return None
    t = unsqueeze.inputs[0]
    axes, big, merged = (
        _constant(unsqueeze.inputs[1], producer),
        _dims(expand.inputs[1], producer),
        _dims(reshape.inputs[1], producer),
    )
    if axes not in ([2], [-3]) or big is None or merged is None or len(big) != 5 or len(merged) != 4:
        return None
    group, slots = big[2], big[3:]
    # NOTE: the slots and head size may be t's own symbolic dimensions (a decode step captured for every
    # bucket of a paged cache); the group is always a constant
    fixed_or_own = all(isinstance(d, int) and d >= 1 or _is_dim_of(d, t, i + 2, producer) for i, d in enumerate(slots))
    if not (isinstance(group, int) and group >= 1) or not fixed_or_own or merged[2:] != slots:
        return None
    # NOTE: the batch and heads must be t's own (an expand may also broadcast a dimension of 1), and the
    # reshape must keep the batch (-1 there would let it fold the group into the batch instead); with
    # those, the element count leaves KV * G as the only merged heads
    if not all(_is_dim_of(big[i], t, i, producer) for i in (0, 1)) or merged[0] not in (big[0], 0) or merged[0] == -1:
        return None
    if isinstance(merged[1], int) and isinstance(big[1], int) and merged[1] not in (big[1] * group, -1):
        return None
    return t


def slot_parts(value: int | None, producer: Mapping[Any, Op]) -> tuple[int | None, ...]:
    """The parts `value` concatenates along its slots axis (the keys' or values' [.., S, D] axis -2, as a KV
    cache appends a step's new ones to what it holds: concat([cache, new], axis=-2)), or (value,) when it is
    not such a concatenation."""
    concat = producer.get(value)
    if concat is None or concat.name != "pd_op.concat" or len(concat.inputs) != 2:
        return (value,)
    combine, axis = producer.get(concat.inputs[0]), producer.get(concat.inputs[1])
    if combine is None or combine.name != "builtin.combine" or axis is None or axis.name != "pd_op.full":
        return (value,)
    # NOTE: 2 is the slots axis only of a 4-D [B, H, S, D]: the grouped products take 4-D operands and
    # refuse others when lowered
    if axis.attrs.get("value") not in (-2, 2) or len(combine.inputs) < 2:
        return (value,)
    return tuple(combine.inputs)


def _dims(value: int | None, producer: Mapping[Any, Op]) -> list | None:
    """A shape operand's entries: an int where it is a constant, else the id of the value it stacks."""
    fixed = _constant(value, producer)
    if fixed is not None:
        return fixed
    stack = producer.get(value)
    combine = producer.get(stack.inputs[0]) if stack is not None and stack.name == "pd_op.stack" else None
    if combine is None or combine.name != "builtin.combine":
        return None
    return [_scalar(v, producer) for v in combine.inputs]


def _scalar(value: int | None, producer: Mapping[Any, Op]) -> int | str:
    op = producer.get(value)
    if op is not None and op.name == "pd_op.full" and float(op.attrs.get("value", 0.5)).is_integer():
        return int(op.attrs["value"])
    return f"%{value}"  # NOTE: a str, so no value id passes for a constant


def _is_dim_of(entry: int | str, t: int | None, axis: int, producer: Mapping[Any, Op]) -> bool:
    """Whether a shape entry is t's size along `axis`: a positive constant (taken as written, as a fixed
    shape is: where it broadcasts t's 1, the grouped products broadcast it too), -1 (keep the size), or
    slice(shape(t), [axis], [axis + 1])."""
    if isinstance(entry, int):
        return entry >= 1 or entry == -1
    op = producer.get(int(entry[1:]))
    if op is None or op.name != "pd_op.slice" or list(op.attrs.get("axes", ())) != [0]:
        return False
    shape = producer.get(op.inputs[0])
    bounds = [_constant(v, producer) for v in op.inputs[1:3]]
    return (
        shape is not None
        and shape.name in ("pd_op.shape", "pd_op.shape64")
        and shape.inputs[0] == t
        and bounds == [[axis], [axis + 1]]
    )


def _constant(value: int | None, producer: Mapping[Any, Op]) -> list[int] | None:
    op = producer.get(value)
    if op is None or op.name != "pd_op.full_int_array":
        return None
    return [int(v) for v in op.attrs.get("value", ())]
