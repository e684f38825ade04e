"""A speculative generator in a generator artifact: its verify step and its draft travel inside the .pxa.

Members, beside generator_writer.py's:
  graphs/verify.json                      the target's extend step over k + 1 tokens, every position's logits
  graphs/verify_any.json                  the same with symbolic rows and slots (a server's paged engine; ngram)
  draft/graphs/<program>.json             a draft model's decode, prefill1_<P> and extend1 (chunked prompts)
  draft/weights.safetensors               its weights, as Paddle holds them

The manifest's generation.speculative holds the config (method, num_speculative_tokens, the lookup's
bounds) and the draft's Geometry. A loader lowers these Graphs for its own platform (no executables are
stored for them) and generates through the same SpeculativeEngine as px.Generator; an older loader ignores
the key and generates the same tokens without speculation. Paddle-free."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from ..errors import ModelLoadError
from ..generation.batch_engine import BatchEngine, Geometry, held_weights, program
from ..generation.generate_programs import generate_program
from ..generation.speculative.config import SpeculativeConfig
from ..generation.speculative.engine import SpeculativeEngine
from ..graph import Graph
from ..lowering.policy import LoweringPolicy
from ..runtime.held import HeldWeights
from . import container as fmt

KEY = "speculative"
VERIFY = "graphs/verify.json"
VERIFY_ANY = "graphs/verify_any.json"
DRAFT = "draft/"


def draft_member(name: str) -> str:
    return f"{DRAFT}graphs/{name}.json"


def speculative_members(gen: Any) -> tuple[dict[str, bytes], dict] | None:
    """(members, manifest record) of a px.Generator's speculation, or None when it has none."""
    spec = getattr(gen, "speculative", None)
    if spec is None:
        return None
    members = {VERIFY: gen.verify_graph(spec.k + 1).to_json().encode()}
    if spec.config.method == "ngram":  # NOTE: the method a server speculates with (speculative/served.py)
        members[VERIFY_ANY] = gen.verify_graph(spec.k + 1, any_rows=True).to_json().encode()
    record: dict = {"config": spec.config.record(), "draft": None}
    draft = spec.draft_source
    if draft is not None:
        g = draft.geometry
        graphs = {"decode": draft.decode_captured.graph}
        graphs.update({f"prefill1_{b}": draft.prefill1_captured(b).graph for b in g.buckets})
        if g.chunked:
            graphs["extend1"] = draft.extend_captured(1).graph
        members.update({draft_member(n): graph.to_json().encode() for n, graph in graphs.items()})
        members[DRAFT + fmt.WEIGHTS] = fmt.weights_bytes({k: np.asarray(v) for k, v in draft.source_weights.items()})
        record["draft"] = {"geometry": g.to_dict(), "model": type(draft.model).__name__}
    return members, record


def speculative_engine_from(
    path: str, record: Mapping, members: Mapping[str, bytes], target: BatchEngine, held: HeldWeights
) -> SpeculativeEngine:
    """The SpeculativeEngine an artifact's record describes, over its target's engine (weights held as `held`)."""
    try:
        c = record["config"]
        config = SpeculativeConfig(
            c["method"],
            int(c["num_speculative_tokens"]),
            None,
            int(c.get("prompt_lookup_max", 5)),
            int(c.get("prompt_lookup_min", 5)),
        )
    except (KeyError, TypeError, ValueError) as e:
        raise ModelLoadError(f"The speculative record of {path!r} is incomplete ({e}); export it again.") from None
    policy = LoweringPolicy.live(target.geometry.precision, inference=True)
    verify = program(_graph(path, members, VERIFY), policy, held)
    draft = _draft_engine(path, record["draft"], members, target) if record.get("draft") else None
    return SpeculativeEngine(target, verify, config, draft)


def _draft_engine(path: str, record: Mapping, members: Mapping[str, bytes], target: BatchEngine) -> BatchEngine:
    g = Geometry.from_dict(record["geometry"])
    names = ["decode", *(f"prefill1_{b}" for b in g.buckets), *(["extend1"] if g.chunked else [])]
    graphs = {n: _graph(path, members, draft_member(n)) for n in names}
    policy = LoweringPolicy.live(g.precision, inference=True)
    held = held_weights(graphs["decode"], policy, g.quant_type)
    weights = fmt.weights_of(path, members[DRAFT + fmt.WEIGHTS])

    def make(name: str):
        return generate_program(name, graphs.__getitem__, policy, held, g.one_length)

    return BatchEngine(
        g,
        target.defaults,
        make("decode"),
        lambda b: make(f"prefill_{b}"),
        held.all_prepared(weights),
        extend=make("extend") if g.chunked else None,
        rows_in_turn=True,
    )


def _graph(path: str, members: Mapping[str, bytes], member: str) -> Graph:
    return fmt.stored_graph(path, members, member, "its speculative decoding's program")


def verify_any_graph(path: str, members: Mapping[str, bytes]) -> Graph | None:
    """The paged engine's verify step, or None where the artifact has none (exported before it, or a draft)."""
    return _graph(path, members, VERIFY_ANY) if VERIFY_ANY in members else None
