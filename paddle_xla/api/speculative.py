"""px.Generator's speculative_config: the checks a config and a draft model get, and the engine they make
(generation/speculative/). Imports Paddle (through the Generator it builds for a draft model)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ..capture.causal_lm import vocab_size
from ..errors import GenerationError
from ..generation import all_logits
from ..generation.speculative.config import SpeculativeConfig, speculative_config
from ..generation.speculative.engine import SpeculativeEngine

if TYPE_CHECKING:
    from ..graph import Graph
    from .generator import Generator


def speculative_engine(gen: Generator, given: Mapping[str, Any] | SpeculativeConfig) -> SpeculativeEngine:
    """The engine that verifies `given`'s guesses for `gen`, or a GenerationError naming what is wrong."""
    g = gen.geometry
    config = speculative_config(given, g.max_length)
    if config.method == "mtp":
        _refuse_mtp(gen)
    if g.one_length:
        raise GenerationError(
            "speculative decoding verifies k + 1 tokens in one step of the model's cache API; "
            f"{type(gen.model).__name__} is a plain decoder (a derived cache, one token a step): "
            "use a PaddleFormers causal LM as the target"
        )
    draft = _draft(gen, config.model) if config.method == "draft_model" else None
    verify = gen.verify_program(config.num_speculative_tokens + 1)
    return SpeculativeEngine(gen.engine, verify, config, draft.engine if draft is not None else None, draft)


def _refuse_mtp(gen: Generator) -> None:
    layers = getattr(getattr(gen.model, "config", None), "num_nextn_predict_layers", 0) or 0
    if not layers:
        raise GenerationError(
            f'speculative_config method="mtp" needs a multi-token-prediction layer: {type(gen.model).__name__} '
            "has num_nextn_predict_layers=0 (ERNIE 4.5 checkpoints carry one with num_nextn_predict_layers=1)"
        )
    raise GenerationError(
        f'speculative_config method="mtp" is not supported yet ({type(gen.model).__name__} has '
        f"num_nextn_predict_layers={layers}): use method='draft_model' or 'ngram'"
    )


def _draft(gen: Generator, model: Any) -> Generator:
    """The draft's Generator over the target's rows and slots: `model` itself when it is one, else built."""
    from .generator import Generator

    g = gen.geometry
    if isinstance(model, Generator):
        draft = model
        if (draft.max_batch_size, draft.max_length) != (g.max_batch_size, g.max_length):
            raise GenerationError(
                f"the draft generator has max_batch_size={draft.max_batch_size}, max_length={draft.max_length}; "
                f"the target's has {g.max_batch_size}, {g.max_length}: build the draft with the target's"
            )
        if draft.strategy.tensor != gen.strategy.tensor:
            raise GenerationError(
                f"the draft generator is split over tensor={draft.strategy.tensor} devices, the target over "
                f"tensor={gen.strategy.tensor}: build the draft with the target's Strategy"
            )
    else:
        if model is gen.model:
            raise GenerationError("the draft model is the target itself: give a smaller causal LM as the draft")
        _check_vocabulary(vocab_size(model), g.vocab_size)  # NOTE: before the draft is captured
        draft = Generator(
            model,
            max_batch_size=g.max_batch_size,
            max_length=g.max_length,
            chunk=g.chunk,
            prefill_chunk=g.prefill_chunk or g.max_length,
            strategy=gen.strategy,
        )
    _check_vocabulary(draft.geometry.vocab_size, g.vocab_size)
    if draft.speculative is not None:
        raise GenerationError("the draft generator speculates itself: give it no speculative_config")
    return draft


def _check_vocabulary(draft: int, target: int) -> None:
    if draft != target:
        raise GenerationError(
            f"the draft model's vocabulary has {draft} tokens, the target's {target}: "
            "a draft must share the target's tokenizer and vocabulary"
        )


def verify_graph(gen: Generator, width: int, any_rows: bool = False) -> Graph:
    """The target's extend step over `width` tokens per row with every position's logits (any_rows: with
    symbolic rows and slots, a paged engine's)."""
    from .generator import _CacheApi

    source = gen._source
    assert isinstance(source, _CacheApi)  # NOTE: speculative_engine refuses a derived cache first
    captured = source.extend_any(width) if any_rows else source.extend(width, gen.geometry.max_length)
    graph = all_logits.rewrite(captured.graph)
    if graph is None:
        raise GenerationError(f"{type(gen.model).__name__}'s extend step does not fetch logits[:, -1]")
    return graph
