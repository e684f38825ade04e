"""Joining the process group the environment names, within a bounded time, or stopping with a reason.

`import paddle_xla` calls `join_from_environment` once, before the script can start a JAX backend
(jax.distributed must come first). A process whose environment names several ranks either joins
them or stops: it never trains alone on its own devices, which would look like training and give a
model of one rank's data.

Why each check exists: jax.distributed.initialize, left alone, waits 300 s for a coordinator that
never comes and then aborts the process from C++ (SIGABRT, a glog dump, no Python exception). So
ranks other than 0 first wait for the coordinator's port themselves (a DistributedError on time
out), process 0 first checks that its port is free, and a watchdog ends a join that still hangs
(some rank never came) with the same kind of message, before JAX's own deadline."""

from __future__ import annotations

import os
import socket
import sys
import threading
import time

from ..errors import DistributedError
from .group import Group, detect

JOINED = "PADDLE_XLA_JOINED_PID"  # set once joined: a forked or spawned child (a data loader's) must not join again
DEFAULT_TIMEOUT_S = 300.0  # as jax.distributed's and Paddle's own rendezvous


def join_from_environment(env=os.environ) -> Group | None:
    """Join the group the environment describes (once per process); None for a lone process."""
    if env.get(JOINED):
        return None
    auto = env.get("PADDLE_XLA_DISTRIBUTED", "").lower() == "auto"
    group = detect(env)
    if group is None and not auto:
        return None
    join(group, _timeout(env))
    os.environ[JOINED] = str(os.getpid())
    return group


def _timeout(env) -> float:
    value = env.get("PADDLE_XLA_JOIN_TIMEOUT")
    try:
        return float(value) if value else DEFAULT_TIMEOUT_S
    except ValueError:
        raise DistributedError(f"PADDLE_XLA_JOIN_TIMEOUT={value!r} is not a number of seconds.") from None


def join(group: Group | None, timeout: float) -> None:
    """jax.distributed.initialize for `group` (None: JAX's own cluster detection), then the liveness
    watch; a DistributedError, or this process's end with a message, when it cannot join in time."""
    import jax

    deadline = time.monotonic() + timeout
    if group is not None and group.coordinator is not None:
        if group.process_id == 0:
            _check_port_free(group)
        else:
            _wait_for_coordinator(group, deadline, timeout)
    if os.environ.get("JAX_PLATFORMS", "cpu").startswith("cpu"):
        # NOTE: without gloo, CPU devices of different processes cannot run collectives.
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
    watchdog = threading.Timer(max(deadline - time.monotonic(), 1.0), _give_up, (group, timeout))
    watchdog.daemon = True
    watchdog.start()
    try:
        _initialize(jax, group, int(max(deadline - time.monotonic(), 1.0)) + 60)
    finally:
        watchdog.cancel()
    from .liveness import watch

    watch(group)
    print(
        f"paddle_xla: joined as process {jax.process_index()} of {jax.process_count()} "
        f"({group.launcher if group else 'jax.distributed auto-detection'})",
        file=sys.stderr,
        flush=True,
    )


def _initialize(jax, group: Group | None, jax_timeout: int) -> None:
    if group is None:
        jax.distributed.initialize(initialization_timeout=jax_timeout)
        return
    jax.distributed.initialize(
        coordinator_address=group.coordinator,
        num_processes=group.num_processes,
        process_id=group.process_id,
        local_device_ids=list(group.local_device_ids) if group.local_device_ids else None,
        # NOTE: the values are explicit; JAX's own detection would read another launcher's variables
        cluster_detection_method="deactivate" if group.coordinator else None,
        initialization_timeout=jax_timeout,
    )


def _check_port_free(group: Group) -> None:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("", group.port))
        except OSError as e:
            raise DistributedError(
                f"This is {group.describe()}. Process 0 hosts the coordinator on port {group.port}, but that "
                f"port is taken on this host ({e.strerror}). Set PADDLE_XLA_COORDINATOR_PORT to a free port, the "
                "same on every process."
            ) from None


def _wait_for_coordinator(group: Group, deadline: float, timeout: float) -> None:
    while True:
        try:
            with socket.create_connection((group.host, group.port), timeout=1.0):
                return
        except OSError:
            pass
        if time.monotonic() >= deadline:
            raise DistributedError(
                _not_joined(group, timeout, f"process 0's coordinator at {group.coordinator} did not answer")
            )
        time.sleep(0.2)


def _not_joined(group: Group | None, timeout: float, what: str) -> str:
    who = group.describe() if group else "a process of a job found by jax.distributed's cluster detection"
    n = group.num_processes if group else "its"
    return (
        f"This is {who}, but {what} within {timeout:.0f} s, so it cannot join the other processes and "
        f"will not train alone on its own devices. Fix: start all {n} processes of the job (the same launcher "
        f"on every node), check that the coordinator host is reachable from here and its port open, or set "
        f"PADDLE_XLA_COORDINATOR_PORT if another program holds the port. PADDLE_XLA_JOIN_TIMEOUT sets the "
        f"wait; PADDLE_XLA_DISTRIBUTED=off runs this process alone on purpose."
    )


def _give_up(group: Group | None, timeout: float) -> None:
    """The watchdog: JAX is still waiting for some rank; say why and end this process."""
    message = _not_joined(group, timeout, "not every process joined the group")
    print(f"paddle_xla: DistributedError: {message}", file=sys.stderr, flush=True)
    os._exit(1)
