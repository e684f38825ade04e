"""GeneratorArtifact: a generator written by px.export(gen, ...), generating without Paddle.

It runs the exported StableHLO programs when the artifact holds them for this platform (`mode ==
"exported"`), else re-lowers the stored Graphs (`mode == "relowered"`), and generates through the
same BatchEngine as px.Generator, so its arguments, checks and tokens are the live generator's. Paddle-free.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping

import jax
import numpy as np

from .. import x64
from ..errors import GenerationError, ModelLoadError
from ..generation import all_logits
from ..generation.batch_engine import BatchEngine, Geometry, held_weights, program
from ..generation.config import DecodeConfig, token_ids
from ..generation.continuous import ContinuousEngine, continuous_engine
from ..generation.generate_programs import generate_program
from ..generation.paged_engine import PagedEngine, paged_engine
from ..generation.speculative.engine import NOT_SERVED
from ..generation.speculative.served import paged_engine_type
from ..graph import Graph
from ..lowering.policy import LoweringPolicy
from ..runtime.held import HeldWeights
from . import synthetic_weights
from .container import WEIGHTS, current_platform, lowering_moved, stored_graph, weights_of
from .generator_writer import PAGED_DECODE, ROWS_IN_TURN, TOKENIZER, graph_member, program_weights
from .speculative_artifact import KEY as SPECULATIVE
from .speculative_artifact import speculative_engine_from, verify_any_graph


class GeneratorArtifact:
    """`generate(input_ids, ...)` as px.Generator.generate; `complete(prompt, ...)` text in, text out."""

    def __init__(
        self, path: str, manifest: dict, members: Mapping[str, bytes], prefer_graph: bool = False, seed: int = 0
    ):
        self.path, self.manifest = path, manifest
        gen = manifest.get("generation") or {}
        try:
            self.geometry = Geometry.from_dict(gen["geometry"])
            defaults = dict(gen["defaults"])
            defaults["eos_token_id"] = tuple(defaults.get("eos_token_id") or ())
            self.defaults = DecodeConfig(**defaults)
        except (KeyError, TypeError) as e:
            raise ModelLoadError(f"The generation record of {path!r} is incomplete ({e}); export it again.") from None
        self.platform = current_platform()
        names = ["decode"] + [f"prefill_{b}" for b in self.geometry.buckets]
        # NOTE: the batch-1 prefills a server inserts with (absent from a plain decoder's older artifacts)
        names += [n for n in (f"prefill1_{b}" for b in self.geometry.buckets) if graph_member(n) in members]
        if self.geometry.chunked:
            # NOTE: the prefill chunk for a batch and for one request (prompts past geometry.prefill_chunk)
            names += ["extend", "extend1"]
        if graph_member(PAGED_DECODE) in members:
            names.append(PAGED_DECODE)  # NOTE: absent from older artifacts
        self.graphs = {n: _graph(path, members, n) for n in names}
        # NOTE: an artifact that holds the server's Graphs (batch-1 prefills; a plain decoder's one-row step) runs
        # generate's programs made from them (generation/generate_programs.py), as its executables do
        sources = all(f"prefill1_{b}" in self.graphs for b in self.geometry.buckets) and (
            not self.geometry.one_length or PAGED_DECODE in self.graphs
        )
        entry = (manifest.get("exported") or {}).get(self.platform)
        if entry is not None and not prefer_graph:
            self.mode, self.why = "exported", f"runs the executables exported for {self.platform}"
            held = HeldWeights.from_manifest(entry, self.geometry.precision)
            make = lambda n: _exported_program(path, members, entry["programs"][n], self.graphs[n])  # noqa: E731
        else:
            self.mode = "relowered"
            self.why = (
                (
                    "prefer_graph=True"
                    if entry is not None
                    else f"no executable was exported for {self.platform} "
                    f"(it has {sorted(manifest.get('exported') or {})})"
                )
                + "; the Graphs are lowered here"
                + lowering_moved(manifest)
            )
            policy = LoweringPolicy.live(self.geometry.precision, inference=True)
            held = held_weights(self.graphs["decode"], policy, self.geometry.quant_type)
            one_length = self.geometry.one_length
            make = (
                (lambda n: generate_program(n, self.graphs.__getitem__, policy, held, one_length))
                if sources
                else (lambda n: program(self.graphs[n], policy, held))
            )
        weights = held.all_prepared(synthetic_weights.fill(manifest, weights_of(path, members[WEIGHTS])))
        chunked = self.geometry.chunked
        self.engine = BatchEngine(
            self.geometry,
            self.defaults,
            make("decode"),
            lambda b: make(f"prefill_{b}"),
            weights,
            seed=seed,
            extend=make("extend") if chunked else None,
            # NOTE: exported executables say how they were made (those of an artifact written before may hold the
            # batch's prefills beside the server's Graphs); Graphs lowered here are made row by row where they can
            rows_in_turn=bool(gen.get(ROWS_IN_TURN)) if self.mode == "exported" else sources,
        )
        self._make, self._held, self._weights, self._seed = make, held, weights, seed
        spec = gen.get(SPECULATIVE)
        self.speculative = speculative_engine_from(path, spec, members, self.engine, held) if spec else None
        self._verify_any = verify_any_graph(path, members) if spec else None
        self._continuous: ContinuousEngine | None = None
        self._tokenizer_text = members.get(TOKENIZER)
        self._tokenizer_obj = None

    def generate(self, input_ids, attention_mask=None, seed: int | None = None, **kwargs):
        """(new token ids [batch, T] int64, mean scores [batch, 1] float32), as PaddleFormers' generate."""
        run = self.speculative or self.engine
        return run.generate(input_ids, attention_mask=attention_mask, seed=seed, **kwargs)

    @property
    def speculative_stats(self) -> dict | None:
        """Speculation's counts so far (as px.Generator's), or None for an artifact without speculation."""
        return None if self.speculative is None else self.speculative.stats.as_dict()

    def warm_up(self, **kwargs) -> None:
        (self.speculative or self.engine).warm_up(**kwargs)

    def continuous(self) -> ContinuousEngine:
        """The engine a server runs (generation/continuous.py), on this artifact's programs (made once)."""
        if self.speculative is not None:
            warnings.warn(NOT_SERVED, stacklevel=2)
        if self._continuous is None:
            if f"prefill1_{self.geometry.buckets[0]}" not in self.graphs:
                raise ModelLoadError(
                    f"{self.path!r} holds no batch-1 prefill programs, which serving needs: "
                    "export it again with this paddle_xla"
                )
            make, shared = self._continuous_programs()
            self._continuous = continuous_engine(
                self.geometry, self.defaults, self._weights, make, shared_products=shared, seed=self._seed
            )
        return self._continuous

    @property
    def can_page(self) -> bool:
        """Whether this artifact holds the decode step a paged engine runs (paged())."""
        return PAGED_DECODE in self.graphs

    def paged(
        self,
        kv_cache_tokens: int | None = None,
        block_size: int = 16,
        max_seqs: int | None = None,
        batch_invariant: bool = True,
        prefix_cache: bool = True,
        kv_cache_memory: float | None = None,
    ) -> PagedEngine:
        """A server's engine over a paged KV cache (generation/paged_engine.py, px.Generator.paged's), every
        program lowered here from the Graphs with one policy: the bucketed decode step has no executable, and
        the prefills it follows must be the same lowering's to give a row the numbers of generate."""
        if not self.can_page:
            raise ModelLoadError(
                f"{self.path!r} holds no decode step for a paged KV cache ({graph_member(PAGED_DECODE)}): "
                "export it again with this paddle_xla"
            )
        policy, held = LoweringPolicy.live(self.geometry.precision, inference=True), self._held
        verify = self._verify_any
        verify_any = None if verify is None else (lambda _: program(verify, policy, held))
        # NOTE: the weights stay as loaded (held as `held` says); a program that reads one otherwise transposes it
        return paged_engine(
            self.geometry,
            self.defaults,
            self._weights,
            lambda n: program(all_logits.named(self.graphs.__getitem__, n), policy, held),
            kv_cache_tokens=kv_cache_tokens,
            block_size=block_size,
            max_seqs=max_seqs,
            seed=self._seed,
            batch_invariant=batch_invariant,
            prefix_cache=prefix_cache,
            kv_cache_memory=kv_cache_memory,
            engine_type=paged_engine_type(self.speculative, verify_any),
        )

    def _continuous_programs(self):
        """(make, shared_products) for the continuous engine. Where this platform's lowering shares a decode
        step's products with a prefill's (batch_engine.program_together), every program a server runs is lowered
        here from the Graphs, the exported executables included, so that a step beside a prefill and a step alone
        are one lowering's programs and give a row the same numbers."""
        policy = LoweringPolicy.live(self.geometry.precision, inference=True)
        held = held_weights(self.graphs["decode"], policy, self.geometry.quant_type)
        if not policy.nk_weights or held != self._held:
            return self._make, None
        graphs = self.graphs
        return (lambda n: program(graphs[n], policy, held)), (graphs.__getitem__, policy, held)

    def encode(self, prompt: str, add_special_tokens: bool = True) -> list[int]:
        ids = self._tokenizer().encode(prompt, add_special_tokens=add_special_tokens).ids
        if not ids:
            raise GenerationError(f"the prompt {prompt!r} encodes to no tokens")
        return ids

    def decode(self, ids) -> str:
        return self._tokenizer().decode([int(i) for i in ids], skip_special_tokens=True)

    def token_text(self, token: int) -> str:
        """One token's own text, a special token's too (what a logprobs entry names)."""
        return self._tokenizer().decode([int(token)], skip_special_tokens=False)

    def complete(self, prompt: str, **kwargs) -> str:
        """The text generated after `prompt` (tokens up to the row's EOS), through the artifact's tokenizer."""
        ids, _ = self.generate(np.asarray([self.encode(prompt)], np.int64), **kwargs)
        row = [int(t) for t in ids[0]]
        eos = set(token_ids(kwargs.get("eos_token_id", self.defaults.eos_token_id)))
        cut = next((i for i, t in enumerate(row) if t in eos), len(row))
        return self.decode(row[:cut])

    @property
    def tokenizer_json(self) -> str | None:
        """The artifact's tokenizer.json text (None when it was exported without one)."""
        return None if self._tokenizer_text is None else self._tokenizer_text.decode()

    @property
    def tokenizer(self):
        """The artifact's `tokenizers.Tokenizer` (None when it was exported without one)."""
        if self._tokenizer_obj is None and self._tokenizer_text is not None:
            self._tokenizer_obj = _tokenizer(self.path, self._tokenizer_text)
        return self._tokenizer_obj

    def _tokenizer(self):
        if self.tokenizer is None:
            raise GenerationError(
                f"{self.path!r} holds no tokenizer: export it with px.export(gen, path, "
                "tokenizer=...) or pass token ids"
            )
        return self.tokenizer


def _graph(path: str, members: Mapping[str, bytes], name: str) -> Graph:
    return stored_graph(path, members, graph_member(name), f"the {name} program")


def _exported_program(path: str, members: Mapping[str, bytes], member: str, graph: Graph):
    try:
        exp = jax.export.deserialize(bytearray(members[member]))
    except Exception as e:
        raise ModelLoadError(
            f"The executable {member!r} of {path!r} does not deserialize ({e}); export it again."
        ) from None
    names = program_weights(graph)

    def run(weights, *feeds):
        with x64.scope():
            return exp.call({k: weights[k] for k in names}, *feeds)

    return run


def _tokenizer(path: str, text: bytes):
    try:
        from tokenizers import Tokenizer
    except ModuleNotFoundError:
        raise ModelLoadError(
            f"{path!r} holds a tokenizer, which needs the 'tokenizers' package: "
            "pip install 'paddle_xla[validate]' (or pass token ids)"
        ) from None
    try:
        return Tokenizer.from_str(text.decode())
    except Exception as e:
        raise ModelLoadError(f"The tokenizer in {path!r} is corrupt ({e}); export it again.") from None
