"""Text generation with language models, in fixed shapes on the device (Paddle-free).

  config.py   PaddleFormers' generate arguments, their defaults and checks
  logits.py   one decode step's choice of the next token, as PaddleFormers makes it
  decode.py   the loop: a prefill, then device-side chunks of decode steps over a fixed KV cache

The model side is capture/causal_lm.py; px.Generator (generator.py) joins the two.
"""
