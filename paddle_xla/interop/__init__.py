"""The bridge to a live Paddle: the only package besides capture that imports paddle.

Each module here reads a Paddle object into the Paddle-free configs of `paddle_xla.train` (and
the like), or writes Paddle-free state back in the layout Paddle expects.
"""
