"""One declaration per op: every property the lowering machinery reads about an op (its AMP class, its
channels-last class, whether it draws random keys and when not, a data-dependent refusal) is declared
where the op is registered, and the lists lowering/ keeps are queries on that registry."""

import pathlib
import re

import pytest

import paddle_xla.ops  # noqa: F401  (registers every lowering)
from paddle_xla.graph import Op
from paddle_xla.lowering import channels_last, half, interpreter, kernels, layouts
from paddle_xla.ops import data_dependent
from paddle_xla.ops.registry import (
    AMP_CLASSES,
    DEFAULT,
    LAYOUT_CLASSES,
    REGISTRY,
    UNLOWERED,
    Lowering,
    Unlowered,
    declare,
    declared,
    lowering,
    ops_where,
    properties,
)

LOWERING_DIR = pathlib.Path(interpreter.__file__).parent


def test_every_registered_op_declares_or_defaults_each_property():
    assert REGISTRY
    for name, entry in REGISTRY.items():
        assert isinstance(entry, Lowering) and entry.name == name
        assert entry.amp in AMP_CLASSES, name
        assert entry.layout in LAYOUT_CLASSES, name
        assert entry.kind in ("plain", "random", "control"), name
        assert entry.random is (entry.kind == "random"), name
        assert entry.draws_unless is None or (entry.random and isinstance(entry.draws_unless, str)), name
        assert entry.data_dependent is None, f"{name} is lowered, so it is refused by no declaration"
        assert isinstance(entry.inplace, bool), name
        if entry.inplace:
            assert name + "_" not in declared(), name


def test_ops_without_a_lowering_are_declared_as_such():
    for name, entry in UNLOWERED.items():
        assert isinstance(entry, Unlowered) and entry.name == name and entry.where.startswith("paddle_xla.ops.")
        assert name not in REGISTRY and interpreter.resolve(name) is None, name
        assert entry.amp in AMP_CLASSES and entry.layout is None and not entry.random
        # NOTE: each is there for a reason: refused on purpose, or named by Paddle's AMP lists.
        assert entry.data_dependent is not None or entry.amp != "gray", name


def test_the_lists_are_queries_on_the_registry():
    assert ops_where(amp="white") == half.WHITE
    assert ops_where(amp="black") == half.BLACK
    assert not half.WHITE & half.BLACK
    assert ops_where(layout="conv") == channels_last.CONV_OPS
    assert ops_where(layout="unary") == channels_last.ELEMENTWISE_UNARY
    assert ops_where(layout="binary") == channels_last.ELEMENTWISE_BINARY
    assert ops_where(layout="data_format") == channels_last.CHANNELS_ATTR
    assert layouts.CONV_OPS is channels_last.CONV_OPS and kernels.CONV_OPS is channels_last.CONV_OPS
    assert {
        n: e.data_dependent for n, e in declared().items() if e.data_dependent is not None
    } == data_dependent.DATA_DEPENDENT
    for name in (
        half.WHITE
        | half.BLACK
        | channels_last.CONV_OPS
        | channels_last.ELEMENTWISE_UNARY
        | channels_last.ELEMENTWISE_BINARY
        | channels_last.CHANNELS_ATTR
    ):
        assert properties(name) is not DEFAULT, name


def test_ops_named_in_the_lists_exist_in_the_registry():
    lists = [
        half.WHITE,
        half.BLACK,
        channels_last.CONV_OPS,
        channels_last.ELEMENTWISE_UNARY,
        channels_last.ELEMENTWISE_BINARY,
        channels_last.CHANNELS_ATTR,
        set(data_dependent.DATA_DEPENDENT),
    ]
    for names in lists:
        assert names
        for name in names:
            # NOTE: a lowering, an in-place twin that runs one (relu_ -> relu), or an op declared without one
            assert interpreter.resolve(name) is not None or name in UNLOWERED, name
    # NOTE: the ops that can run channels-last all have lowerings, and so do the white-list ops.
    for name in (
        channels_last.CONV_OPS
        | channels_last.ELEMENTWISE_UNARY
        | channels_last.ELEMENTWISE_BINARY
        | channels_last.CHANNELS_ATTR
        | half.WHITE
    ):
        assert interpreter.resolve(name) is not None, name
    # NOTE: the black-list ops with no lowering, kept in the list as Paddle's AMP names them.
    assert {n for n in half.BLACK if interpreter.resolve(n) is None} == {
        n for n, e in UNLOWERED.items() if e.amp == "black"
    }
    assert all(e.amp == "gray" for e in UNLOWERED.values() if e.data_dependent is not None)


def test_every_op_lowering_names_is_declared():
    # NOTE: kernels.RULES and the rest of lowering/ name a few ops in their conditions (matmul, gelu, pool2d);
    # a renamed or dropped op must not leave a rule that silently never applies.
    for path in sorted(LOWERING_DIR.glob("*.py")):
        for name in set(re.findall(r'"(pd_op\.\w+)"', path.read_text())):
            assert interpreter.resolve(name) is not None, f"{path.name} names {name}, which has no lowering"


def test_in_place_twins_share_properties_only_where_declared():
    assert properties("pd_op.relu_") is REGISTRY["pd_op.relu"]
    assert "pd_op.relu_" in channels_last.ELEMENTWISE_UNARY and "pd_op.add_" in channels_last.ELEMENTWISE_BINARY
    assert "pd_op.cross_entropy_with_softmax_" in half.BLACK
    # NOTE: a twin whose functional op does not declare inplace runs the lowering but keeps the defaults.
    assert not REGISTRY["pd_op.sigmoid"].inplace and properties("pd_op.sigmoid_") is DEFAULT
    assert "pd_op.exp_" not in half.BLACK and "pd_op.sigmoid_" not in channels_last.ELEMENTWISE_UNARY


def test_random_ops_draw_unless_their_declared_attribute_says_not():
    assert ops_where(draws_unless="is_test") == {"pd_op.dropout"}
    for name, entry in REGISTRY.items():
        op = Op(name=name, inputs=(), outputs=())
        assert interpreter._draws(op) is entry.random, name
        if entry.draws_unless is not None:
            assert not interpreter._draws(Op(name=name, inputs=(), outputs=(), attrs={entry.draws_unless: True}))
            assert interpreter._draws(Op(name=name, inputs=(), outputs=(), attrs={entry.draws_unless: False}))
    assert not interpreter._draws(Op(name="pd_op.not_an_op", inputs=(), outputs=()))


def test_refusals_come_from_the_declarations():
    for name, hint in data_dependent.DATA_DEPENDENT.items():
        assert name not in REGISTRY
        assert data_dependent.refusal(name).endswith(hint)
        assert data_dependent.refusal(name).startswith(interpreter.NO_LOWERING)
    assert data_dependent.refusal("pd_op.matmul") is None
    assert data_dependent.refusal("pd_op.not_an_op") is None


def test_declarations_are_checked():
    with pytest.raises(ValueError, match="amp"):
        lowering("pd_op.test_bad_amp", amp="pink")
    with pytest.raises(ValueError, match="layout"):
        lowering("pd_op.test_bad_layout", layout="nhwc")
    with pytest.raises(ValueError, match="draws_unless"):
        lowering("pd_op.test_bad_draws", draws_unless="is_test")
    with pytest.raises(RuntimeError, match="lowered twice"):
        lowering("pd_op.matmul")(lambda x: x)
    with pytest.raises(RuntimeError, match="without a lowering"):
        lowering("pd_op.nms")(lambda x: x)
    with pytest.raises(RuntimeError, match="own entry"):
        lowering("pd_op.assign_out", inplace=True)(lambda x: x)  # pd_op.assign_out_ is registered
    with pytest.raises(RuntimeError, match="lowered twice"):
        declare("pd_op.matmul", where="tests", amp="white")
    assert "pd_op.assign_out" not in REGISTRY and "pd_op.matmul" not in UNLOWERED
