"""Structured output: the request fields that ask for it, and llguidance grammars that constrain each token.

Fields (one per request): OpenAI's `response_format` (`{"type": "json_object"}`, `{"type": "json_schema",
"json_schema": {"name", "schema"}}`; `"text"` asks for nothing), and vLLM's `guided_json`, `guided_regex`,
`guided_choice`, `guided_grammar` (Lark or GBNF) and `structured_outputs: {json, regex, choice, grammar}`.

llguidance turns each into a grammar and, per token, a bitmask of the tokens that keep the text inside it
(generation/token_masks.py applies it in the decode step). Why llguidance: a 3 MB wheel with no dependency,
no torch (xgrammar's Python package needs torch; outlines-core builds a whole-vocabulary index per schema up
front), it reads a tokenizer.json as the artifact holds it, and it computes a mask in tens of microseconds
with no per-schema compile step. JSON is compact (no whitespace between tokens, "," and ":" as separators)
unless the schema's own "x-guidance" says otherwise: a model may not pad its answer with blank lines until
max_tokens, so a bounded schema ends even under random weights. Paddle-free.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import llguidance
import llguidance.numpy as llg_numpy
import numpy as np

from ...generation import token_masks as TM
from .bodies import bad

if TYPE_CHECKING:
    from llguidance._lib import JsonCompileOptions

FIELDS = ("response_format", "guided_json", "guided_regex", "guided_choice", "guided_grammar", "structured_outputs")
JSON_OPTIONS: JsonCompileOptions = {"whitespace_flexible": False}
ANY_OBJECT = {"type": "object"}


@dataclass(frozen=True)
class Structured:
    """What a request's text must match: kind "json" (value: a JSON schema), "regex", "choice" (a list of
    strings) or "grammar" (Lark or GBNF text); `param` the field that asked, named in its errors."""

    kind: str
    value: Any
    param: str


def parse(data: dict) -> Structured | None:
    """The request's structured-output field, checked (400 naming it when malformed); None when it asks for
    none. At most one such field per request."""
    # NOTE: response_format {"type": "text"} asks for nothing (some clients always send it)
    given = [name for name in FIELDS if data.get(name) is not None and data[name] != {"type": "text"}]
    if len(given) > 1:
        raise bad(f"Fields {given} each constrain the output: send one.", given[1])
    if not given:
        return None
    name = given[0]
    value = data[name]
    if name == "response_format":
        return _response_format(value)
    if name == "structured_outputs":
        return _structured_outputs(value)
    return _guided(name, name.removeprefix("guided_"), value)


def _response_format(value) -> Structured | None:
    param = "response_format"
    kind = value.get("type") if isinstance(value, dict) else None
    if kind == "text":
        return None
    if kind == "json_object":
        return Structured("json", ANY_OBJECT, param)
    if kind != "json_schema":
        raise bad("'response_format.type' must be 'text', 'json_object' or 'json_schema'.", param)
    spec = value.get("json_schema")
    if not isinstance(spec, dict) or not isinstance(spec.get("name"), str) or not spec["name"]:
        raise bad("'response_format.json_schema' must be an object with a 'name' and a 'schema'.", param)
    schema = spec.get("schema", ANY_OBJECT)
    if not isinstance(schema, dict):
        raise bad("'response_format.json_schema.schema' must be a JSON schema object.", param)
    return Structured("json", schema, param)


def _structured_outputs(value) -> Structured | None:
    param = "structured_outputs"
    if not isinstance(value, dict):
        raise bad("'structured_outputs' must be an object with one of json, regex, choice, grammar.", param)
    unknown = sorted(set(value) - {"json", "regex", "choice", "grammar", "json_object"})
    if unknown:
        raise bad(f"'structured_outputs' takes json, regex, choice, grammar or json_object, not {unknown}.", param)
    given = [k for k in ("json", "regex", "choice", "grammar") if value.get(k) is not None]
    if value.get("json_object"):
        given.append("json_object")
    if len(given) != 1:
        raise bad(f"'structured_outputs' must set exactly one of json, regex, choice, grammar; got {given}.", param)
    if given[0] == "json_object":
        return Structured("json", ANY_OBJECT, param)
    return _guided(param, given[0], value[given[0]])


def _guided(param: str, kind: str, value) -> Structured:
    if kind == "json":
        if isinstance(value, str):
            try:
                value = json.loads(value)
            except ValueError as e:
                raise bad(f"'{param}' is not valid JSON ({e}).", param) from None
        if not isinstance(value, dict):
            raise bad(f"'{param}' must be a JSON schema object.", param)
    elif kind == "choice":
        if not isinstance(value, list) or not value or not all(isinstance(c, str) and c for c in value):
            raise bad(f"'{param}' must be a non-empty list of non-empty strings.", param)
    elif not isinstance(value, str) or not value:
        raise bad(f"'{param}' must be a non-empty string.", param)
    return Structured(kind, value, param)


class Grammars:
    """One served model's grammar engine: its llguidance tokenizer (made on first use) and a matcher per
    constrained request."""

    def __init__(self, tokenizer_json: str | None, vocab: int, eos: tuple[int, ...], model: str):
        self._json, self.vocab, self.eos, self.model = tokenizer_json, vocab, eos, model
        self._tokenizer: llguidance.LLTokenizer | None = None

    def tokenizer(self, param: str) -> llguidance.LLTokenizer:
        if self._tokenizer is None:
            if self._json is None:
                raise bad(f"Model {self.model!r} was exported without a tokenizer: it cannot follow '{param}'.", param)
            try:
                self._tokenizer = llguidance.LLTokenizer(self._json, n_vocab=self.vocab, eos_token=list(self.eos))
            except Exception as e:  # noqa: BLE001  # NOTE: a tokenizer llguidance cannot read is the model's limit
                raise bad(
                    f"Model {self.model!r}'s tokenizer is not one the grammar engine reads ({e}); '{param}' "
                    "needs a byte-level BPE, SentencePiece or similar tokenizer.json.",
                    param,
                ) from None
        return self._tokenizer

    def compile(self, s: Structured) -> str:
        """The llguidance grammar for `s`, checked against this model's tokenizer: a 400 naming llguidance's
        reason where it does not compile."""
        tokenizer = self.tokenizer(s.param)
        try:
            grammar = _grammar(s)
        except ValueError as e:
            raise bad(f"'{s.param}' does not compile: {e}", s.param) from None
        problem = llguidance.LLMatcher.validate_grammar(grammar, tokenizer)
        if problem:
            raise bad(f"'{s.param}' does not compile: {problem.strip()}", s.param)
        return grammar

    def constraint(self, grammar: str) -> Matcher:
        return Matcher(llguidance.LLMatcher(self.tokenizer("grammar"), grammar), self.vocab, self.eos)


def _grammar(s: Structured) -> str:
    if s.kind == "json":
        return llguidance.LLMatcher.grammar_from_json_schema(s.value, defaults=JSON_OPTIONS)
    if s.kind == "regex":
        return llguidance.LLMatcher.grammar_from_regex(s.value)
    if s.kind == "choice":
        return llguidance.grammar_from("choice", s.value)
    return llguidance.grammar_from("grammar", s.value)


class Matcher:
    """One request's grammar state (a generation TokenConstraint): the mask of its next token, advanced past
    each token it makes. A matcher that fails (it should not: every token came through its mask) allows the
    EOS alone, so the request ends rather than run on unconstrained."""

    def __init__(self, matcher: llguidance.LLMatcher, vocab: int, eos: tuple[int, ...]):
        self._matcher = matcher
        self._mask = llg_numpy.allocate_token_bitmask(1, vocab)
        self._eos_only = TM.allowing(eos, vocab)

    def allowed(self) -> np.ndarray:
        if not self._matcher.is_error():
            llg_numpy.fill_next_token_bitmask(self._matcher, self._mask)
        # NOTE: an error (before the fill or in it) or an empty mask would let the step pick any token
        if self._matcher.is_error() or not self._mask.any():
            return self._eos_only.copy()
        return self._mask[0].copy()

    def accept(self, token: int) -> None:
        self._matcher.consume_token(token)

    @property
    def error(self) -> str:
        return self._matcher.get_error() if self._matcher.is_error() else ""
