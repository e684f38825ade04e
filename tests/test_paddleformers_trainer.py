"""PaddleFormers' own Trainer against paddle_xla's (paddle_xla.integrations.paddleformers), same arguments,
same data, same tiny Llama: the logged loss curve, evaluation, final weights and checkpoints that resume in
either. PaddleFormers' Trainer runs in Paddle eager on this CPU host, so it is the reference."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import paddle
import pytest
from generation.paddleformers import module
from generation.test_generator import TINY

import paddle_xla as px
from paddle_xla.errors import CheckpointError, FeedError, StrategyError, TrainingError

trainer_lib = module("trainer")
llama = module("transformers.llama")
from paddle_xla.integrations import paddleformers as pxf  # noqa: E402  (PaddleFormers is on the path now)

STEPS = 20
BASE = dict(
    max_steps=STEPS,
    per_device_train_batch_size=2,
    learning_rate=1e-3,
    warmup_steps=3,
    logging_steps=1,
    max_grad_norm=1.0,
    weight_decay=0.01,
    save_steps=10,
    seed=0,
    report_to=["none"],
    disable_tqdm=True,
    amp_master_grad=False,
    dataloader_shuffle=False,
    save_to_hf=False,
    # NOTE: PaddleFormers' default flex checkpoints need Paddle's fleet to load, even on one CPU
    save_checkpoint_format=None,
    load_checkpoint_format=None,
)


class Tokens(paddle.io.Dataset):
    """Random token rows; labels are the next token, with a prompt of 0-3 tokens that carries no loss."""

    def __init__(self, rows=64, seq=16, seed=0):
        self.ids = np.random.default_rng(seed).integers(3, TINY["vocab_size"], (rows, seq)).astype("int64")

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        ids = self.ids[i]
        labels = np.roll(ids, -1)
        labels[-1] = -100
        labels[: i % 4] = -100
        return {"input_ids": ids, "labels": labels}


class Logged(trainer_lib.TrainerCallback):
    def __init__(self):
        self.losses, self.evals = [], []

    def on_log(self, args, state, control, logs=None, **kw):
        if logs and "loss" in logs:
            self.losses.append(logs["loss"])
        if logs and "eval_loss" in logs:
            self.evals.append(logs["eval_loss"])


def _llama():
    return llama.LlamaForCausalLM(llama.LlamaConfig(**TINY))


def _train(kind, out, resume=None, eval_dataset=None, dataset=None, build=_llama, **extra):
    """One Trainer run in a fresh name scope (parameter names as in a fresh process, so that checkpoints
    load across runs) on the model build() makes after paddle.seed(1) -> (logged losses, eval losses, final
    weights, trainer)."""
    with paddle.utils.unique_name.guard():
        paddle.seed(1)
        net = build()
        args_cls, trainer_cls = (
            (pxf.TrainingArguments, pxf.Trainer)
            if kind == "px"
            else (trainer_lib.TrainingArguments, trainer_lib.Trainer)
        )
        logged = Logged()
        trainer = trainer_cls(
            model=net,
            args=args_cls(output_dir=str(out), **{**BASE, **extra}),
            train_dataset=dataset or Tokens(),
            eval_dataset=eval_dataset,
            callbacks=[logged],
        )
        trainer.train(resume_from_checkpoint=resume)
    return logged.losses, logged.evals, {k: v.numpy() for k, v in net.state_dict().items()}, trainer


def _same_weights(got, want, tol=2e-5):
    """Each weight's largest difference, relative to its largest value (AdamW's first steps move every element
    by about lr whatever its gradient, so one element's rounding may show more than the tensor's)."""
    for k, w in want.items():
        assert np.max(np.abs(got[k] - w)) <= tol * np.max(np.abs(w)), k


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """PaddleFormers' Trainer: 20 steps, evaluating at steps 10 and 20, saving at 10 and 20."""
    return _train(
        "pf", tmp_path_factory.mktemp("pf"), eval_dataset=Tokens(8, seed=1), eval_steps=10, evaluation_strategy="steps"
    )


def test_loss_curve_evaluation_and_weights_equal_paddleformers(reference, tmp_path):
    losses, evals, weights, trainer = _train(
        "px", tmp_path, eval_dataset=Tokens(8, seed=1), eval_steps=10, evaluation_strategy="steps"
    )
    assert trainer.px_strategy == px.Strategy()
    assert len(losses) == STEPS and len(evals) == 2
    # NOTE: PaddleFormers logs losses rounded to 8 digits
    np.testing.assert_allclose(losses, reference[0], atol=3e-6)
    np.testing.assert_allclose(evals, reference[1], atol=3e-6)
    _same_weights(weights, reference[2])
    # NOTE: PaddleFormers' layout, written by its own save code from the synced model and optimizer
    for name in ("model_state.pdparams", "optimizer.pdopt", "scheduler.pdparams", "trainer_state.bin"):
        assert (tmp_path / "checkpoint-10" / name).is_file(), name


@pytest.mark.parametrize("first,second", [("pf", "px"), ("px", "pf")])
def test_checkpoints_resume_in_either_trainer(reference, tmp_path, first, second):
    _train(first, tmp_path)
    losses, _, weights, _ = _train(second, tmp_path, resume=str(tmp_path / "checkpoint-10"))
    np.testing.assert_allclose(losses, reference[0][10:], atol=3e-6)
    _same_weights(weights, reference[2])


def test_gradient_accumulation_equals_paddleformers(tmp_path, monkeypatch):
    got = _train("px", tmp_path / "px", gradient_accumulation_steps=2, max_steps=8)
    # NOTE: PaddleFormers synchronizes the device before scaling accumulated gradients, which Paddle's CPU
    # build refuses (paddle_xla's Trainer skips it itself, above); the reference needs it skipped too.
    monkeypatch.setattr(paddle.device, "synchronize", lambda *a, **k: None)
    want = _train("pf", tmp_path / "pf", gradient_accumulation_steps=2, max_steps=8)
    assert got[3].px_strategy == px.Strategy(micro_batches=2, loss_reduction="mean")
    np.testing.assert_allclose(got[0], want[0], atol=3e-6)
    _same_weights(got[2], want[2])


def test_parallel_flags_equal_paddleformers_data_parallel(tmp_path, monkeypatch):
    """tensor x pipeline x sharding (PaddleFormers' default stage1) over 8 of the 16 virtual devices, in one
    process. The two replicas are PaddleFormers' two data-parallel ranks: each reads its own 1-row batches
    (rank r the rows r, r + 2, ...), 2 micro-batches per step, and the 4 token means are averaged: what
    PaddleFormers computes in one process with gradient_accumulation_steps=4 over 1-row batches."""
    monkeypatch.setattr(paddle.device, "synchronize", lambda *a, **k: None)
    want = _train("pf", tmp_path / "pf", per_device_train_batch_size=1, gradient_accumulation_steps=4, max_steps=5)
    got = _train(
        "px",
        tmp_path / "px",
        max_steps=5,
        per_device_train_batch_size=1,
        gradient_accumulation_steps=2,
        tensor_model_parallel_size=2,
        pipeline_model_parallel_size=2,
        sharding_parallel_size=2,
    )
    assert got[3].px_strategy == px.Strategy(
        replicas=2,
        stages=2,
        tensor=2,
        micro_batches=2,
        sharding=1,
        tensor_plan="auto",
        schedule="1f1b",
        loss_reduction="mean",
    )
    np.testing.assert_allclose(got[0], want[0], atol=3e-6)
    _same_weights(got[2], want[2])
    assert got[3].state.consumed_samples == 5 * 1 * 2 * 2  # steps x rows x micro-batches x ranks


def test_replicas_resume_on_the_samples_each_rank_had_left(tmp_path):
    """Two replicas in one process, stopped at step 5 and resumed: each rank skips the rows it consumed, so
    the resumed steps equal the uninterrupted run's (a one-rank count would replay half of them)."""
    args = dict(per_device_train_batch_size=1, sharding_parallel_size=2, max_steps=10, save_steps=5)
    whole = _train("px", tmp_path / "whole", **args)
    _train("px", tmp_path / "part", **args)
    resumed = _train("px", tmp_path / "part", resume=str(tmp_path / "part" / "checkpoint-5"), **args)
    np.testing.assert_allclose(resumed[0], whole[0][5:], atol=3e-6)
    _same_weights(resumed[2], whole[2])


def test_load_best_model_at_end_keeps_the_best(tmp_path):
    """load_best_model_at_end: the best checkpoint (the lower eval loss: the first, as this model overfits) is the model
    train() leaves, as in PaddleFormers; the final weights are not written back over it."""
    extra = dict(
        eval_dataset=Tokens(8, seed=1),
        evaluation_strategy="steps",
        eval_steps=10,
        load_best_model_at_end=True,
        metric_for_best_model="eval_loss",
    )
    want = _train("pf", tmp_path / "pf", **extra)
    got = _train("px", tmp_path / "px", **extra)
    assert got[3].state.best_model_checkpoint.endswith("checkpoint-10")
    _same_weights(got[2], want[2])
    last = paddle.load(str(tmp_path / "px" / "checkpoint-20" / "model_state.pdparams"), return_numpy=True)
    assert not np.allclose(got[2]["model.layers.0.mlp.up_proj.weight"], last["model.layers.0.mlp.up_proj.weight"])


def test_load_best_model_at_end_over_replicas_and_an_uneven_epoch(tmp_path):
    """Two replicas over 9 rows (4 steps of 2, one row left over): the sampler's length is the steps that run,
    and the model train() leaves is the best checkpoint's."""
    _, _, weights, trainer = _train(
        "px",
        tmp_path,
        dataset=Tokens(9),
        per_device_train_batch_size=1,
        sharding_parallel_size=2,
        max_steps=-1,
        num_train_epochs=1,
        save_steps=2,
        eval_dataset=Tokens(8, seed=1),
        evaluation_strategy="steps",
        eval_steps=2,
        load_best_model_at_end=True,
        metric_for_best_model="eval_loss",
    )
    assert trainer.state.global_step == 4 and len(trainer.get_train_dataloader()) == 4
    best = paddle.load(str(Path(trainer.state.best_model_checkpoint) / "model_state.pdparams"), return_numpy=True)
    assert not trainer.state.best_model_checkpoint.endswith("checkpoint-4")
    for k, w in best.items():
        np.testing.assert_array_equal(weights[k], w, err_msg=k)


def test_fp16_skipped_steps_leave_the_schedule(tmp_path):
    """fp16 starts its loss scale at scale_loss; a step the scaler skips on overflow does not advance the
    learning-rate schedule (PaddleFormers steps it only when its GradScaler ran the optimizer)."""
    _, _, _, trainer = _train("px", tmp_path, fp16=True, scale_loss=2.0**24, max_steps=6, save_steps=100)
    assert trainer.px_strategy.loss_scale.init == 2.0**24
    assert 0 < trainer.px_skipped_steps < 6
    assert trainer.lr_scheduler.last_epoch == 6 - trainer.px_skipped_steps
    # NOTE: the steps that did run used the schedule's first learning rates (warmup from 0), as PaddleFormers'
    assert trainer.lr_scheduler.get_lr() == pytest.approx(1e-3 * (6 - trainer.px_skipped_steps) / 3)


def test_fp16_resumes_at_the_loss_scale_it_reached(tmp_path):
    """The loss scaler goes into each checkpoint as PaddleFormers' GradScaler state (scaler.pdparams): a run
    stopped at step 4 and resumed skips the steps the uninterrupted run skips and ends with its weights
    (restarting at scale_loss, it would skip its first steps again)."""
    args = dict(fp16=True, scale_loss=2.0**24, max_steps=8, save_steps=4)
    whole = _train("px", tmp_path / "whole", **args)
    _train("px", tmp_path / "part", **args)
    saved = paddle.load(str(tmp_path / "part" / "checkpoint-4" / "scaler.pdparams"), return_numpy=True)
    assert saved["scale"][0] < 2.0**24 and saved["incr_every_n_steps"] == 2000
    scaler = paddle.amp.GradScaler()
    scaler.load_state_dict(saved)  # NOTE: Paddle's own GradScaler reads it, for a native resume
    resumed = _train("px", tmp_path / "part", resume=str(tmp_path / "part" / "checkpoint-4"), **args)
    assert resumed[3].px_skipped_steps == 0 < whole[3].px_skipped_steps
    np.testing.assert_allclose(resumed[0], whole[0][4:], atol=3e-6)
    _same_weights(resumed[2], whole[2])
    assert resumed[3].lr_scheduler.last_epoch == whole[3].lr_scheduler.last_epoch


def test_sequence_split_equals_paddleformers(reference, tmp_path):
    """sep_parallel_size x context_parallel_size split each sequence over 4 of the 16 devices: the same numbers."""
    losses, _, weights, trainer = _train("px", tmp_path, sep_parallel_size=2, context_parallel_size=2, save_steps=100)
    assert trainer.px_strategy == px.Strategy(sequence=4)
    np.testing.assert_allclose(losses, reference[0], atol=3e-6)
    _same_weights(weights, reference[2])


def test_bf16_and_recompute_become_the_strategy(reference, tmp_path):
    """Paddle's CPU build runs PaddleFormers' bf16 autocast in float32 (its losses equal fp32's), so the
    reference here is paddle_xla's own step under the same Strategy."""
    losses, _, _, trainer = _train(
        "px", tmp_path, bf16=True, amp_master_grad=True, recompute_granularity="full", max_steps=4, save_steps=100
    )
    assert trainer.px_strategy == px.Strategy(precision="bf16", recompute="layer")
    assert not np.allclose(losses, reference[0][:4], atol=1e-6)  # bf16 did round
    np.testing.assert_allclose(losses, reference[0][:4], atol=2e-2)


def _lora():
    peft = module("peft")
    net = peft.LoRAModel(_llama(), peft.LoRAConfig(target_modules=[".*q_proj.*", ".*v_proj.*"], r=4, lora_alpha=8))
    net.mark_only_lora_as_trainable()
    return net


def test_lora_trains_as_in_paddleformers(tmp_path):
    want = _train("pf", tmp_path / "pf", build=_lora, max_steps=6, save_steps=100)
    losses, _, weights, _ = _train("px", tmp_path / "px", build=_lora, max_steps=6, save_steps=100)
    np.testing.assert_allclose(losses, want[0], atol=3e-6)
    _same_weights(weights, want[2])
    with paddle.utils.unique_name.guard():
        paddle.seed(1)
        start = {k: v.numpy() for k, v in _lora().state_dict().items() if "lora" not in k}
    for k, v in start.items():
        np.testing.assert_array_equal(weights[k], v, err_msg=k)  # NOTE: the base stays bit for bit


def test_arguments_without_meaning_are_refused_all_at_once(tmp_path):
    args = pxf.TrainingArguments(
        output_dir=str(tmp_path),
        report_to=["none"],
        amp_master_grad=False,
        sequence_parallel=True,
        tp_async_allreduce=True,
        use_expert_parallel=True,
        past_index=1,
        save_on_each_node=True,
    )
    with pytest.raises(StrategyError) as e:
        pxf.Trainer(model=_llama(), args=args, train_dataset=Tokens())
    text = str(e.value)
    assert "5 of the TrainingArguments" in text
    for name, reason in [
        ("sequence_parallel=True", "sep_parallel_size or context_parallel_size"),
        ("tp_async_allreduce=True", "XLA schedules"),
        ("use_expert_parallel=True", "mixture-of-experts"),
        ("past_index=1", "not fed back"),
        ("save_on_each_node=True", "storage every node reads"),
    ]:
        assert name in text and reason in text


def test_plain_paddleformers_arguments_are_refused(tmp_path):
    args = trainer_lib.TrainingArguments(output_dir=str(tmp_path), report_to=["none"], amp_master_grad=False)
    with pytest.raises(TrainingError, match="integrations.paddleformers import TrainingArguments"):
        pxf.Trainer(model=_llama(), args=args, train_dataset=Tokens())


class _NoLabels(Tokens):
    def __getitem__(self, i):
        return {"input_ids": self.ids[i]}


class _Ragged(Tokens):
    def __getitem__(self, i):
        item = super().__getitem__(i)
        return {k: v[: 16 - 4 * (i % 2)] for k, v in item.items()}


@pytest.mark.parametrize(
    "dataset,error,words",
    [
        (_NoLabels(), TrainingError, "no labels"),
        (_Ragged(), FeedError, "padding='max_length'"),
    ],
)
def test_bad_batches_are_named(tmp_path, dataset, error, words):
    args = pxf.TrainingArguments(
        output_dir=str(tmp_path),
        report_to=["none"],
        amp_master_grad=False,
        max_steps=2,
        per_device_train_batch_size=1,
        gradient_accumulation_steps=2,
        dataloader_shuffle=False,
    )
    trainer = pxf.Trainer(model=_llama(), args=args, train_dataset=dataset)
    with pytest.raises(error, match=words.replace("(", r"\(").replace(")", r"\)")):
        trainer.train()


class _Stream(paddle.io.IterableDataset):
    def __iter__(self):
        yield from Tokens()


def test_iterable_dataset_over_replicas_is_refused(tmp_path):
    args = pxf.TrainingArguments(
        output_dir=str(tmp_path), report_to=["none"], amp_master_grad=False, max_steps=2, sharding_parallel_size=2
    )
    trainer = pxf.Trainer(model=_llama(), args=args, train_dataset=_Stream())
    with pytest.raises(FeedError, match="map-style"):
        trainer.train()


def test_optimizer_state_of_other_parameter_names_is_refused(tmp_path):
    """A .pdopt keyed by another model's parameter names would leave every moment fresh, silently."""
    _train("pf", tmp_path, max_steps=10)
    paddle.seed(1)
    _llama()  # NOTE: outside a name guard, after another model: other names (also when run alone)
    net = _llama()
    opt = paddle.optimizer.AdamW(1e-3, parameters=net.parameters())
    opt.set_state_dict(paddle.load(str(tmp_path / "checkpoint-10" / "optimizer.pdopt")))
    spec = [paddle.static.InputSpec([None, 16], "int64", "input_ids")]
    with pytest.raises(CheckpointError, match="parameters this model does not have"):
        px.train_step(net, None, opt, spec, [paddle.static.InputSpec([None, 16], "int64", "labels")])


def test_every_argument_read_is_a_paddleformers_argument():
    """The lists of arguments paddle_xla maps or keeps name real TrainingArguments fields (a typo would refuse
    the user's argument, or keep one that is no longer PaddleFormers')."""
    import dataclasses

    from paddle_xla.integrations import trainer_args

    fields = {f.name for f in dataclasses.fields(trainer_lib.TrainingArguments)}
    assert set(trainer_args.TO_STRATEGY) <= fields
    assert trainer_args.KEPT - fields <= {"eval_strategy"}  # NOTE: the newer name of evaluation_strategy


@pytest.mark.parametrize(
    "given,want",
    [  # NOTE: Strategy fields (built in the test: they need 16 devices)
        ({"sharding": "stage3"}, dict(replicas=16, sharding=3, loss_reduction="mean")),
        (
            {"sharding": "stage2", "tensor_model_parallel_size": 4},
            dict(replicas=4, tensor=4, sharding=2, tensor_plan="auto", loss_reduction="mean"),
        ),
        ({"sharding_parallel_size": 4}, dict(replicas=4, sharding=1, loss_reduction="mean")),
        (
            {"fp16": True, "recompute_method": "uniform"},
            dict(precision="fp16", recompute="layer", loss_scale=px.LossScale(init=2.0**15)),
        ),
    ],
)
def test_argument_mapping(given, want):
    from paddle_xla.integrations.trainer_args import strategy_from

    assert strategy_from(given, devices=16) == px.Strategy(**want)


def test_sharding_options_other_than_stages_are_refused():
    from paddle_xla.integrations.trainer_args import strategy_from

    with pytest.raises(StrategyError, match="offload"):
        strategy_from({"sharding": "stage2 offload"}, devices=16)


class _AsTwoRanksShareIt(Tokens):
    """The rows in the order two data-parallel ranks take them: PaddleFormers' sampler deals rank r the rows
    r, r + 2, ..., so step k's 2 x 2 rows are [4k, 4k + 2] on rank 0 and [4k + 1, 4k + 3] on rank 1."""

    def __getitem__(self, i):
        k, j = divmod(i, 4)
        return super().__getitem__(4 * k + (0, 2, 1, 3)[j])


def _launch_two(tmp_path, extra: dict) -> tuple[dict, Path]:
    from parallel.test_launchers import clean_env, logs

    env = clean_env(devices=1)
    out, run_dir = tmp_path / "curve.json", tmp_path / "run"
    script = str(Path(__file__).parent / "paddleformers_trainer_script.py")
    cmd = [
        sys.executable,
        "-m",
        "paddle.distributed.launch",
        "--nproc_per_node",
        "2",
        "--log_dir",
        str(tmp_path / "log"),
        script,
        str(out),
        str(run_dir),
        json.dumps(extra),
    ]
    run = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-2000:] + logs(tmp_path / "log")
    return json.loads(out.read_text()), run_dir


def test_paddle_launch_two_processes(tmp_path, monkeypatch):
    """`python -m paddle.distributed.launch --nproc_per_node 2 train.py`, as PaddleFormers users start it: each
    process reads its share of every batch, paddle_xla joins them into one data-parallel step (one device
    per process, PaddleFormers' default sharding stage1 over the two), and process 0 alone writes the
    checkpoints. The same numbers as PaddleFormers' data parallelism over those shares."""
    got, run_dir = _launch_two(tmp_path, {})
    assert (got["strategy"]["replicas"], got["strategy"]["sharding"]) == (2, 1)
    monkeypatch.setattr(paddle.device, "synchronize", lambda *a, **k: None)
    want = _train(
        "pf", tmp_path / "pf", dataset=_AsTwoRanksShareIt(), gradient_accumulation_steps=2, max_steps=6, save_steps=3
    )
    np.testing.assert_allclose(got["losses"], want[0], atol=3e-6)
    _same_weights({k: np.asarray(v, np.float32) for k, v in got["weights"].items()}, want[2])
    assert (run_dir / "checkpoint-6" / "model_state.pdparams").is_file()


def test_paddle_launch_two_processes_share_one_replica(tmp_path):
    """tensor_model_parallel_size=2 over the two processes: one data-parallel rank, whose batch both processes
    read (PaddleFormers' ranks of one tensor group read the same data), each feeding half of its rows. The
    same numbers as PaddleFormers in one process."""
    got, _ = _launch_two(tmp_path, {"tensor_model_parallel_size": 2})
    assert (got["strategy"]["replicas"], got["strategy"]["tensor"]) == (1, 2)
    want = _train("pf", tmp_path / "pf", max_steps=6, save_steps=3)
    np.testing.assert_allclose(got["losses"], want[0], atol=3e-6)
    _same_weights({k: np.asarray(v, np.float32) for k, v in got["weights"].items()}, want[2])
