import os
import sys

# NOTE: must be set before jax is imported anywhere: multi-device tests use 16 virtual CPU devices.
os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=16")
os.environ.setdefault("JAX_PLATFORMS", "cpu")
# NOTE: tests keep their compile cache out of the user's ~/.cache, in a folder CI reruns still reuse.
os.environ.setdefault("PADDLE_XLA_CACHE_DIR", os.path.join(os.path.dirname(os.path.dirname(__file__)), ".cache", "jax"))
sys.path.insert(0, os.path.dirname(__file__))
