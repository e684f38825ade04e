"""Layers captured as one op each: layer-level lowerings, for layers whose forward a trace cannot follow.

PaddleFormers' mixture-of-experts blocks route tokens with data-dependent shapes: Qwen2-MoE's and
Qwen3-MoE's loop over experts gathers each expert's tokens with `paddle.where(mask)` and skips an expert
by a Python test of its token count; ERNIE 4.5's calls GPU-only kernels and sizes buffers on the host. A
static program has none of that. While paddle_xla captures, a registered Layer's forward is replaced (on the
instance, put back afterwards) by a stand-in that builds a few ops of the right output shapes; the reader
(pir_reader.py) then reads that run of ops as one Graph op named by the registry (`paddle_xla.sparse_moe`),
whose operands are the layer's input and the weights the registry lists and whose attributes are the
layer's config, and ops/moe.py lowers it to a dropless JAX MoE over those weights. What the registry leaves
to the layer's own code (`after`, e.g. a shared expert) is captured op by op. Nothing in the model is changed.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import paddle

from .. import ops  # noqa: F401  (registers every lowering, the layer ops' among them)
from ..errors import CaptureError
from ..ops.registry import REGISTRY as LOWERINGS


@dataclass(frozen=True)
class LayerCapture:
    """How one kind of Layer is captured as one op."""

    op: str  # the Graph op's name, lowered by ops/ (e.g. "paddle_xla.sparse_moe")
    weights: Callable[[Any], list]  # the layer's weights, in the order the lowering reads them
    attrs: Callable[[Any], dict]  # the config the lowering needs
    outputs: Callable[[Any, Any], list]  # (layer, input) -> static stand-ins of the op's outputs
    # (layer, input, the op's outputs) -> what forward returns: the part of the layer left to ordinary capture
    after: Callable[[Any, Any, list], Any]


@dataclass
class Span:
    """One registered layer's call, as its stand-in built it in the traced program."""

    op: str
    attrs: dict
    op_ids: list[int]  # the stand-in's ops, the last of which becomes the layer op
    inputs: list  # PIR values: the layer's input, then its weights
    outputs: list  # PIR values: the forward's outputs


REGISTRY: dict[str, LayerCapture] = {}
_LOCK = threading.RLock()
_SPANS: list[Span] = []


def register(*class_names: str):
    """Register a LayerCapture for the Layer classes of these names (PaddleFormers' own classes)."""

    def add(capture: LayerCapture) -> LayerCapture:
        for name in class_names:
            REGISTRY[name] = capture
        return capture

    return add


def _stand_in(layer, capture: LayerCapture):
    @paddle.jit.not_to_static
    def forward(hidden_states, *args, **kwargs):
        program = paddle.static.default_main_program()
        block = program.global_block()
        if args or kwargs:
            raise CaptureError(f"{type(layer).__name__} is captured as one op ({capture.op}) of its input alone")
        before = {op.id() for op in block.ops}
        # NOTE: inside to_static a Layer's weights are already the program's values (builtin.parameter)
        weights = list(capture.weights(layer))
        outputs = list(capture.outputs(layer, hidden_states))
        new = [op.id() for op in block.ops if op.id() not in before and op.name() != "builtin.parameter"]
        if not new:  # NOTE: the ops went into a sub-block: a loop or branch of the program
            raise CaptureError(
                f"{type(layer).__name__} is captured as one op ({capture.op}) only at the top level of a "
                "forward, not inside a loop or branch of the program"
            )
        _SPANS.append(Span(capture.op, capture.attrs(layer), new, [hidden_states, *weights], outputs))
        return capture.after(layer, hidden_states, outputs)

    return forward


def _eager(layer, capture: LayerCapture):
    """The layer run eagerly through its op's own lowering (NumPy in, JAX eagerly, Paddle tensors out): for the
    probes a generator makes by calling the model (its vocabulary, causality, cache class), where the layer's
    own forward would call kernels Paddle's CPU build lacks. No gradient flows through it."""

    def forward(hidden_states, *args, **kwargs):
        inputs = [np.asarray(t.numpy()) for t in (hidden_states, *capture.weights(layer))]
        outs = LOWERINGS[capture.op].fn(*inputs, **capture.attrs(layer))
        outputs = [paddle.to_tensor(np.asarray(o)) for o in outs]
        return capture.after(layer, hidden_states, outputs)

    return forward


@contextlib.contextmanager
def _replaced(root, make):
    with _LOCK:
        patched = []
        for layer in root.sublayers(include_self=True):
            capture = REGISTRY.get(type(layer).__name__)
            if capture is None:
                continue
            patched.append((layer, layer.__dict__.get("forward")))
            layer.__dict__["forward"] = make(layer, capture)
        try:
            yield
        finally:
            for layer, own in patched:
                if own is None:
                    layer.__dict__.pop("forward", None)
                else:
                    layer.__dict__["forward"] = own


@contextlib.contextmanager
def layer_ops(root):
    """Within the block, every registered sublayer of `root` builds its stand-in; yields the Spans built."""
    with _replaced(root, _stand_in):
        _SPANS.clear()
        yield _SPANS


def eager_layer_ops(root):
    """Within the block, every registered sublayer of `root` runs eagerly through its op's lowering."""
    return _replaced(root, _eager)
