"""A causal language model captured as the two programs a fixed-shape decode loop runs.

PaddleFormers' causal LMs keep their keys and values in a cache object (`DynamicCache`) that grows
by concatenation, so every decode step would be a new shape, and a captured program cannot hand a
Python object in or out. The model itself stays unchanged: two thin wrappers call it the way
PaddleFormers' `generate` does and hand the cache in and out as one tensor,
`[2 * layers, batch, kv_heads, length, head_dim]` (keys and values of layer i at 2i and 2i + 1,
after rotary embeddings, not repeated for GQA):

- prefill(input_ids, attention_mask, position_ids) -> (last logits [B, V], cache [2L, B, H, P, D])
- decode(input_ids [B, 1], attention_mask [B, S + 1], position_ids [B, 1], past [2L, B, H, S, D])
  -> (logits [B, V], the new token's keys and values [2L, B, H, D])
- extend: the decode step on c new tokens at once (input_ids [B, c], attention_mask [B, S + c]) ->
  (the last one's logits [B, V], their keys and values [2L, B, H, c, D]): a long prompt is prefilled in
  chunks of c tokens against what the cache holds, so a server's running streams wait for one chunk at
  most (the model's own mask code makes the chunk's causal mask from the 2-D mask and the past length)

The decode step rebuilds the model's own cache class from a fixed-size buffer of S slots, of which
the attention mask marks the filled ones; the model appends the new token as slot S, and the loop
writes that slot back into its buffer. So one decode program serves every step.
"""

from __future__ import annotations

import inspect
from typing import Any

import numpy as np
import paddle
from paddle.static import InputSpec

from ..errors import CaptureError
from .gpu_only_ops import gpu_only_ops
from .layer_ops import eager_layer_ops
from .sources import Captured, from_layer


def cache_geometry(model) -> tuple[int, int, int]:
    """(layers, kv_heads, head_dim) of a PaddleFormers-style config."""
    cfg = getattr(model, "config", None)
    if cfg is None or not hasattr(cfg, "num_hidden_layers"):
        raise CaptureError(
            f"{type(model).__name__} has no PaddleFormers-style config (num_hidden_layers, ...): "
            "paddle_xla generates with models that take past_key_values and return their cache"
        )
    heads = cfg.num_attention_heads
    kv_heads = getattr(cfg, "num_key_value_heads", None) or heads
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // heads
    return cfg.num_hidden_layers, kv_heads, head_dim


def has_cache_api(model) -> bool:
    """Whether the model takes past_key_values (PaddleFormers' causal LMs); others get a derived cache."""
    return "past_key_values" in inspect.signature(model.forward).parameters


def vocab_size(model) -> int:
    """The vocabulary: the config's, else the logits' last dimension on one token."""
    size = getattr(getattr(model, "config", None), "vocab_size", None)
    if size is None:
        with paddle.no_grad():
            size = _logits(_call(model, np.ones((1, 1), "int64"))).shape[-1]
    return int(size)


def _call(model, ids):
    kwargs = {"return_dict": True} if "return_dict" in inspect.signature(model.forward).parameters else {}
    with gpu_only_ops(), eager_layer_ops(model):
        return model(paddle.to_tensor(ids), **kwargs)


def check_causal(model, vocab: int, length: int = 6) -> None:
    """Refuse a model whose output at a position reads later positions: a KV cache would silently give
    other tokens. Two eager calls that differ in the last token only must agree on every earlier
    position's logits (a causal mask makes them equal to the bit; the tolerance only forgives a fused
    kernel's summation order)."""
    ids = np.random.default_rng(0).integers(0, vocab, (1, length)).astype("int64")
    other = ids.copy()
    other[0, -1] = (ids[0, -1] + 1) % vocab
    was_training = model.training
    model.eval()
    try:
        with paddle.no_grad():
            a, b = (_logits(_call(model, x)) for x in (ids, other))
    finally:
        model.train() if was_training else None
    moved = float(np.abs(a[:, :-1] - b[:, :-1]).max())
    if moved > 1e-6 * max(1.0, float(np.abs(a).max())):
        raise CaptureError(
            f"{type(model).__name__} is not causal: changing the token at position {length - 1} "
            f"moves its logits at earlier positions (by up to {moved:.3g}), so its output at a "
            "position reads later ones; a generator needs a causal language model (a decoder with a "
            "causal attention mask)"
        )


def _logits(out) -> np.ndarray:
    logits = getattr(out, "logits", None)
    if logits is None:
        logits = out[0] if isinstance(out, (tuple, list)) else out
    return np.asarray(logits.numpy(), np.float64)


def cache_class(model):
    """The class of the cache object the model returns, found by one eager call on one token."""
    if not has_cache_api(model):
        raise CaptureError(
            f"{type(model).__name__}.forward takes no past_key_values: paddle_xla's generator needs "
            "a model with a KV-cache API (PaddleFormers' causal LMs have one)"
        )
    with paddle.no_grad(), gpu_only_ops(), eager_layer_ops(model):
        out = model(paddle.to_tensor([[1]], dtype="int64"), use_cache=True, return_dict=True)
    cache = getattr(out, "past_key_values", None)
    if cache is None or not hasattr(cache, "layers"):
        raise CaptureError(
            f"{type(model).__name__} returned no cache object with .layers for use_cache=True "
            f"(got {type(cache).__name__})"
        )
    return type(cache)


class _Prefill(paddle.nn.Layer):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids, attention_mask, position_ids):
        out = self.model(
            input_ids, attention_mask=attention_mask, position_ids=position_ids, use_cache=True, return_dict=True
        )
        kv = []
        for layer in out.past_key_values.layers:
            kv += [layer.keys, layer.values]
        return out.logits[:, -1], paddle.stack(kv)


class _DecodeStep(paddle.nn.Layer):
    def __init__(self, model, cache_cls, layers, tokens: int | None = 1, symbolic: bool = False):
        super().__init__()
        self.symbolic = symbolic  # NOTE: a Python flag: dy2static turns a test of the feed's shape into an op
        self.model = model
        self.cache_cls = cache_cls
        self.layers = layers
        self.tokens = tokens

    def forward(self, input_ids, attention_mask, position_ids, past):
        kv = paddle.unbind(past, 0)
        out = self.model(
            input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            past_key_values=self._cache(kv),
            use_cache=True,
            return_dict=True,
        )
        new = []
        for layer in out.past_key_values.layers:
            if self.tokens == 1:
                new += [layer.keys[:, :, -1], layer.values[:, :, -1]]
            else:
                n = input_ids.shape[1] if self.tokens is None else self.tokens
                new += [layer.keys[:, :, -n:], layer.values[:, :, -n:]]
        return out.logits[:, -1], paddle.stack(new)

    def _cache(self, kv):
        """The model's cache class holding `kv`. With symbolic rows or slots its layers are filled directly:
        PaddleFormers' own fill first makes an empty [B, H, 0, D] tensor, which needs a concrete B."""
        pairs = [(kv[2 * i], kv[2 * i + 1]) for i in range(self.layers)]
        if not self.symbolic:
            return self.cache_cls(pairs, config=self.model.config)
        cache = self.cache_cls(config=self.model.config)
        for layer, (keys, values) in zip(cache.layers, pairs):
            if getattr(layer, "is_sliding", False):
                raise CaptureError(
                    f"{type(self.model).__name__} has sliding-window attention layers: a paged KV cache "
                    "(one Graph for every bucket) needs every layer to attend to its whole cache"
                )
            layer.keys, layer.values, layer.dtype, layer.place = keys, values, keys.dtype, keys.place
            layer.is_initialized = True
        return cache


def capture_forward(model, batch: int) -> Captured:
    """forward(input_ids [batch, T]) -> logits with T symbolic, for a model without a cache API
    (generation/derive.py derives its prefill and decode step from this)."""
    return from_layer(model, [InputSpec([batch, None], "int64", "input_ids")], training=False)


def capture_prefill(model, batch: int, length: int) -> Captured:
    specs = [InputSpec([batch, length], "int64", n) for n in ("input_ids", "attention_mask", "position_ids")]
    return from_layer(_Prefill(model), specs, training=False)


def capture_decode(
    model, batch: int | None, slots: int | None, dtype: str = "float32", tokens: int | None = 1
) -> Captured:
    """The decode step on `tokens` new tokens per row (1: the decode step; more: a prefill chunk). None for
    batch, slots or tokens leaves that dimension symbolic: one Graph for every bucket a paged engine runs."""
    layers, kv_heads, head_dim = cache_geometry(model)
    past_dtype: Any = dtype  # NOTE: Paddle's stub lists the dtype names as literals
    width = None if slots is None or tokens is None else slots + tokens
    specs = [
        InputSpec([batch, tokens], "int64", "input_ids"),
        InputSpec([batch, width], "int64", "attention_mask"),
        InputSpec([batch, tokens], "int64", "position_ids"),
        InputSpec([2 * layers, batch, kv_heads, slots, head_dim], past_dtype, "past"),
    ]
    symbolic = batch is None or slots is None
    return from_layer(_DecodeStep(model, cache_class(model), layers, tokens, symbolic), specs, training=False)
