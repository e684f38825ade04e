"""Launchers as users start them: Paddle's own (one node, and two "nodes" on 127.0.0.1), SLURM's
environment, a coordinator nobody answers, and a rank killed mid-training. Each run is two processes
x 8 virtual CPU devices, compared with one process over the same global batches."""

import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from xla_flags import child_env

import paddle_xla as px
from parallel.helpers import assert_weights_close, train

HERE = Path(__file__).parent
SCRIPT = str(HERE / "launch_script.py")
LAUNCHER_VARS = ("PADDLE_", "SLURM_", "OMPI_", "MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK", "TPU_WORKER")


def clean_env(devices: int = 8, **extra) -> dict:
    """This environment without any launcher's variables (they would override the launcher's own), with
    `devices` virtual CPU devices per process."""
    env = {k: v for k, v in child_env(devices).items() if not k.startswith(LAUNCHER_VARS)}
    env.update(JAX_PLATFORMS="cpu", **extra)
    return env


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def reference(groups=2):
    losses, weights, _ = train("mlp", px.Strategy(micro_batches=groups), steps=4)
    return losses, weights


def check_curve(path: Path, groups=2):
    got = json.loads(path.read_text())
    losses, weights = reference(groups)
    np.testing.assert_allclose(got["losses"], losses, rtol=1e-5)
    assert_weights_close({k: np.asarray(v, np.float32) for k, v in got["weights"].items()}, weights)


def logs(folder: Path) -> str:
    return "\n".join(f"--- {p.name}\n{p.read_text()[-3000:]}" for p in sorted(folder.glob("workerlog.*")))


@pytest.mark.parametrize("layout", ["tensor", "annotated"])
def test_paddle_launch_one_node(tmp_path, layout):
    """ "annotated": a script that splits its model with dist.shard_tensor over both ranks, each process
    holding its rank's slices, as written for this launcher."""
    out = tmp_path / "curve.json"
    cmd = [
        sys.executable,
        "-m",
        "paddle.distributed.launch",
        "--nproc_per_node",
        "2",
        "--log_dir",
        str(tmp_path / "log"),
        SCRIPT,
        str(out),
        layout,
    ]
    run = subprocess.run(cmd, env=clean_env(), capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-2000:] + logs(tmp_path / "log")
    assert "joined as process 1 of 2 (paddle.distributed.launch)" in (tmp_path / "log" / "workerlog.1").read_text()
    check_curve(out)


def test_paddle_launch_two_nodes(tmp_path):
    """`--nnodes 2 --master 127.0.0.1:PORT`, one launcher per "node", one process each."""
    out, master = tmp_path / "curve.json", f"127.0.0.1:{free_port()}"
    nodes = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "paddle.distributed.launch",
                "--nnodes",
                "2",
                "--master",
                master,
                "--nproc_per_node",
                "1",
                "--log_dir",
                str(tmp_path / f"node{i}"),
                SCRIPT,
                str(out),
                "tensor",
            ],
            env=clean_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for i in range(2)
    ]
    try:
        outputs = [n.communicate(timeout=600)[0] for n in nodes]
    finally:
        for n in nodes:
            n.kill()
    assert [n.returncode for n in nodes] == [0, 0], "\n".join(o[-2000:] for o in outputs) + "".join(
        logs(tmp_path / f"node{i}") for i in range(2)
    )
    check_curve(out)


def start(script_args, env_of, n=2):
    return [
        subprocess.Popen(
            [sys.executable, *script_args], env=env_of(r), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        for r in range(n)
    ]


def finish(procs, timeout=600):
    try:
        return [p.communicate(timeout=timeout)[0] for p in procs]
    finally:
        for p in procs:
            p.kill()


def test_slurm_environment(tmp_path):
    """The variables `srun -n 2` sets, and the coordinator port JAX's SLURM rule derives from the job id."""
    port = free_port()
    job = 4096 * 7 + port - 61440 if port >= 61440 else None
    extra = {} if job is not None else {"PADDLE_XLA_COORDINATOR_PORT": str(port)}
    job = job if job is not None else 4242
    out = tmp_path / "curve.json"
    procs = start(
        [SCRIPT, str(out), "tensor"],
        lambda r: clean_env(
            SLURM_JOB_ID=str(job),
            SLURM_STEP_NODELIST="localhost",
            SLURM_NTASKS="2",
            SLURM_PROCID=str(r),
            SLURM_LOCALID=str(r),
            **extra,
        ),
    )
    outputs = finish(procs)
    assert [p.returncode for p in procs] == [0, 0], "\n".join(o[-2000:] for o in outputs)
    assert "joined as process 0 of 2 (SLURM (srun))" in outputs[0]
    check_curve(out)


def test_unreachable_coordinator_stops_in_bounded_time():
    """Rank 1 of 2 whose process 0 never comes: an error naming the variables and the fix, not training alone."""
    env = clean_env(
        PADDLE_TRAINERS_NUM="2",
        PADDLE_TRAINER_ID="1",
        PADDLE_MASTER=f"127.0.0.1:{free_port()}",
        PADDLE_XLA_JOIN_TIMEOUT="3",
    )
    t = time.monotonic()
    run = subprocess.run(
        [sys.executable, "-c", "import paddle_xla"], env=env, capture_output=True, text=True, timeout=120
    )
    took = time.monotonic() - t
    assert run.returncode != 0 and took < 60
    err = run.stderr
    assert "DistributedError" in err and "PADDLE_MASTER=127.0.0.1" in err and "PADDLE_TRAINER_ID=1" in err
    assert "will not train alone" in err and "PADDLE_XLA_JOIN_TIMEOUT" in err and "did not answer within 3 s" in err


def test_missing_rank_stops_process_zero_in_bounded_time():
    """Process 0 of 2 whose rank 1 never comes: JAX would abort after 300 s; paddle_xla stops with a reason."""
    env = clean_env(
        PADDLE_XLA_COORDINATOR=f"127.0.0.1:{free_port()}",
        PADDLE_XLA_NUM_PROCESSES="2",
        PADDLE_XLA_PROCESS_ID="0",
        PADDLE_XLA_JOIN_TIMEOUT="3",
    )
    t = time.monotonic()
    run = subprocess.run(
        [sys.executable, "-c", "import paddle_xla; print('trained alone')"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 1 and time.monotonic() - t < 60
    assert "trained alone" not in run.stdout
    assert "not every process joined the group within 3 s" in run.stderr


def test_lost_rank_stops_the_job_and_the_checkpoint_resumes(tmp_path):
    coordinator = f"127.0.0.1:{free_port()}"
    ckpt, out = tmp_path / "state.safetensors", tmp_path / "losses"

    def env_of(r):
        return clean_env(PADDLE_XLA_COORDINATOR=coordinator, PADDLE_XLA_NUM_PROCESSES="2", PADDLE_XLA_PROCESS_ID=str(r))

    script = str(HERE / "lost_rank_script.py")
    procs = start([script, str(ckpt), str(out), "5", "1"], env_of)
    deadline = time.monotonic() + 600
    while procs[0].poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    stopped = time.time()
    outputs = finish(procs)
    assert procs[1].returncode == -9
    # NOTE: within seconds of the loss, where JAX alone waits for its heartbeat timeout or shutdown barrier
    took = stopped - float(Path(f"{out}.killed").read_text())
    print(f"rank 0 stopped {took:.2f} s after rank 1 was killed")
    assert took < 10
    assert procs[0].returncode == 1, outputs[0][-3000:]
    assert "rank 1 of 2 (on " in outputs[0] and "was lost" in outputs[0], outputs[0][-3000:]
    first = json.loads(Path(f"{out}.0").read_text())
    # NOTE: rank 0 may be stopped while it writes step 1's checkpoint; then step 0's is the last whole one.
    assert sorted(int(k) for k in first) in ([0], [0, 1])
    coordinator = f"127.0.0.1:{free_port()}"
    procs = start([script, str(ckpt), str(out), "5", "-1"], env_of)
    outputs = finish(procs)
    assert [p.returncode for p in procs] == [0, 0], outputs[0][-3000:]
    resumed = json.loads(Path(f"{out}.0").read_text())
    losses, _, _ = train("mlp", px.Strategy(micro_batches=16), steps=5)
    got = {**first, **resumed}
    np.testing.assert_allclose([got[str(i)] for i in range(5)], losses, rtol=1e-5)


def test_distributed_batch_sampler_shares_equal_one_process(tmp_path):
    """Each rank loads its share through paddle.io.DistributedBatchSampler (by hand and in Model.fit); the
    losses are one process's over the same global batches (DistributedBatchSampler with one rank)."""
    out = tmp_path / "curves.json"
    cmd = [
        sys.executable,
        "-m",
        "paddle_xla.cli",
        "launch",
        "--nproc",
        "2",
        "--cpu-devices",
        "8",
        str(HERE / "sampler_script.py"),
        str(out),
        "8",
    ]
    run = subprocess.run(cmd, env=clean_env(), capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    got = json.loads(out.read_text())
    from parallel import sampler_script

    want = sampler_script.main(str(tmp_path / "one.json"), 16, px.Strategy(micro_batches=16))
    assert len(got["by_hand"]) == len(want["by_hand"]) == 6 and len(got["fit"]) == 6
    np.testing.assert_allclose(got["by_hand"], want["by_hand"], rtol=1e-5)
    np.testing.assert_allclose(got["fit"], want["fit"], rtol=1e-5)
