"""Speculative decoding: several guessed tokens per row verified with one read of the target's weights.

`config.py` reads vLLM's and FastDeploy's `speculative_config` keys; `lookup.py` guesses by prompt lookup
(n-grams of the row's own tokens); `rounds.py` is one device-side round (guess k tokens, verify k + 1
positions in one extend step, keep the agreeing prefix and the target's next token); `engine.py` runs the
rounds for `px.Generator.generate`. Paddle-free."""
