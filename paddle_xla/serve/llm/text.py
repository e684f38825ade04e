"""Token ids to streamed text: incremental detokenization and OpenAI's `stop` strings. Paddle-free.

A token may be part of a character (byte-level BPE splits UTF-8), so the text of the ids so far is
decoded whole and only the part past what was sent goes out, holding back a trailing U+FFFD (an
unfinished character). A stop string ends the completion where it begins (or, include_stop, where it
ends: vLLM's include_stop_str_in_output), and none does before min_tokens tokens (vLLM's rule); the text
that might be the start of one is held back until the next token says whether it is. The ids and the usage
count every token made, the one that completed the stop string too (as vLLM counts them): the text alone
leaves the stop string out."""

from __future__ import annotations

from collections.abc import Callable, Sequence

INCOMPLETE = "\ufffd"


class TextStream:
    def __init__(
        self,
        decode: Callable[[list[int]], str] | None,
        stop: Sequence[str] = (),
        include_stop: bool = False,
        min_tokens: int = 0,
    ):
        self.decode, self.stop, self.include_stop = decode, [s for s in stop if s], include_stop
        self.min_tokens = min_tokens  # NOTE: no stop string ends the text before this many tokens (vLLM's rule)
        self.ids: list[int] = []
        self.sent = ""  # text already handed out
        self.floor = 0  # where stop strings are looked for from: past the text sent before min_tokens
        self.stopped = False  # a stop string was met: the completion ends here

    def push(self, token: int) -> str:
        """The new text this token makes sendable ('' if none yet)."""
        self.ids.append(token)
        return self._advance(final=False)

    def finish(self) -> str:
        """What is left to send once the completion has ended."""
        return self._advance(final=True)

    def end_here(self) -> str:
        """What is left to send now that a stop token id has ended the completion (vLLM's stop_token_ids)."""
        rest = self._advance(final=True)
        self.stopped = True
        return rest

    def _advance(self, final: bool) -> str:
        if self.decode is None or self.stopped:
            return ""
        text = self.decode(self.ids)
        if len(self.ids) < self.min_tokens:
            sent = self._take(text if final else text.rstrip(INCOMPLETE))
            self.floor = len(self.sent)
            return sent
        met = self._stop_at(text)
        if met is not None:
            self.stopped = True
            at, length = met
            return self._take(text[: at + length if self.include_stop else at])
        if not final:
            text = text.rstrip(INCOMPLETE)
            text = text[: len(text) - self._held(text)]
        return self._take(text)

    def _take(self, text: str) -> str:
        # NOTE: a decoder may rewrite earlier text as ids arrive (merging spaces); only growth is sent
        new = text[len(self.sent) :] if text.startswith(self.sent) else ""
        self.sent += new
        return new

    def _stop_at(self, text: str) -> tuple[int, int] | None:
        """(where, length) of the stop string that begins first in the text not yet sent (of two that begin
        at one place, the one listed first, as vLLM takes it), if any."""
        found = [(text.find(s, max(self.floor, len(self.sent) - len(s))), i, len(s)) for i, s in enumerate(self.stop)]
        at = min((f for f in found if f[0] >= 0), default=None)
        return (at[0], at[2]) if at is not None else None

    def _held(self, text: str) -> int:
        """How many trailing characters could begin a stop string."""
        best = 0
        for s in self.stop:
            for n in range(min(len(s) - 1, len(text)), 0, -1):
                if text.endswith(s[:n]):
                    best = max(best, n)
                    break
        return best
