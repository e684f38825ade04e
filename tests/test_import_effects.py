"""`import paddle_xla` changes nothing process-wide that the user owns: no environment variable they set
(the log-quieting defaults it adds are quiet.ENV_DEFAULTS, set only where unset), no JAX configuration,
no JAX backend started, no Paddle imported. The compile cache is switched on at paddle_xla's first
compile instead. Each check runs in a fresh process."""

import json
import os
import subprocess
import sys

import pytest
from xla_flags import child_env

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

PROBE = r"""
import json, os, sys
import jax

def config():
    values = getattr(jax.config, "values", None) or {}
    return {k: repr(v) for k, v in values.items()}

env_before, config_before = dict(os.environ), config()
import paddle_xla
from jax._src import xla_bridge
print(json.dumps({
    "env_before": env_before, "env_after": dict(os.environ),
    "config_before": config_before, "config_after": config(),
    "cache_dir": jax.config.jax_compilation_cache_dir,
    "backends": sorted(xla_bridge._backends),
    "paddle": sorted(m for m in sys.modules if m == "paddle" or m.startswith("paddle.")),
}))
"""


def _clean_env(**extra):
    env = {
        k: v
        for k, v in child_env().items()
        if not k.startswith(("JAX_", "PADDLE_XLA_", "GLOG_")) or k in ("JAX_PLATFORMS",)
    }
    return {**env, "JAX_PLATFORMS": "cpu", **extra}


def _probe(**extra) -> dict:
    proc = subprocess.run(
        [sys.executable, "-c", PROBE], cwd=ROOT, env=_clean_env(**extra), capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def probed():
    return _probe(PADDLE_XLA_CACHE_DIR="/nonexistent/never-made")


def test_import_overrides_no_environment_variable_the_user_set():
    from paddle_xla.quiet import ENV_DEFAULTS

    users = {name: "user-" + name for name in ENV_DEFAULTS}
    seen = _probe(**users)
    assert {k: seen["env_after"].get(k) for k in users} == users
    assert seen["env_after"] == seen["env_before"]


def test_import_only_adds_the_listed_defaults(probed):
    from paddle_xla.quiet import ENV_DEFAULTS

    before, after = probed["env_before"], probed["env_after"]
    assert {k: v for k, v in before.items()} == {k: after[k] for k in before}
    added = {k: v for k, v in after.items() if k not in before}
    assert added == ENV_DEFAULTS


def test_import_changes_no_jax_configuration(probed):
    assert probed["config_before"], "jax.config.values is empty: the comparison checks nothing"
    changed = {
        k
        for k in probed["config_before"].keys() | probed["config_after"].keys()
        if probed["config_before"].get(k) != probed["config_after"].get(k)
    }
    assert not changed
    assert probed["cache_dir"] is None


def test_import_starts_no_jax_backend(probed):
    assert probed["backends"] == []


def test_import_loads_no_paddle(probed):
    assert probed["paddle"] == []


FIRST_COMPILE = r"""
import json, sys
import jax, numpy as np
if len(sys.argv) > 1:
    jax.config.update("jax_compilation_cache_dir", sys.argv[1])
import paddle_xla
from paddle_xla.runtime.executables import ExecutableCache
before = jax.config.jax_compilation_cache_dir
ExecutableCache().get({"x": np.ones(2)}, lambda: jax.jit(lambda x: x + 1).lower(np.ones(2)).compile(),
                      lambda sig: "probe")
print(json.dumps([before, jax.config.jax_compilation_cache_dir]))
"""


def _first_compile(tmp_path, *argv, **extra):
    proc = subprocess.run(
        [sys.executable, "-c", FIRST_COMPILE, *argv],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=_clean_env(PADDLE_XLA_CACHE_DIR=str(tmp_path / "ours"), **extra),
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_the_compile_cache_comes_on_at_the_first_compile(tmp_path):
    assert _first_compile(tmp_path) == [None, str(tmp_path / "ours")]


def test_a_cache_folder_the_user_gave_jax_is_kept(tmp_path):
    theirs = str(tmp_path / "theirs")
    assert _first_compile(tmp_path, theirs) == [theirs, theirs]
    assert not os.path.exists(tmp_path / "ours")


def test_the_cache_stays_off_when_turned_off(tmp_path):
    assert _first_compile(tmp_path, PADDLE_XLA_CACHE="0") == [None, None]
