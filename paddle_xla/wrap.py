"""A Layer that joins a user's network and loss into one forward, so one capture sees both.

to_static needs the forward's source and named arguments, so the wrapper is written to a small
module file with the user's input and label names."""
from __future__ import annotations

import hashlib
import importlib.util
import os
import tempfile

import paddle

_TEMPLATE = '''import paddle


def _flat(out):
    return list(out) if isinstance(out, (list, tuple)) else [out]


class NetWithLoss(paddle.nn.Layer):
    def __init__(self, net, loss_fn):
        super().__init__()
        self.net = net
        self.loss_fn = loss_fn

    def forward(self, {args}):
        outs = _flat(self.net({inputs}))
        loss = self.loss_fn(*outs, {labels}) if self.loss_fn is not None else outs[0]
        return [loss] + outs
'''


def _module(inputs: list[str], labels: list[str]):
    src = _TEMPLATE.format(args=", ".join(inputs + labels), inputs=", ".join(inputs), labels=", ".join(labels))
    digest = hashlib.sha1(src.encode()).hexdigest()[:12]
    folder = os.path.join(tempfile.gettempdir(), "paddle_xla_wrappers")
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, f"net_with_loss_{digest}.py")
    if not os.path.exists(path):
        tmp = path + f".{os.getpid()}.tmp"
        with open(tmp, "w") as f:
            f.write(src)
        os.replace(tmp, path)
    spec = importlib.util.spec_from_file_location(f"paddle_xla_net_with_loss_{digest}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def net_with_loss(net: paddle.nn.Layer, loss_fn, input_names: list[str], label_names: list[str]) -> paddle.nn.Layer:
    """forward(*inputs, *labels) -> [loss, *net_outputs]; with loss_fn None, net's first output is the loss."""
    safe = [_ident(n) for n in input_names], [_ident(n) for n in label_names]
    return _module(*safe).NetWithLoss(net, loss_fn)


def _ident(name: str) -> str:
    ident = "".join(c if c.isalnum() or c == "_" else "_" for c in name)
    return ident if ident and not ident[0].isdigit() else f"x_{ident}"
