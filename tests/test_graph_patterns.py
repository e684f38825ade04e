"""graph.patterns.unrepeated_heads on hand-built graphs: it finds the grouped-query repeat, with constant
shapes or with the batch read from the keys' own shape, and refuses every near miss, since a rewrite that
took a different reshape for the repeat would compute other numbers."""

import itertools

import pytest

from paddle_xla.graph import Op
from paddle_xla.graph.patterns import unrepeated_heads

KEYS = 1  # the [B, 2, 8, 16] keys before the repeat


class _Program:
    """Ops appended one by one; each returns its output's value id."""

    def __init__(self):
        self.ids = itertools.count(KEYS + 1)
        self.producer = {}

    def op(self, name, *inputs, **attrs):
        out = next(self.ids)
        self.producer[out] = Op(name, tuple(inputs), (out,), attrs)
        return out

    def ints(self, *values):
        return self.op("pd_op.full_int_array", value=list(values))

    def dim(self, of, axis):
        return self.op("pd_op.slice", self.op("pd_op.shape64", of), self.ints(axis), self.ints(axis + 1), axes=[0])

    def stack(self, *entries):
        """A shape stacked from its entries: a float is a constant (pd_op.full), an int a value id."""
        parts = [self.op("pd_op.full", value=e) if isinstance(e, float) else e for e in entries]
        return self.op("pd_op.stack", self.op("builtin.combine", *parts), axis=0)

    def repeat(self, big, merged, axis=2):
        wide = self.op("pd_op.expand", self.op("pd_op.unsqueeze", KEYS, self.ints(axis)), big)
        return self.op("pd_op.reshape", wide, merged)


def test_a_repeat_with_constant_shapes_is_found():
    p = _Program()
    assert unrepeated_heads(p.repeat(p.ints(4, 2, 2, 8, 16), p.ints(4, 4, 8, 16)), p.producer) == KEYS


def test_a_repeat_whose_batch_is_read_from_the_keys_is_found():
    p = _Program()
    batch, heads = p.dim(KEYS, 0), p.dim(KEYS, 1)
    merged_heads = p.op("pd_op.scale", heads, p.op("pd_op.full", value=2.0))
    assert (
        unrepeated_heads(
            p.repeat(p.stack(batch, heads, 2.0, 8.0, 16.0), p.stack(batch, merged_heads, 8.0, 16.0)), p.producer
        )
        == KEYS
    )


@pytest.mark.parametrize(
    "miss",
    [
        "another tensor's batch",
        "another batch after",
        "unsqueeze at 1",
        "slots moved",
        "heads not merged",
        "group unknown",
        "group into the batch",
    ],
)
def test_a_near_miss_is_not_taken_for_the_repeat(miss):
    p = _Program()
    other = p.op("pd_op.add", KEYS, KEYS)
    batch, heads = p.dim(KEYS, 0), p.dim(KEYS, 1)
    big = dict(batch=batch, heads=heads, group=2.0, slots=8.0)
    merged = dict(batch=batch, heads=-1.0, slots=8.0)
    axis = 2
    if miss == "another tensor's batch":
        big["batch"] = merged["batch"] = p.dim(other, 0)
    elif miss == "another batch after":
        merged["batch"] = p.dim(KEYS, 0)  # NOTE: the same size, but not provably
    elif miss == "unsqueeze at 1":
        axis = 1
    elif miss == "slots moved":
        merged["slots"] = 4.0
    elif miss == "heads not merged":
        big["heads"], merged["heads"] = 2.0, 2.0
    elif miss == "group into the batch":  # NOTE: [B * G, KV, S, D], not [B, KV * G, S, D]
        big["batch"], big["heads"], merged["batch"], merged["heads"] = -1.0, -1.0, -1.0, heads
    else:
        big["group"] = p.dim(other, 1)
    value = p.repeat(
        p.stack(big["batch"], big["heads"], big["group"], big["slots"], 16.0),
        p.stack(merged["batch"], merged["heads"], merged["slots"], 16.0),
        axis=axis,
    )
    assert unrepeated_heads(value, p.producer) is None
