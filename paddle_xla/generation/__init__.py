"""Text generation with language models, in fixed shapes on the device (Paddle-free).

  config.py          PaddleFormers' generate arguments, their defaults and checks
  row_logits.py      one decode step's choice of the next token, per row, as PaddleFormers makes it
  slots.py           the device side: rows over a fixed KV cache, prefill, extend chunks, decode-chunk loops
  batch_engine.py    BatchEngine: a prefill per prompt bucket, then decode chunks; Geometry; program(...)
  continuous.py      ContinuousEngine: continuous batching, a request into any free row (serve/llm/ drives it)
  blocks.py          BlockPool: a paged KV cache's block tables, prefix cache (hash chain) and LRU, host side
  paged.py           the device side of a paged KV cache: the block pool, decode chunks per bucket
  paged_engine.py    PagedEngine: continuous batching over the block pool, chunks in the smallest bucket
  derive.py          a KV cache derived from a plain decoder's forward (a model with no cache API)
  gqa_rewrite.py     grouped-query attention reading the unrepeated keys and values, sums in fixed order
  last_logits.py     the LM head on the prompt's last position only
  all_logits.py      the LM head on every position (a prompt's own log-probabilities)
  prompt_scores.py   PromptScorer: a prompt's log-probabilities (echo), beside a paged engine's requests

The model side is capture/causal_lm.py (it imports paddle); px.Generator (api/generator.py) joins the two,
and artifact/generator_reader.py runs the same engine without Paddle.
"""
