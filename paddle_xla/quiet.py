"""Start-up noise that says nothing about the user's model, hidden unless asked: Paddle's glog lines,
its ccache warning and its static-graph notes on .place/.contiguous() and on cond branches during capture,
JAX's report that it found no TPU on a machine that has none, matplotlib's font-cache notice.
`PADDLE_XLA_VERBOSE=1` (or the CLI's --verbose) shows them all again.

Two levels. Importing paddle_xla hides only those named lines, so a library user's own warnings,
and Paddle's warnings about their model, still show. The command line hides every Paddle
user/deprecation warning too: there the user's code is not running."""

from __future__ import annotations

import logging
import os
import sys
import warnings

# NOTE: Paddle reads GLOG_minloglevel once, when it is imported: this must run before that.
_GLOG_WARNINGS_AND_UP = "2"
# The environment variables importing paddle_xla adds, each only where the user has not set it (never
# overridden), and not under PADDLE_XLA_VERBOSE=1. The docs cite this list; tests/test_import_effects.py holds
# the import to it.
ENV_DEFAULTS: dict[str, str] = {
    "GLOG_minloglevel": _GLOG_WARNINGS_AND_UP,  # Paddle's glog: warnings and errors only (read at Paddle's import)
}
_NOISY_LOGGERS = (
    "jax._src.xla_bridge",  # "Unable to initialize backend 'tpu'" (INFO, while probing)
    "matplotlib.font_manager",
)  # "generated new fontManager" (INFO, first import)


_ADDED: list = []  # the warning filters added here, so that --verbose can take them back


def _ignore(**match) -> None:
    warnings.filterwarnings("ignore", **match)
    _ADDED.append(warnings.filters[0])


def verbose() -> bool:
    return os.environ.get("PADDLE_XLA_VERBOSE", "").strip().lower() in ("1", "true", "yes", "on")


def quiet_library_noise() -> None:
    """What importing paddle_xla hides: the named start-up lines only."""
    if verbose():
        return
    if "paddle" not in sys.modules:  # NOTE: too late once Paddle is loaded; say so in the README
        for name, value in ENV_DEFAULTS.items():
            os.environ.setdefault(name, value)
    _ignore(message=r"No ccache found", category=UserWarning)
    # NOTE: Paddle's static graph says this of every .place / .contiguous() a model (PaddleFormers' do)
    # calls while paddle_xla captures it: the capture's business, nothing the user can change
    _ignore(message=r"Tensor do not have '(place|contiguous)' interface", category=UserWarning)
    # NOTE: and this of PaddleFormers' mask code (`if past_key_values_length > 0`) when a generator captures
    # its decode step and prefill chunks: dy2static promoting a branch's Python constant to a tensor
    _ignore(message=r"Return results from different branches in cond", category=UserWarning)
    for name in _NOISY_LOGGERS:
        logging.getLogger(name).setLevel(logging.WARNING)


def quiet_start_up_noise() -> None:
    """What the command line hides: the above, and every Paddle user/deprecation warning."""
    quiet_library_noise()
    if verbose():
        return
    for category in (UserWarning, DeprecationWarning, FutureWarning):
        _ignore(category=category, module=r"paddle(\.|$)")


def show_everything() -> None:
    """Take back what was hidden here (the CLI's --verbose; paddle_xla was imported before it ran).
    Lines Paddle printed, or skipped, at its own import stay as they were."""
    os.environ["PADDLE_XLA_VERBOSE"] = "1"
    for f in _ADDED:
        if f in warnings.filters:
            warnings.filters.remove(f)  # type: ignore[attr-defined]  # NOTE: a list at run time
    _ADDED.clear()
    for name in _NOISY_LOGGERS:
        logging.getLogger(name).setLevel(logging.NOTSET)
