"""A Layer that joins a user's network and loss into one forward, so one capture sees both.

to_static needs the forward's source and named arguments, so the wrapper's source is generated with
the user's input and label names, and compiled from memory."""

from __future__ import annotations

import hashlib
import linecache
import types

import paddle

_TEMPLATE = """import paddle


def _flat(out):
    # NOTE: a model's own output object (PaddleFormers' ModelOutput) lists its fields, loss first. A cache
    # object among them (use_cache=True, Qwen2's default) is for the next call's decoding, which a
    # training step never makes: it is left out (its tensors then feed nothing, and are not computed).
    out = out.to_tuple() if hasattr(out, "to_tuple") else out
    out = list(out) if isinstance(out, (list, tuple)) else [out]
    return [o for o in out if not _is_cache(o)]


def _is_cache(value):
    return type(value).__name__.endswith("Cache") and not isinstance(value, (paddle.Tensor, list, tuple))


class NetWithLoss(paddle.nn.Layer):
    def __init__(self, net, loss_fn):
        super().__init__()
        self.net = net
        self.loss_fn = loss_fn

    def forward(self, {args}):
        outs = _flat(self.net({call}))
        loss = self.loss_fn(*outs, {labels}) if self.loss_fn is not None else outs[0]
        # NOTE: a Python number among the outputs is a constant, not a fetch: PaddleFormers 1.2's Qwen MoE
        # models return aux_loss = 0 when they collect no router logits
        return [loss] + [o for o in outs if not isinstance(o, (int, float))]
"""


# NOTE: the source is kept in linecache under a name no file can have, and compiled from memory:
# nothing is written to or imported from disk, so nobody can plant code for us to run (a file at a
# predictable path in the shared temp folder could be).
SOURCE_PREFIX = "<paddle_xla net_with_loss "


def _module(inputs: list[str], labels: list[str], own_loss: bool, by_name: bool = False):
    # NOTE: without a loss_fn the model computes its own loss (model(input_ids, labels=labels)), so the
    # labels go to it by name; with one, the model sees the inputs alone, as in the user's loop. With
    # by_name the inputs go by name too (model(**batch), as PaddleFormers' Trainer calls it).
    given = [f"{n}={n}" for n in inputs] if by_name else inputs
    call = ", ".join(given + ([f"{n}={n}" for n in labels] if own_loss else []))
    src = _TEMPLATE.format(args=", ".join(inputs + labels), call=call, labels=", ".join(labels))
    digest = hashlib.sha256(src.encode()).hexdigest()[:16]
    filename = f"{SOURCE_PREFIX}{digest}>"
    # NOTE: mtime None: linecache.checkcache keeps entries with no file behind them.
    linecache.cache[filename] = (len(src), None, src.splitlines(True), filename)
    mod = types.ModuleType(f"paddle_xla_net_with_loss_{digest}")
    mod.__file__ = filename
    exec(compile(src, filename, "exec"), mod.__dict__)
    return mod


def net_with_loss(
    net: paddle.nn.Layer, loss_fn, input_names: list[str], label_names: list[str], by_name: bool = False
) -> paddle.nn.Layer:
    """forward(*inputs, *labels) -> [loss, *net_outputs]; with loss_fn None, net's first output is the loss,
    and when net's forward takes the labels by name, net(*inputs, label=label, ...) computes it. With
    by_name, net(input=input, ...): the input names are the forward's argument names."""
    safe = [_ident(n) for n in input_names], [_ident(n) for n in label_names]
    own = loss_fn is None and bool(label_names) and takes_labels(net, label_names)
    return _module(*safe, own_loss=own, by_name=by_name).NetWithLoss(net, loss_fn)


def takes_labels(net: paddle.nn.Layer, names: list[str]) -> bool:
    """Whether net.forward accepts every one of `names` (as the wrapper spells them) as a keyword
    (model(input_ids, labels=labels))."""
    import inspect

    names = [_ident(n) for n in names]
    try:
        params = inspect.signature(net.forward).parameters
    except (TypeError, ValueError):
        return False
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return True
    return all(n in params and params[n].kind is not inspect.Parameter.POSITIONAL_ONLY for n in names)


def _ident(name: str) -> str:
    ident = "".join(c if c.isalnum() or c == "_" else "_" for c in name)
    return ident if ident and not ident[0].isdigit() else f"x_{ident}"
