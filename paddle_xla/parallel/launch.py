"""Many processes, one program: `paddle-xla launch --nproc N script.py` (or the same environment
variables set by any cluster launcher) starts N processes that join with jax.distributed.initialize.

JAX's own distributed runtime does the work; nothing here moves tensors. The launcher runs each
process through `bootstrap`, which joins the group before the user's script imports anything. Each
process feeds its own share of the global batch, as under paddle.distributed.launch (shares.py).

Environment (set by `launch`, or by hand on each host):
  PADDLE_XLA_COORDINATOR  host:port of process 0    PADDLE_XLA_NUM_PROCESSES  N
  PADDLE_XLA_PROCESS_ID   0 .. N-1                  PADDLE_XLA_CPU_DEVICES    virtual CPU devices each
On CPU the processes talk through gloo (jax_cpu_collectives_implementation). Other launchers'
variables (Paddle's own, SLURM, Open MPI, torchrun) are read by group.py and joined by join.py."""

from __future__ import annotations

import os
import runpy
import socket
import subprocess
import sys
import time
from collections.abc import Sequence


def initialize() -> bool:
    """Join the process group named by the environment; False (and nothing done) without one."""
    from .join import join_from_environment

    return join_from_environment() is not None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def child_env(rank: int, nproc: int, coordinator: str, cpu_devices: int | None) -> dict[str, str]:
    # NOTE: Paddle's rank variables too, so that a script written for paddle.distributed.launch sees its
    # rank (dist.shard_tensor keeps this rank's slice; capture joins them). No endpoints: nothing of
    # Paddle's own communication is started.
    env = dict(
        os.environ,
        PADDLE_XLA_COORDINATOR=coordinator,
        PADDLE_XLA_NUM_PROCESSES=str(nproc),
        PADDLE_XLA_PROCESS_ID=str(rank),
        PADDLE_TRAINER_ID=str(rank),
        PADDLE_TRAINERS_NUM=str(nproc),
        PADDLE_RANK_IN_NODE=str(rank),
    )
    if cpu_devices:
        flags = [f for f in env.get("XLA_FLAGS", "").split() if "xla_force_host_platform_device_count" not in f]
        env["XLA_FLAGS"] = " ".join(flags + [f"--xla_force_host_platform_device_count={cpu_devices}"])
        env.setdefault("JAX_PLATFORMS", "cpu")
    return env


def launch(
    script: str,
    args: Sequence[str] = (),
    nproc: int = 2,
    cpu_devices: int | None = None,
    port: int | None = None,
    timeout: float | None = None,
) -> int:
    """Run `script` in `nproc` processes on this host; the first failing exit code, else 0. When one
    process fails the others are stopped, since they would wait for it forever."""
    coordinator = f"127.0.0.1:{port or _free_port()}"
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "paddle_xla.parallel.launch", script, *args],
            env=child_env(rank, nproc, coordinator, cpu_devices),
        )
        for rank in range(nproc)
    ]
    deadline = None if timeout is None else time.monotonic() + timeout
    code = 0
    try:
        while any(p.poll() is None for p in procs):
            failed = [p.returncode for p in procs if p.returncode not in (None, 0)]
            if failed or (deadline is not None and time.monotonic() > deadline):
                code = failed[0] if failed else 124
                break
            time.sleep(0.2)
    finally:
        for p in procs:
            if p.poll() is None:
                p.terminate()
        for p in procs:
            p.wait()
    return code or next((p.returncode for p in procs if p.returncode), 0)


def bootstrap(argv: list[str]) -> None:
    """`python -m paddle_xla.parallel.launch script.py args...`: join, then run the script as __main__."""
    initialize()
    script, *rest = argv
    sys.argv = [script, *rest]
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    bootstrap(sys.argv[1:])
