import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
from xla_flags import FAST_COMPILE, SIXTEEN_DEVICES

# NOTE: must be set before jax is imported anywhere: multi-device tests use 16 virtual CPU devices, and
# every test compiles for compile speed (tests/xla_flags.py says why).
os.environ.setdefault("XLA_FLAGS", f"{SIXTEEN_DEVICES} {FAST_COMPILE}")
os.environ.setdefault("JAX_PLATFORMS", "cpu")
# NOTE: tests keep their compile cache out of the user's ~/.cache, in a folder CI reruns still reuse.
os.environ.setdefault("PADDLE_XLA_CACHE_DIR", os.path.join(os.path.dirname(os.path.dirname(__file__)), ".cache", "jax"))
