"""OpenAI's `logprobs` objects from the engine's TokenScores (generation/row_logits.py). Paddle-free.

The values are log_softmax of the model's own logits at each step, before penalties, temperature and
top-k/top-p (vLLM's default, `raw_logprobs`). A completion's (`logprobs: N`, 0-5) is the legacy layout:
`tokens`, `token_logprobs`, `top_logprobs` (a dict per token: its N most likely tokens and the chosen one, so
up to N + 1 entries, as OpenAI and vLLM give them) and `text_offset` (each token's place in the text). A
chat completion's (`logprobs: true`, `top_logprobs: N`, 0-20) is `{"content": [{token, logprob, bytes,
top_logprobs: [N of {token, logprob, bytes}]}]}`. A token is its own text (special tokens included); a
model served without a tokenizer names it `token_id:ID`, as vLLM's return_tokens_as_token_ids does. With `echo`
the prompt's tokens come first, the first of them with null values (nothing comes before it)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

Entry = tuple  # (token id, TokenScores of that token)


class Logprobs:
    """The logprobs of one choice's tokens, built up as they come (a stream's chunks, or a whole reply)."""

    def __init__(self, top: int, chat: bool, token_text: Callable[[int], str] | None):
        self.top, self.chat, self.token_text = top, chat, token_text
        self.offset = 0  # NOTE: where the next token's text begins in the choice's text

    def _text(self, token: int) -> str:
        return self.token_text(token) if self.token_text is not None else f"token_id:{token}"

    def of(self, entries: Sequence[Entry]) -> dict:
        """The logprobs object of these tokens (a chunk's, or the whole choice's)."""
        return self._chat(entries) if self.chat else self._completion(entries)

    def _chat(self, entries: Sequence[Entry]) -> dict:
        content = []
        for token, scores in entries:
            alternatives = [
                self._one(int(i), float(v)) for i, v in zip(scores.top_ids[: self.top], scores.top_logprobs)
            ]
            content.append({**self._one(token, float(scores.logprob)), "top_logprobs": alternatives})
        return {"content": content, "refusal": None}

    def _one(self, token: int, logprob: float) -> dict:
        text = self._text(token)
        return {"token": text, "logprob": logprob, "bytes": list(text.encode("utf-8"))}

    def _completion(self, entries: Sequence[Entry]) -> dict:
        tokens: list[str] = []
        values: list[float | None] = []
        tops: list[dict[str, float] | None] = []
        offsets: list[int] = []
        for token, scores in entries:
            text = self._text(token)
            tokens.append(text)
            offsets.append(self.offset)
            self.offset += len(text)
            if scores is None:  # NOTE: a prompt's first token: nothing comes before it
                values.append(None)
                tops.append(None)
                continue
            values.append(float(scores.logprob))
            top = {self._text(int(i)): float(v) for i, v in zip(scores.top_ids[: self.top], scores.top_logprobs)}
            top.setdefault(text, float(scores.logprob))  # NOTE: the chosen token is always there
            tops.append(top)
        return {"tokens": tokens, "token_logprobs": values, "top_logprobs": tops, "text_offset": offsets}
