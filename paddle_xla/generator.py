"""px.Generator: text generation with an unchanged PaddleFormers causal LM, compiled for fixed shapes.

    gen = px.Generator(model, max_batch_size=8, max_length=512)
    ids, scores = gen.generate(input_ids, attention_mask=mask, max_new_tokens=64)

The model is captured twice (capture/causal_lm.py): a prefill per prompt bucket and one decode step,
which generation/decode.py runs over a fixed-size KV cache, `chunk` steps per host call. `generate`
takes PaddleFormers' arguments with its defaults (generation/config.py) and returns what its
`generate` returns: the new tokens [batch, T] (pad after a row's EOS, T the steps run) and each row's
mean score [batch, 1], as NumPy arrays.
"""
from __future__ import annotations

import itertools
import weakref

import jax
import jax.numpy as jnp
import numpy as np

from . import x64
from .capture.causal_lm import cache_geometry, capture_decode, capture_prefill
from .errors import GenerationError
from .generation import decode as D
from .generation.config import DecodeConfig, decode_config, token_ids
from .lowering.lower import lower


def _bucket(n: int, max_length: int) -> int:
    b = 16
    while b < n:
        b *= 2
    return min(b, max_length)


def _program(captured):
    """The captured Graph as run(weights, *feeds) -> fetches, weights a dict of every persistable."""
    fn = lower(captured.graph)
    names = [f.name for f in captured.graph.feeds]
    trainable = {p.name for p in captured.graph.params if p.trainable}
    persistables = {p.name for p in captured.graph.params}

    def run(weights, *feeds):
        params = {k: weights[k] for k in persistables & trainable}
        buffers = {k: weights[k] for k in persistables - trainable}
        outs, _ = fn(params, buffers, dict(zip(names, feeds)), None)
        return outs
    return run


class Generator:
    """Generates with `model` for up to `max_batch_size` prompts and `max_length` cache slots."""

    def __init__(self, model, max_batch_size: int = 8, max_length: int = 512, chunk: int = 16, seed: int = 0,
                 strategy=None):
        if strategy is not None and strategy != type(strategy)():
            raise GenerationError("px.Generator takes no Strategy yet (precision and tensor parallelism for "
                                  "generators are not implemented): build it without one")
        self.model = model
        self.max_batch_size, self.max_length, self.chunk = max_batch_size, max_length, chunk
        self.layers, self.kv_heads, self.head_dim = cache_geometry(model)
        cfg = model.config
        self.vocab_size = cfg.vocab_size
        eos_ids = token_ids(getattr(cfg, "eos_token_id", None))
        pad = getattr(cfg, "pad_token_id", None)
        # NOTE: PaddleFormers: pad falls back to eos when the config has none
        self.defaults = DecodeConfig(eos_token_id=eos_ids, pad_token_id=pad if pad is not None else
                                     (eos_ids[0] if eos_ids else 0))
        with x64.scope():
            decode = capture_decode(model, max_batch_size, max_length)
        self._weights = dict(decode.weights)
        self._step = _program(decode)
        self._prefills = {}
        self._starts, self._runs = {}, {}
        self._key = jax.random.PRNGKey(seed)
        self._calls = itertools.count()
        self._params = None

    # ---- programs, compiled once per prompt bucket and decode config ----
    def _prefill(self, bucket: int):
        if bucket not in self._prefills:
            with x64.scope():
                captured = capture_prefill(self.model, self.max_batch_size, bucket)
            self._weights.update(captured.weights)
            self._params = None
            self._prefills[bucket] = _program(captured)
        return self._prefills[bucket]

    def _start_fn(self, bucket, cfg):
        if (bucket, cfg) not in self._starts:
            programs = D.Programs(self._prefill(bucket), self._step)
            self._starts[(bucket, cfg)] = jax.jit(
                lambda params, ids, mask, live, key: D.start(programs, params, ids, mask, live, self.max_length,
                                                             cfg, key, jnp.float32))
        return self._starts[(bucket, cfg)]

    def _run_fn(self, cfg):
        if cfg not in self._runs:
            programs = D.Programs(None, self._step)
            self._runs[cfg] = jax.jit(lambda params, state, stop_at: D.run(programs, params, state, stop_at, cfg),
                                      donate_argnums=(1,))
        return self._runs[cfg]

    def _device_params(self):
        if self._params is None:
            self._params = jax.device_put(self._weights)
        return self._params

    # ---- generate ----
    def generate(self, input_ids, attention_mask=None, seed: int | None = None, **kwargs):
        """(new token ids [batch, T] int64, mean scores [batch, 1] float32), as PaddleFormers' generate."""
        cfg = decode_config(self.defaults, **kwargs)
        ids, mask = self._inputs(input_ids, attention_mask, cfg)
        batch, width = ids.shape
        bucket = _bucket(width, self.max_length)
        self._check_lengths(width, bucket, cfg)
        ids, mask = self._padded(ids, mask, bucket, cfg)
        key = jax.random.PRNGKey(seed) if seed is not None else jax.random.fold_in(self._key, next(self._calls))
        with x64.scope():
            self._prefill(bucket)
            params = self._device_params()
            live = np.arange(self.max_batch_size) < batch
            state = self._start_fn(bucket, cfg.compiled())(params, ids, mask, live, key)
            run = self._run_fn(cfg.compiled())
            done = 1
            while done < cfg.max_new_tokens:
                state = run(params, state, min(done + self.chunk, cfg.max_new_tokens))
                done = int(state.t)
                if cfg.eos_token_id and not bool(np.asarray(state.unfinished).any()):
                    break
            out, scores = np.asarray(state.out), np.asarray(state.scores)
        return out[:batch, :done].astype(np.int64), scores[:batch, None].astype(np.float32)

    def _inputs(self, input_ids, attention_mask, cfg):
        ids = np.asarray(input_ids.numpy() if hasattr(input_ids, "numpy") else input_ids)
        if ids.ndim != 2 or ids.dtype.kind not in "iu":
            raise GenerationError(f"input_ids must be integer token ids [batch, length], got {ids.dtype} {ids.shape}")
        if ids.shape[0] > self.max_batch_size:
            raise GenerationError(f"{ids.shape[0]} prompts > max_batch_size={self.max_batch_size}: split the batch "
                                  "or build the Generator with a larger max_batch_size")
        bad = (ids < 0) | (ids >= self.vocab_size)
        if bad.any():
            raise GenerationError(f"token id {int(ids[bad][0])} is outside the vocabulary [0, {self.vocab_size})")
        if attention_mask is None:
            # NOTE: PaddleFormers: padding is where ids equal pad_token_id, if it occurs and is not also eos
            pad = cfg.pad_token_id
            has_pad = (ids == pad).any() and pad not in cfg.eos_token_id
            mask = (ids != pad) if has_pad else np.ones_like(ids)
        else:
            mask = np.asarray(attention_mask.numpy() if hasattr(attention_mask, "numpy") else attention_mask)
            if mask.shape != ids.shape:
                raise GenerationError(f"attention_mask shape {mask.shape} differs from input_ids' {ids.shape}")
        return ids.astype(np.int64), (mask != 0).astype(np.int64)

    def _check_lengths(self, width, bucket, cfg):
        if width > self.max_length:
            raise GenerationError(f"the prompt ({width} tokens) is longer than max_length={self.max_length}: "
                                  "build the Generator with a larger max_length")
        room = self.max_length - bucket + 1
        if cfg.max_new_tokens > room:
            raise GenerationError(f"max_new_tokens={cfg.max_new_tokens} does not fit the cache: a prompt of {width} "
                                  f"tokens (bucket {bucket}) leaves room for {room} in max_length={self.max_length}")

    def _padded(self, ids, mask, bucket, cfg):
        # NOTE: left padding to the bucket, and dummy rows (all padding) up to max_batch_size
        out = np.full((self.max_batch_size, bucket), cfg.pad_token_id, np.int64)
        m = np.zeros((self.max_batch_size, bucket), np.int64)
        out[:ids.shape[0], bucket - ids.shape[1]:] = ids
        m[:ids.shape[0], bucket - ids.shape[1]:] = mask
        return out, m


_GENERATORS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def generate(model, input_ids, attention_mask=None, max_batch_size: int | None = None, max_length: int | None = None,
             **kwargs):
    """One call: a Generator kept per model (and size), then its generate."""
    batch = np.shape(input_ids)[0]
    max_batch_size = max_batch_size or batch
    max_length = max_length or getattr(model.config, "max_position_embeddings", 512)
    gens = _GENERATORS.setdefault(model, {})
    key = (max_batch_size, max_length)
    if key not in gens:
        gens[key] = Generator(model, max_batch_size=max_batch_size, max_length=max_length)
    return gens[key].generate(input_ids, attention_mask=attention_mask, **kwargs)
