"""Which process group this process belongs to, read from the environment its launcher set.

A multi-process job is started by someone else: `paddle-xla launch`, Paddle's own
`python -m paddle.distributed.launch`, SLURM's `srun`, Open MPI's `mpirun`, torchrun or a Kubernetes
PyTorchJob/JobSet. Each writes the same three facts (how many processes, which one this is, where
process 0 is) under its own names. `detect` reads them, in that order of precedence, into one
`Group`; `join.py` joins it. Nothing here imports jax.

Paddle's launcher gives every rank PADDLE_MASTER, an address of node 0 that Paddle's own TCP store
binds when the script calls paddle.distributed.init_parallel_env(). JAX's coordinator therefore takes
another port there, the same on every rank without talking: the one just past the block Paddle's
launcher took for itself (the master, then one endpoint per rank, in ascending order from a free
port), unless PADDLE_XLA_COORDINATOR_PORT names one."""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from ..errors import DistributedError

OFF = ("0", "off", "false", "no")


@dataclass(frozen=True)
class Group:
    launcher: str  # who set the environment, for messages
    num_processes: int
    process_id: int
    coordinator: str | None  # host:port of process 0; None: JAX's own cluster detection finds it
    variables: Mapping[str, str] = field(default_factory=dict)  # what it was read from, for messages
    local_device_ids: tuple[int, ...] | None = None

    @property
    def host(self) -> str:
        assert self.coordinator is not None  # NOTE: asked only where one was given
        return self.coordinator.rsplit(":", 1)[0].strip("[]")

    @property
    def port(self) -> int:
        assert self.coordinator is not None
        return int(self.coordinator.rsplit(":", 1)[1])

    def describe(self) -> str:
        names = ", ".join(f"{k}={v}" for k, v in self.variables.items())
        return (
            f"process {self.process_id} of {self.num_processes} (from {self.launcher}: {names}; "
            f"coordinator {self.coordinator or 'found by jax.distributed'})"
        )


def detect(env: Mapping[str, str] = os.environ) -> Group | None:
    """The group this environment describes, or None for a lone process (also when several
    launchers' variables say 1 process, or PADDLE_XLA_DISTRIBUTED=off)."""
    if env.get("PADDLE_XLA_DISTRIBUTED", "").lower() in OFF:
        return None
    for read in READERS:
        group = read(env)
        if group is not None:
            _check(group)
            return group if group.num_processes > 1 else None
    return None


def _int(env: Mapping[str, str], name: str, launcher: str) -> int:
    try:
        return int(env[name])
    except KeyError:
        raise DistributedError(
            f"{launcher}'s environment has no {name}; every process of a job needs it "
            "(start the script through the launcher, or set it on each process)."
        ) from None
    except ValueError:
        raise DistributedError(f"{name}={env[name]!r} is not a whole number (set by {launcher}).") from None


def _first(env: Mapping[str, str], *names: str) -> str | None:
    return next((n for n in names if env.get(n)), None)


def _check(group: Group) -> None:
    if not 0 <= group.process_id < group.num_processes:
        raise DistributedError(
            f"This process says it is rank {group.process_id} of {group.num_processes} "
            f"({group.describe()}); a rank runs from 0 to {group.num_processes - 1}."
        )
    if group.coordinator is not None and ":" not in group.coordinator:
        raise DistributedError(
            f"The coordinator address {group.coordinator!r} has no port ({group.describe()}); write it as host:port."
        )


def _override_port(env: Mapping[str, str], host: str, port: int) -> str:
    chosen = env.get("PADDLE_XLA_COORDINATOR_PORT")
    return f"{host}:{int(chosen) if chosen else port}"


def _paddle_xla(env):
    if not env.get("PADDLE_XLA_COORDINATOR"):
        return None
    launcher = "PADDLE_XLA_* (paddle-xla launch)"
    names = ("PADDLE_XLA_COORDINATOR", "PADDLE_XLA_NUM_PROCESSES", "PADDLE_XLA_PROCESS_ID")
    return Group(
        launcher,
        _int(env, names[1], launcher),
        _int(env, names[2], launcher),
        env[names[0]],
        {n: env.get(n, "") for n in names},
    )


def _paddle_launch(env):
    count = _first(env, "PADDLE_TRAINERS_NUM", "PADDLE_GLOBAL_SIZE")
    if count is None:
        return None
    launcher = "paddle.distributed.launch"
    n = _int(env, count, launcher)
    if n <= 1:
        return Group(launcher, n, 0, None)
    rank = _first(env, "PADDLE_TRAINER_ID", "PADDLE_GLOBAL_RANK") or "PADDLE_TRAINER_ID"
    endpoints = [e for e in env.get("PADDLE_TRAINER_ENDPOINTS", "").split(",") if e]
    master = env.get("PADDLE_MASTER") or (endpoints[0] if endpoints else None)
    if master is None:
        raise DistributedError(
            f"{count}={n} says this is one of {n} processes, but neither PADDLE_MASTER nor "
            "PADDLE_TRAINER_ENDPOINTS says where process 0 is. Start the script with "
            "`python -m paddle.distributed.launch`, or set PADDLE_MASTER=host:port on every rank."
        )
    host, port = master.rsplit(":", 1)
    # NOTE: past Paddle's own block on node 0 (master, then one endpoint per rank of that node)
    port = int(port) + n + 1
    if port > 65535:
        port -= 2 * (n + 1)
    read = ("PADDLE_MASTER", "PADDLE_TRAINER_ENDPOINTS", rank, count, "PADDLE_NNODES")
    return Group(
        launcher,
        n,
        _int(env, rank, launcher),
        _override_port(env, host, port),
        {k: env[k] for k in read if k in env},
        _selected_devices(env),
    )


def _selected_devices(env) -> tuple[int, ...] | None:
    """The accelerator Paddle's launcher gave this rank (one process per GPU); None: all of them."""
    chosen = _first(env, "FLAGS_selected_gpus", "FLAGS_selected_accelerators")
    if chosen is None or env.get("JAX_PLATFORMS", "").startswith("cpu"):
        return None
    return tuple(int(d) for d in env[chosen].split(","))


def _torchrun(env):
    """torchrun, and Kubernetes' PyTorchJob (Kubeflow) and JobSet recipes that set the same names."""
    if not (env.get("MASTER_ADDR") and env.get("WORLD_SIZE")):
        return None
    launcher = "torchrun / PyTorchJob"
    n = _int(env, "WORLD_SIZE", launcher)
    read = ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK")
    port = int(env.get("MASTER_PORT") or 29500)
    return Group(
        launcher,
        n,
        _int(env, "RANK", launcher) if n > 1 else 0,
        _override_port(env, env["MASTER_ADDR"], port),
        {k: env[k] for k in read if k in env},
    )


def _slurm(env):
    # NOTE: SLURM_STEP_NODELIST exists only inside `srun` (a job step), not in an sbatch script's shell,
    # which is one process whatever SLURM_NTASKS says.
    if not (env.get("SLURM_JOB_ID") and env.get("SLURM_STEP_NODELIST") and env.get("SLURM_NTASKS")):
        return None
    launcher = "SLURM (srun)"
    n = _int(env, "SLURM_NTASKS", launcher)
    if n <= 1:
        return Group(launcher, n, 0, None)
    nodes = env["SLURM_STEP_NODELIST"]
    # NOTE: JAX's own rule for the port (derived from the job id), so `jax.distributed.initialize()`
    # in another library of the same job agrees
    port = int(env["SLURM_JOB_ID"]) % 4096 + 61440
    read = ("SLURM_JOB_ID", "SLURM_STEP_NODELIST", "SLURM_NTASKS", "SLURM_PROCID")
    return Group(
        launcher,
        n,
        _int(env, "SLURM_PROCID", launcher),
        _override_port(env, _first_host(nodes), port),
        {k: env[k] for k in read if k in env},
    )


def _first_host(nodelist: str) -> str:
    """The first host of a SLURM node list: "gpu[003-005,9],cpu1" -> "gpu003"."""
    match = re.match(r"([^,\[]*)(?:\[([^\]]*)\])?", nodelist)
    assert match is not None  # NOTE: the pattern matches any string (maybe empty)
    prefix, ranges = match.groups()
    return prefix if ranges is None else prefix + re.split(r"[,-]", ranges)[0]


def _open_mpi(env):
    if not env.get("OMPI_COMM_WORLD_SIZE"):
        return None
    launcher = "Open MPI (mpirun)"
    n = _int(env, "OMPI_COMM_WORLD_SIZE", launcher)
    if n <= 1:
        return Group(launcher, n, 0, None)
    read = ("OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "OMPI_MCA_orte_hnp_uri")
    return Group(
        launcher,
        n,
        _int(env, "OMPI_COMM_WORLD_RANK", launcher),
        _ompi_coordinator(env),
        {k: env[k] for k in read if k in env},
    )


def _ompi_coordinator(env) -> str:
    """mpirun's own host, from its runtime's URI ("1531576320.0;tcp://10.96.0.1,10.148.0.1:34911"), and
    JAX's port rule for Open MPI (from the job id), so that both agree."""
    uri = env.get("OMPI_MCA_orte_hnp_uri") or env.get("PMIX_SERVER_URI2", "")
    found = re.search(r"tcp://(.+?)[,:]|tcp6://\[(.+?)[,\]]", uri)
    if found is None:
        raise DistributedError(
            f"OMPI_COMM_WORLD_SIZE={env['OMPI_COMM_WORLD_SIZE']} says this is one of several "
            "processes, but OMPI_MCA_orte_hnp_uri does not say where mpirun runs. Set "
            "PADDLE_XLA_COORDINATOR=host:port on every process."
        )
    port = int(uri.split(".", 1)[0]) // 4096 % 4096 + 61440 if uri.split(".", 1)[0].isdigit() else 61440
    return _override_port(env, next(g for g in found.groups() if g), port)


def _tpu_pod(env):
    """A multi-host Cloud TPU slice on GKE names its workers; JAX's detection finds process 0 itself."""
    hosts = [h for h in env.get("TPU_WORKER_HOSTNAMES", "").split(",") if h]
    if len(hosts) <= 1:
        return None
    launcher = "Cloud TPU (GKE)"
    return Group(
        launcher,
        len(hosts),
        _int(env, "TPU_WORKER_ID", launcher),
        None,
        {k: env[k] for k in ("TPU_WORKER_HOSTNAMES", "TPU_WORKER_ID") if k in env},
    )


READERS: tuple[Callable[[Mapping[str, str]], Group | None], ...] = (
    _paddle_xla,
    _paddle_launch,
    _slurm,
    _open_mpi,
    _torchrun,
    _tpu_pod,
)


@contextlib.contextmanager
def paddle_sees_one_rank():
    """Paddle's own set-up code (paddle.Model's adapter, PaddleFormers' TrainingArguments and Trainer) starts
    Paddle's collective runtime and wraps models for it when PADDLE_TRAINERS_NUM says there are several
    ranks. Under paddle_xla the step is XLA's and the processes are already joined, so while that code runs
    Paddle is shown one rank."""
    saved = os.environ.pop("PADDLE_TRAINERS_NUM", None)
    try:
        yield
    finally:
        if saved is not None:
            os.environ["PADDLE_TRAINERS_NUM"] = saved
