"""The bridge to a live Paddle optimizer (paddle_optimizer.py). An edge: it imports paddle, as capture/,
api/, models/, integrations/ and cli/ do; the packages below them never do.

Each module here reads a Paddle object into the Paddle-free configs of `paddle_xla.train` (and
the like), or writes Paddle-free state back in the layout Paddle expects.
"""
