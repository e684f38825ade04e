"""Patterns over a Graph's ops that more than one rewrite looks for. Paddle-free.

`producer` maps a value id to the Op that makes it."""
from __future__ import annotations

SWAP_LAST_TWO = [0, 1, 3, 2]        # the transpose perm of k^T in q @ k^T, as Paddle code writes it


def unrepeated_heads(value: int, producer) -> int | None:
    """The [B, KV, S, D] tensor that `value` repeats as reshape(expand(unsqueeze(t, [2]), [B, KV, G, S, D]),
    [B, KV * G, S, D]), or None when it is not that (shapes read from the constant shape operands)."""
    reshape = producer.get(value)
    if reshape is None or reshape.name != "pd_op.reshape":
        return None
    expand = producer.get(reshape.inputs[0])
    if expand is None or expand.name != "pd_op.expand":
        return None
    unsqueeze = producer.get(expand.inputs[0])
    if unsqueeze is None or unsqueeze.name != "pd_op.unsqueeze":
        return None
    axes, big, merged = (_constant(unsqueeze.inputs[1], producer), _constant(expand.inputs[1], producer),
                         _constant(reshape.inputs[1], producer))
    if axes not in ([2], [-3]) or big is None or merged is None or len(big) != 5 or len(merged) != 4:
        return None
    if merged[1] != big[1] * big[2] or merged[2:] != big[3:] or min(big[1:]) < 1:
        return None
    return unsqueeze.inputs[0]


def slot_parts(value: int, producer) -> tuple[int, ...]:
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


def _constant(value: int, producer) -> list[int] | None:
    op = producer.get(value)
    if op is None or op.name != "pd_op.full_int_array":
        return None
    return [int(v) for v in op.attrs.get("value", ())]
