"""Every keyword attribute of every lowering takes a non-default value in at least one op case.

A lowering's keyword parameters with a default are the attributes it reads. If no case ever sets one
to something else, the lowering could ignore it and every case would still pass (an ignored
`keepdim` of amax once did). The cases' Graphs are captured (not run) and each op's attributes are
compared with the defaults of the function that lowers it; the names one function lowers (an op and
its in-place twin) share their cases. The exceptions below are each given a reason.
"""

from __future__ import annotations

import inspect
from collections import defaultdict

import numpy as np
import pytest

from paddle_xla import x64
from paddle_xla.ops.registry import REGISTRY

from . import harness
from .test_ops import CASES, TABLES

# Ops whose tests live outside the op tables (random ops: statistics in test_random.py; detection ops
# with variable-size outputs: test_detection.py; fused ops without a CPU kernel in Paddle:
# test_fused.py; control flow: tests/test_control_flow.py). Their own tests choose the attributes.
OUTSIDE_TABLES = {op for t in TABLES for op in getattr(t, "COVERED", [])}

EXCEPTIONS = {
    **{
        ("paddle_xla.sparse_moe", attr): "ERNIE 4.5 MoE's router loss in training, set by its capture: "
        "tests/ops/test_moe_op.py's router-loss tests and tests/test_moe_models.py's ERNIE training tests"
        for attr in ("router_loss_grad", "aux_loss_coef", "z_loss_coef", "orthogonal_loss_coef")
    },
    ("pd_op.dropout", "seed"): "picks Paddle's own generator; paddle_xla draws from the step's key",
    ("pd_op.dropout", "fix_seed"): "as seed",
    ("pd_op.rnn", "seed"): "as dropout's seed",
    ("pd_op.gumbel_softmax", "axis"): "a random op: its cases check properties along the last axis only",
    ("pd_op.deformable_conv", "im2col_step"): "only batches Paddle's own im2col; the result does not depend on it",
    ("pd_op.unpool", "data_format"): "Paddle's max_unpool2d accepts only NCHW",
    ("pd_op.unpool3d", "data_format"): "Paddle's max_unpool3d accepts only NCDHW",
    ("pd_op.nearest_interp", "out_d"): "the depth of a 3-D resize; a 1-D or 2-D resize always has -1",
    ("pd_op.bilinear_interp", "out_d"): "as nearest_interp's out_d",
    ("pd_op.bicubic_interp", "out_d"): "as nearest_interp's out_d",
    ("pd_op.linear_interp", "out_d"): "as nearest_interp's out_d",
    ("pd_op.linear_interp", "out_h"): "the height of a 2-D resize; a 1-D resize always has -1",
    ("paddle_xla.row_mean", "keepdim"): "paddle_xla's own pd_op.mean in generation programs (pd_op.mean's cases "
    "set keepdim; tests/generation/test_fixed_order.py sets it on row_mean)",
}


def _default_kwargs(fn):
    return {
        p.name: p.default
        for p in inspect.signature(fn).parameters.values()
        if p.kind == p.KEYWORD_ONLY and p.default is not inspect.Parameter.empty
    }


def _differs(value, default) -> bool:
    # NOTE: Paddle stores float attributes in float32 (0.9 comes back as 0.8999999761581421) and lists
    # where a default is a tuple.
    if isinstance(value, (list, tuple)) and isinstance(default, (list, tuple)):
        return list(value) != list(default)
    if isinstance(value, float) and isinstance(default, (int, float)) and not isinstance(default, bool):
        return not np.isclose(value, default, rtol=1e-6, atol=0)
    return value != default


def _attributes_set_by_the_cases():
    """fn -> names of its attributes that some case sets to a non-default value."""
    set_by_cases = defaultdict(set)
    with x64.scope():
        for case in CASES:
            rng = np.random.default_rng(case.seed)
            graph = harness.capture_case(case, [a.make(rng) for a in case.args])
            for op in graph.ops():
                low = REGISTRY.get(op.name)
                if low is None or low.fn is None:
                    continue
                defaults = _default_kwargs(low.fn)
                set_by_cases[low.fn] |= {k for k, v in op.attrs.items() if k in defaults and _differs(v, defaults[k])}
    return set_by_cases


@pytest.mark.slow
def test_every_keyword_attribute_takes_a_non_default_value():
    set_by_cases = _attributes_set_by_the_cases()
    never = sorted(
        (name, attr)
        for name, low in REGISTRY.items()
        if low.fn is not None and name not in OUTSIDE_TABLES
        for attr in _default_kwargs(low.fn)
        if attr not in set_by_cases[low.fn] and (name, attr) not in EXCEPTIONS
    )
    assert not never, (
        f"attributes no op case sets to a non-default value (add a case, or an exception with its reason): {never}"
    )


def test_exceptions_name_real_attributes():
    # NOTE: a stale exception (an attribute renamed or removed) would otherwise excuse nothing, silently.
    stale = [
        (name, attr)
        for name, attr in EXCEPTIONS
        if name not in REGISTRY or attr not in _default_kwargs(REGISTRY[name].fn)
    ]
    assert not stale, f"exceptions for attributes no lowering has: {stale}"
