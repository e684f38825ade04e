"""What the command line hides unless asked (--verbose): start-up noise that says nothing about the
user's model. Paddle's glog lines and its ccache/deprecation warnings, and JAX's report that it found no
TPU on a machine that has none. Warnings about the user's model (paddle_xla's own) still show."""
from __future__ import annotations

import logging
import os
import warnings

# NOTE: Paddle reads GLOG_minloglevel once, when it is imported: this must run before that.
_GLOG_WARNINGS_AND_UP = "2"


def quiet_start_up_noise() -> None:
    os.environ.setdefault("GLOG_minloglevel", _GLOG_WARNINGS_AND_UP)
    for category in (UserWarning, DeprecationWarning, FutureWarning):
        warnings.filterwarnings("ignore", category=category, module=r"paddle(\.|$)")
    # "Unable to initialize backend 'tpu'" and friends, logged at INFO while JAX probes for plugins
    logging.getLogger("jax._src.xla_bridge").setLevel(logging.WARNING)
