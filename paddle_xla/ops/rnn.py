"""pd_op.rnn: Paddle's fused LSTM / GRU / SimpleRNN (the cuDNN-style op nn.LSTM/GRU/SimpleRNN emit),
as lax.scan over time, layer by layer and direction by direction.

Layout (paddle/nn/layer/rnn.py, flatten_parameters): x is time-major [T, B, I]; the weight list holds
every (layer, direction)'s weight_ih, weight_hh in order, then every bias_ih, bias_hh in the same
order; states are [L * D, B, H]. Gate order: LSTM i, f, g, o; GRU r, z, c with the reset gate applied
after the hidden matmul (h_c * r), as in GRUCell.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

from .registry import lowering


def _cell(mode):
    def lstm(gx, h, c, w_hh, b_hh):
        g = gx + h @ w_hh.T + b_hh
        i, f, cand, o = jnp.split(g, 4, axis=-1)
        c = jax.nn.sigmoid(f) * c + jax.nn.sigmoid(i) * jnp.tanh(cand)
        return jax.nn.sigmoid(o) * jnp.tanh(c), c

    def gru(gx, h, c, w_hh, b_hh):
        x_r, x_z, x_c = jnp.split(gx, 3, axis=-1)
        h_r, h_z, h_c = jnp.split(h @ w_hh.T + b_hh, 3, axis=-1)
        r, z = jax.nn.sigmoid(x_r + h_r), jax.nn.sigmoid(x_z + h_z)
        cand = jnp.tanh(x_c + r * h_c)
        return (h - cand) * z + cand, c

    def simple(act):
        return lambda gx, h, c, w_hh, b_hh: (act(gx + h @ w_hh.T + b_hh), c)

    cells = {"LSTM": lstm, "GRU": gru, "RNN_TANH": simple(jnp.tanh), "RNN_RELU": simple(jax.nn.relu)}
    if mode not in cells:
        raise ValueError(f"rnn mode {mode!r} is not one of {sorted(cells)}")
    return cells[mode]


def run_direction(cell, x, h0, c0, w_ih, w_hh, b_ih, b_hh, mask, reverse):
    """One direction of one layer. mask [T, B] marks valid steps; padded steps keep the state and
    output zeros, so a reversed pass starts at each sequence's own last valid step."""
    gx = jnp.einsum("tbi,gi->tbg", x, w_ih) + b_ih

    def step(carry, inputs):
        h, c = carry
        g, m = inputs
        h_new, c_new = cell(g, h, c, w_hh, b_hh)
        m = m[:, None]
        h, c = jnp.where(m, h_new, h), jnp.where(m, c_new, c)
        return (h, c), jnp.where(m, h_new, jnp.zeros((), h_new.dtype))

    (h, c), out = lax.scan(step, (h0, c0), (gx, mask), reverse=reverse)
    return out, h, c


def _dropout(key, x, p):
    keep = jax.random.uniform(key, x.shape, jnp.float32) >= p
    return jnp.where(keep, x / jnp.asarray(1 - p, x.dtype), jnp.zeros((), x.dtype))


@lowering("pd_op.rnn", kind="random")
def rnn(
    key,
    x,
    pre_state,
    weight_list,
    sequence_length=None,
    dropout_state_in=None,
    *,
    dropout_prob=0.0,
    is_bidirec=False,
    input_size=None,
    hidden_size,
    num_layers=1,
    mode,
    seed=0,
    is_test=False,
):
    # NOTE: seed and the dropout state only drive Paddle's own generator; randomness comes from the key.
    cell = _cell(mode)
    dirs = 2 if is_bidirec else 1
    n_units = num_layers * dirs
    h_all = pre_state[0]
    c_all = pre_state[1] if mode == "LSTM" else jnp.zeros_like(h_all)
    t_len, batch = x.shape[:2]
    steps = jnp.arange(t_len)[:, None]
    mask = (
        (steps < sequence_length.reshape(1, batch)) if sequence_length is not None else jnp.ones((t_len, batch), bool)
    )
    layer_in, hs, cs = x, [], []
    for layer in range(num_layers):
        if layer > 0 and dropout_prob > 0 and not is_test:
            layer_in = _dropout(jax.random.fold_in(key, layer), layer_in, dropout_prob)
        outs = []
        for d in range(dirs):
            u = layer * dirs + d
            w_ih, w_hh = weight_list[2 * u], weight_list[2 * u + 1]
            b_ih, b_hh = weight_list[2 * n_units + 2 * u], weight_list[2 * n_units + 2 * u + 1]
            out, h, c = run_direction(cell, layer_in, h_all[u], c_all[u], w_ih, w_hh, b_ih, b_hh, mask, d == 1)
            outs.append(out)
            hs.append(h)
            cs.append(c)
        layer_in = jnp.concatenate(outs, axis=-1) if dirs == 2 else outs[0]
    state = [jnp.stack(hs)] + ([jnp.stack(cs)] if mode == "LSTM" else [])
    return layer_in, dropout_state_in, state, None
