"""Which group each launcher's environment describes (no processes started: group.detect reads a mapping)."""

import pytest

from paddle_xla.errors import DistributedError
from paddle_xla.parallel.group import _first_host, detect

PADDLE = {
    "PADDLE_MASTER": "10.0.0.1:52694",
    "PADDLE_TRAINER_ENDPOINTS": "10.0.0.1:52695,10.0.0.2:40001",
    "PADDLE_TRAINER_ID": "1",
    "PADDLE_TRAINERS_NUM": "2",
    "PADDLE_NNODES": "2",
}


def test_paddle_launch_takes_a_port_past_paddles_own_block():
    g = detect(PADDLE)
    assert (g.launcher, g.num_processes, g.process_id) == ("paddle.distributed.launch", 2, 1)
    # NOTE: master 52694, then one endpoint per rank: 52695, 52696; the coordinator is past them
    assert g.coordinator == "10.0.0.1:52697"
    assert "PADDLE_MASTER=10.0.0.1:52694" in g.describe() and "PADDLE_TRAINER_ID=1" in g.describe()
    assert detect({**PADDLE, "PADDLE_XLA_COORDINATOR_PORT": "6000"}).coordinator == "10.0.0.1:6000"


def test_paddle_launch_without_master_uses_the_first_endpoint():
    env = {k: v for k, v in PADDLE.items() if k != "PADDLE_MASTER"}
    assert detect(env).host == "10.0.0.1"


def test_paddle_xla_variables_come_first():
    env = {**PADDLE, "PADDLE_XLA_COORDINATOR": "h:1234", "PADDLE_XLA_NUM_PROCESSES": "2", "PADDLE_XLA_PROCESS_ID": "0"}
    g = detect(env)
    assert (g.coordinator, g.process_id) == ("h:1234", 0) and g.launcher.startswith("PADDLE_XLA_")


def test_one_rank_or_off_is_a_lone_process():
    assert detect({"PADDLE_TRAINERS_NUM": "1", "PADDLE_TRAINER_ID": "0"}) is None
    assert detect({**PADDLE, "PADDLE_XLA_DISTRIBUTED": "off"}) is None
    assert detect({}) is None
    # NOTE: an sbatch script's shell (no job step) is one process, whatever SLURM_NTASKS says
    assert detect({"SLURM_JOB_ID": "7", "SLURM_NTASKS": "4", "SLURM_PROCID": "0"}) is None


def test_slurm_uses_jaxs_port_rule_and_the_first_node():
    g = detect(
        {
            "SLURM_JOB_ID": "123456",
            "SLURM_STEP_NODELIST": "gpu[003-005,9],cpu1",
            "SLURM_NTASKS": "8",
            "SLURM_PROCID": "5",
            "SLURM_LOCALID": "1",
        }
    )
    assert (g.num_processes, g.process_id, g.coordinator) == (8, 5, f"gpu003:{123456 % 4096 + 61440}")


@pytest.mark.parametrize("nodes,first", [("node1", "node1"), ("a,b", "a"), ("n[10-12]", "n10"), ("x[7,9-10],y3", "x7")])
def test_slurm_node_lists(nodes, first):
    assert _first_host(nodes) == first


def test_open_mpi_reads_mpiruns_host_from_its_uri():
    g = detect(
        {
            "OMPI_COMM_WORLD_SIZE": "4",
            "OMPI_COMM_WORLD_RANK": "3",
            "OMPI_MCA_orte_hnp_uri": "1531576320.0;tcp://10.96.0.1,10.148.0.1:34911",
        }
    )
    assert (g.num_processes, g.process_id) == (4, 3)
    assert g.coordinator == f"10.96.0.1:{1531576320 // 4096 % 4096 + 61440}"


def test_torchrun_and_pytorchjob_variables():
    g = detect({"MASTER_ADDR": "trainer-0", "MASTER_PORT": "23456", "WORLD_SIZE": "4", "RANK": "2"})
    assert (g.coordinator, g.num_processes, g.process_id) == ("trainer-0:23456", 4, 2)


def test_gke_tpu_slice_leaves_the_coordinator_to_jax():
    g = detect({"TPU_WORKER_HOSTNAMES": "w0,w1,w2,w3", "TPU_WORKER_ID": "1"})
    assert (g.num_processes, g.process_id, g.coordinator) == (4, 1, None)


@pytest.mark.parametrize(
    "env,words",
    [
        ({**PADDLE, "PADDLE_TRAINER_ID": "2"}, "rank 2 of 2"),
        ({**PADDLE, "PADDLE_TRAINER_ID": "one"}, "PADDLE_TRAINER_ID='one' is not a whole number"),
        ({"PADDLE_TRAINERS_NUM": "2", "PADDLE_TRAINER_ID": "0"}, "neither PADDLE_MASTER nor PADDLE_TRAINER_ENDPOINTS"),
        ({"WORLD_SIZE": "2", "MASTER_ADDR": "h"}, "has no RANK"),
        ({"OMPI_COMM_WORLD_SIZE": "2", "OMPI_COMM_WORLD_RANK": "0"}, "OMPI_MCA_orte_hnp_uri"),
    ],
)
def test_bad_variables_are_named(env, words):
    with pytest.raises(DistributedError, match=words.replace("(", r"\(")):
        detect(env)
