"""A px.Generator written as a Paddle-free artifact (kind "generator"): px.export(gen, "llm.pxa", tokenizer=...).

Members, besides the manifest:
  graphs/decode.json, graphs/prefill_<P>.json   the captured programs (one prefill per prompt bucket P)
  graphs/extend.json, graphs/extend1.json       the prefill chunk, for the batch and for one request
                                                (when prompts past geometry.prefill_chunk are chunked)
  graphs/prefill1_<P>.json                      the batch-1 prefills a server inserts one request with
  graphs/decode_any.json                        the decode step with symbolic rows and slots (a plain
                                                decoder's: one row's) a server's paged engine runs; no executable
  weights.safetensors                           every weight, as Paddle holds it (with synthetic_weights: the
                                                ones of fewer than 2 dimensions; the rest are drawn on load)
  exported/<platform>/<program>.bin             jax.export StableHLO of each program, per platform
  tokenizer.json                                the tokenizer (the `tokenizers` library's format), if given
  graphs/verify.json, draft/...                 a speculative generator's verify step and draft
                                                (speculative_artifact.py)

The manifest's `generation` holds the Geometry (batch and cache slots, cache shape, vocabulary,
precision) and generate's defaults (eos and pad ids), so a loader needs nothing else. Paddle-free.
"""

from __future__ import annotations

import dataclasses
import os

import jax
import numpy as np

from .. import x64
from ..errors import ExportError
from ..files import atomic_write
from ..generation.batch_engine import held_weights
from ..generation.generate_programs import generate_program
from ..lowering.policy import LoweringPolicy
from ..ops.util import dtype as jax_dtype
from . import container as fmt
from . import synthetic_weights as synthetic_lib
from .jax_export import avals, check_platforms
from .speculative_artifact import KEY as SPECULATIVE
from .speculative_artifact import speculative_members

TOKENIZER = "tokenizer.json"


PAGED_DECODE = "decode_any"
ROWS_IN_TURN = "rows_in_turn"


def graph_member(name: str) -> str:
    return f"graphs/{name}.json"


def program_member(platform: str, name: str) -> str:
    return f"exported/{platform}/{name}.bin"


def is_generator(model) -> bool:
    # NOTE: duck-typed, so this module never imports api/generator.py (and so paddle)
    return all(hasattr(model, a) for a in ("engine", "geometry", "decode_captured", "prefill_captured"))


def export_generator(
    gen,
    path: str,
    platforms=("cpu",),
    tokenizer=None,
    chat_template: str | None = None,
    synthetic_weights=None,
    request_defaults: dict | None = None,
) -> dict:
    """Write `gen` to `path` atomically (see the module docstring) and return the manifest. With
    `synthetic_weights` the weights of 2 or more dimensions are left out and drawn when loaded
    (synthetic_weights.py): an artifact that measures speed on another machine, not the model's tokens.
    `request_defaults`: sampling fields (temperature, top_p, top_k, repetition_penalty) a served request
    that leaves them out takes, as a checkpoint's generation_config.json gives them."""
    platforms = check_platforms(platforms)
    if getattr(gen, "strategy", None) is not None and gen.strategy.tensor > 1:
        raise ExportError(
            f"this generator is split over tensor={gen.strategy.tensor} devices, and an artifact's "
            "executables are for one device: export a generator built without tensor="
        )
    g = gen.geometry
    graphs = {"decode": gen.decode_captured.graph}
    graphs.update({f"prefill_{b}": gen.prefill_captured(b).graph for b in g.buckets})
    # NOTE: the batch-1 prefills a server's engine inserts one request with
    graphs.update({f"prefill1_{b}": gen.prefill1_captured(b).graph for b in g.buckets})
    if g.chunked:
        graphs.update({"extend": gen.extend_captured(g.max_batch_size).graph, "extend1": gen.extend_captured(1).graph})
    weights = {k: np.asarray(v) for k, v in gen.source_weights.items()}
    policies = {p: LoweringPolicy.tuned(p, g.precision, inference=True) for p in platforms}
    members = {graph_member(n): graph.to_json().encode() for n, graph in graphs.items()}
    # NOTE: the decode step with symbolic rows (a plain decoder's: one row's) and slots a server's paged engine
    # runs in every bucket: kept as a Graph only (an executable has fixed shapes), lowered where it is loaded
    paged_decode = gen.any_bucket_captured().graph
    members[graph_member(PAGED_DECODE)] = paged_decode.to_json().encode()
    graph_of = {**graphs, PAGED_DECODE: paged_decode}.__getitem__
    stored, synthetic = synthetic_lib.leave_out(weights, synthetic_weights)
    members[fmt.WEIGHTS] = fmt.weights_bytes(stored)
    exported = {}
    for p in platforms:
        held = held_weights(graphs["decode"], policies[p], g.quant_type)
        laid_out = held.all_prepared(weights)
        for name, graph in graphs.items():
            # NOTE: generate's own programs (decode, prefill_<P>, extend) are made from the server's Graphs, as
            # px.Generator makes them, and exported at the batch's shapes
            run = generate_program(name, graph_of, policies[p], held, g.one_length)
            members[program_member(p, name)] = _serialized(graph, run, laid_out, p, g.cache_dtype)
        exported[p] = {"programs": {n: program_member(p, n) for n in graphs}, **held.to_manifest()}
    speculative = speculative_members(gen)
    if speculative is not None:
        members.update(speculative[0])
    text = tokenizer_json(tokenizer)
    if text is not None:
        members[TOKENIZER] = text.encode()
    chat = chat_record(tokenizer, chat_template)
    decode = graphs["decode"]
    manifest = {
        "kind": "generator",
        "feeds": [fmt.tensor_spec(t) for t in decode.feeds],
        "fetches": [fmt.tensor_spec(t) for t in decode.fetches],
        "generation": {
            "geometry": g.to_dict(),
            "defaults": dataclasses.asdict(gen.defaults),
            "buckets": list(g.buckets),
            # NOTE: the executables prefill row by row (and run a plain decoder's decode step per row): a loader
            # lets a plain decoder's prompts of different lengths go together only then
            ROWS_IN_TURN: True,
            **({"request_defaults": dict(request_defaults)} if request_defaults else {}),
            **({SPECULATIVE: speculative[1]} if speculative is not None else {}),
        },
        "exported": exported,
        "lowering": fmt.lowering_record(policies, g.precision),
        "tokenizer": TOKENIZER if text is not None else None,
        "chat": chat,
        **({"synthetic_weights": synthetic} if synthetic else {}),
    }
    data, manifest = fmt.pack(members, manifest)
    atomic_write(path, data)
    return manifest


def program_weights(graph) -> list[str]:
    """The weights a program reads, in a fixed order (what its executable takes)."""
    return sorted(p.name for p in graph.params)


def _serialized(graph, run, weights, platform: str, cache_dtype) -> bytes:
    """`run` (graph's program, or generate's made from others at its shapes) exported for `platform`."""
    mine = {k: weights[k] for k in program_weights(graph)}
    # NOTE: the decode step reads the KV cache in the engine's cache dtype (bf16 under bf16), not the
    # float32 the capture declared
    feeds = [
        jax.ShapeDtypeStruct(tuple(t.shape), cache_dtype if t.name == "past" else jax_dtype(t.dtype))
        for t in graph.feeds
    ]
    if any(d < 0 for t in graph.feeds for d in t.shape):
        raise ExportError("a generator's programs have fixed shapes; this one has a symbolic input")
    with x64.scope():
        try:
            exp = jax.export.export(jax.jit(run), platforms=[platform])(avals(mine), *feeds)
        except Exception as e:
            raise ExportError(
                f"Exporting the generator for platform {platform!r} failed: {type(e).__name__}: {e}"
            ) from e
    return bytes(exp.serialize())


def tokenizer_json(tokenizer) -> str | None:
    """The tokenizer as tokenizer.json text: from a `tokenizers.Tokenizer`, a fast (PaddleFormers or Hugging
    Face) tokenizer, a tokenizer.json path or the folder holding one. A slow (Python) tokenizer is refused
    with the fix: its fast version holds the tokenizer.json."""
    if tokenizer is None:
        return None
    if isinstance(tokenizer, (str, os.PathLike)):
        file = os.path.join(tokenizer, TOKENIZER) if os.path.isdir(tokenizer) else os.fspath(tokenizer)
        if not os.path.isfile(file):
            raise ExportError(
                f"tokenizer={tokenizer!r}: no {TOKENIZER} there; pass the tokenizer object or the "
                f"path of its {TOKENIZER}"
            )
        with open(file, encoding="utf-8") as f:
            text = f.read()
    elif hasattr(tokenizer, "to_str"):
        text = tokenizer.to_str()
    elif getattr(tokenizer, "backend_tokenizer", None) is not None:
        text = tokenizer.backend_tokenizer.to_str()
    else:
        raise ExportError(
            f"the tokenizer ({type(tokenizer).__name__}) is not a fast tokenizer, so it has no "
            f"{TOKENIZER} form: load its fast version (AutoTokenizer.from_pretrained(..., use_fast=True))"
            f" or pass the path of a {TOKENIZER}"
        )
    _check_tokenizer(text, tokenizer)
    return text


def chat_record(tokenizer, chat_template: str | None) -> dict | None:
    """The chat template a server renders messages with (the given one, else the tokenizer's own
    `chat_template`) and the special-token strings templates use; None when there is none."""
    template = chat_template if chat_template is not None else getattr(tokenizer, "chat_template", None)
    if template is None:
        return None
    if not isinstance(template, str):
        raise ExportError(f"chat_template must be a Jinja2 template string, not {type(template).__name__}")
    tokens = {n: getattr(tokenizer, n, None) for n in ("bos_token", "eos_token")}
    return {"template": template, **{n: str(v) for n, v in tokens.items() if isinstance(v, str)}}


def _check_tokenizer(text: str, source) -> None:
    from tokenizers import Tokenizer

    try:
        Tokenizer.from_str(text)
    except Exception as e:
        raise ExportError(f"tokenizer={type(source).__name__} gives no valid {TOKENIZER} ({e})") from e
