"""PaddleFormers' Trainer, with paddle_xla running the training step. Swap two imports:

    from paddle_xla.integrations.paddleformers import Trainer, TrainingArguments

and keep the arguments, dataset, collator and callbacks. PaddleFormers' own code still builds the
optimizer and LR schedule from the arguments, loads the data, logs, evaluates, saves and resumes
checkpoints in its own layout; paddle_xla replaces the step: each optimizer step's micro-batches run as
one compiled program (forward, the model's own loss, backward, clipping, Paddle's exact update rule),
spread as the arguments' parallel flags say (integrations/trainer_args.py maps them onto a Strategy).
The Paddle model and optimizer are brought up to date before every evaluation and save, and when
training ends.

An edge module: it imports paddle and paddleformers (which is not a paddle_xla dependency)."""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import os

import jax
import numpy as np
import paddle
from paddle.static import InputSpec

try:
    from paddleformers.trainer import Trainer as _Trainer
    from paddleformers.trainer import TrainingArguments as _TrainingArguments
    from paddleformers.utils.batch_sampler import MappingDistributedBatchSampler
    from paddleformers.utils.env import PREFIX_CHECKPOINT_DIR, SCALER_NAME
except ImportError as e:  # pragma: no cover - the message is the point
    raise ImportError(
        "paddle_xla.integrations.paddleformers wraps PaddleFormers' Trainer: install PaddleFormers "
        "in this environment with `paddle-xla install paddleformers` (a plain pip install "
        "paddleformers pulls numpy 1.26, which breaks JAX)."
    ) from e

from ..api.training import TrainStep
from ..errors import FeedError, TrainingError
from ..parallel.group import paddle_sees_one_rank
from .trainer_args import strategy_from
from .trainer_batches import ProcessRows


@dataclasses.dataclass
class TrainingArguments(_TrainingArguments):
    """PaddleFormers' TrainingArguments, the same fields and defaults. It remembers which arguments were
    set before PaddleFormers' own checks rewrite them: in one process those clear tensor_model_parallel_size,
    pipeline_model_parallel_size and sharding, which paddle_xla spreads over this process's devices."""

    def __post_init__(self):
        self._px_given = given_arguments(self)
        # NOTE: PaddleFormers' checks refuse a sequence split in one process (its sharding degree is -1 there);
        # here it is the Strategy's, read above. Under several processes PaddleFormers would start Paddle's
        # fleet for its own parallel flags: paddle_xla's processes are joined already.
        for name in ("sep_parallel_size", "context_parallel_size"):
            setattr(self, name, -1)
        with _one_paddle_rank():
            super().__post_init__()


def given_arguments(args) -> dict:
    """The arguments whose value differs from TrainingArguments' default, as the user set them."""
    given = {}
    for f in dataclasses.fields(_TrainingArguments):
        default = (
            f.default
            if f.default is not dataclasses.MISSING
            else (f.default_factory() if f.default_factory is not dataclasses.MISSING else dataclasses.MISSING)
        )
        value = getattr(args, f.name, default)
        if default is dataclasses.MISSING or value != default:
            given[f.name] = value
    return given


class Trainer(_Trainer):
    """paddleformers.trainer.Trainer whose training step runs on XLA (see the module's docstring)."""

    def __init__(self, model=None, criterion=None, args: TrainingArguments | None = None, *pos, **kw):
        given = getattr(args, "_px_given", None)
        if given is None:
            raise TrainingError(
                "paddle_xla's Trainer needs its own TrainingArguments (the same fields and defaults): "
                "PaddleFormers' clears tensor_model_parallel_size, pipeline_model_parallel_size and sharding in a "
                "single process before paddle_xla could read them. Build them with "
                "`from paddle_xla.integrations.paddleformers import TrainingArguments`."
            )
        self.px_strategy = strategy_from(given, devices=jax.device_count(), processes=jax.process_count())
        if criterion is not None:
            raise TrainingError(
                "paddle_xla's Trainer trains on the model's own loss (model(**batch, labels=...)"
                "[0]); a criterion= is not supported: drop it, or use px.train_step with loss_fn."
            )
        with _one_paddle_rank():
            super().__init__(model, None, args, *pos, **kw)
        _undo_layer_recompute(self.model, given)
        self._px_step: TrainStep | None = None
        self._px_pending: list[dict] = []
        self._px_rows = ProcessRows.of(self.px_strategy.replicas, jax.process_count(), jax.process_index())
        self._px_skipped = 0  # fp16: the compiled step's count of overflow steps it skipped
        self._px_scaler_resumed = None  # fp16: the loss scaler a resumed checkpoint held, for the next step built
        self.px_skipped_steps = 0  # fp16: this Trainer's, over every compiled step it built

    # ---- what PaddleFormers would do in Paddle, paddle_xla does in the compiled step ------------------
    def _wrap_amp_model(self, args, model):
        """Training precision is the Strategy's: no Paddle AMP decoration, no Paddle loss scaler. Evaluation
        stays PaddleFormers' (Paddle eager), under the autocast it would use, so eval losses read the same."""
        self.do_grad_scaling = False
        self.enable_autocast_context_manager = True

    def _wrap_model(self, model, training=True):
        """No Paddle DataParallel or fleet wrapper: the Strategy spreads the step."""
        return model

    def training_step(self, model, inputs, step_control=0):
        """Holds the micro-batches of one optimizer step; the last one runs them all as one compiled step.
        Returns each micro-batch's share of the step's loss, as PaddleFormers does (loss / accumulation):
        0 until the step runs, then the mean of the micro-batches' losses."""
        self._px_pending.append(_host_batch(inputs))
        if len(self._px_pending) < self.args.gradient_accumulation_steps:
            return paddle.to_tensor(0.0, dtype="float32")
        _same_shapes(self._px_pending)
        batch, self._px_pending = self._px_rows.block(self._px_pending), []
        step = self._px_step or self._build_step(batch)
        return paddle.to_tensor(step(**batch), dtype="float32")

    def optimizer_step(self, args, model, parameters_list=None):
        """The update already ran inside the compiled step; Paddle's scheduler advances with it, so logs,
        checkpoints and a resumed run read the same learning rate."""
        if self._px_pending:
            raise TrainingError(
                f"The epoch ended after {len(self._px_pending)} of gradient_accumulation_steps="
                f"{args.gradient_accumulation_steps} micro-batches; paddle_xla runs whole optimizer steps: use "
                "an epoch length divisible by it, dataloader_drop_last=True, or max_steps."
            )
        # NOTE: fp16: a step the loss scaler skipped (overflow) leaves the schedule where it was, as
        # PaddleFormers does when its GradScaler finds an inf.
        if self._px_step.skipped_steps == self._px_skipped:
            self.lr_scheduler.step()
        else:
            self._px_step.hold_schedule()
            self.px_skipped_steps += 1
        self._px_skipped = self._px_step.skipped_steps

    # ---- Paddle's model and optimizer brought up to date before Paddle code reads them -----------------
    def train(self, *a, **kw):
        self._px_step, self._px_pending = None, []  # NOTE: a resumed run loads the checkpoint first
        self._px_scaler_resumed = None
        self._refuse_iterable_over_ranks()
        done = False
        try:
            with _paddle_device_sync_skipped(), _one_paddle_rank():
                out = super().train(*a, **kw)
            done = True
            return out
        finally:
            if done and self.args.load_best_model_at_end and self.state.best_model_checkpoint is not None:
                self._px_step = None  # NOTE: the model holds the best checkpoint now; keep it
            self.sync_to_paddle()

    def _maybe_log_save_evaluate(self, *a, **kw):
        """After the last step Paddle's model takes over: it is brought up to date and the compiled step
        retired before PaddleFormers' train() goes on to code that writes into the model (loading the best
        checkpoint for load_best_model_at_end), which a later sync would otherwise undo."""
        # NOTE: PaddleFormers counts consumed samples for the one rank it sees; its ranks are the replicas
        self.state.consumed_samples = (
            self.state.global_step
            * self.args.per_device_train_batch_size
            * self.args.gradient_accumulation_steps
            * self.px_strategy.replicas
        )
        out = super()._maybe_log_save_evaluate(*a, **kw)
        if self.state.global_step >= self.state.max_steps or self.control.should_training_stop:
            self.sync_to_paddle()
            self._px_step = None
        return out

    def evaluate(self, *a, **kw):
        self.sync_to_paddle()
        return super().evaluate(*a, **kw)

    def _save_checkpoint(self, model, metrics=None):
        self.sync_to_paddle()
        if jax.process_index() == 0:  # NOTE: every process holds the same state; one writes it
            out = super()._save_checkpoint(model, metrics)
            self._save_loss_scaler()
            return out

    # ---- fp16: the loss scaler goes where PaddleFormers keeps its GradScaler's -----------------------
    def _save_loss_scaler(self) -> None:
        """The compiled step's loss scaler into the checkpoint as PaddleFormers saves its GradScaler
        (scaler.pdparams, GradScaler.state_dict()'s layout), so that a resumed run, this Trainer's or
        PaddleFormers' own, goes on at the scale training had reached."""
        state = self._px_step.scaler_state() if self._px_step is not None else None
        if state is None:
            return
        ls = self.px_strategy.loss_scale
        folder = os.path.join(self.args.output_dir, f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}")
        paddle.save(
            {
                "scale": np.asarray([state["scale"]], np.float32),
                "incr_ratio": ls.growth_factor,
                "decr_ratio": ls.backoff_factor,
                "incr_every_n_steps": ls.growth_interval,
                "decr_every_n_nan_or_inf": 1,
                "incr_count": int(state["good"]),
                "decr_count": 0,
                "use_dynamic_loss_scaling": ls.dynamic,
            },
            os.path.join(folder, SCALER_NAME),
        )

    def _load_optimizer_and_scheduler(self, checkpoint):
        super()._load_optimizer_and_scheduler(checkpoint)
        path = os.path.join(checkpoint, SCALER_NAME) if checkpoint else None
        if self.px_strategy.loss_scale is None or path is None or not os.path.isfile(path):
            return
        saved = paddle.load(path, return_numpy=True)
        # NOTE: the skipped count is this run's (PaddleFormers does not keep one either)
        self._px_scaler_resumed = {
            "scale": float(np.asarray(saved["scale"]).reshape(-1)[0]),
            "good": int(saved["incr_count"]),
            "skipped": 0,
        }

    def save_model(self, *a, **kw):
        self.sync_to_paddle()
        if jax.process_index() == 0:
            return super().save_model(*a, **kw)

    def _get_train_sampler(self):
        """The data PaddleFormers' ranks would read, one per replica of the Strategy (trainer_batches.py):
        with one replica in one process, PaddleFormers' own one-rank sampler; otherwise its data-parallel
        sampler's deal, for each of the ranks this process feeds."""
        if self.train_dataset is None or (self.px_strategy.replicas == 1 and jax.process_count() == 1):
            return super()._get_train_sampler()
        return _RanksBatchSampler(self.train_dataset, self.args, self._px_rows)

    def _refuse_iterable_over_ranks(self) -> None:
        if self.train_dataset is None or _has_length(self.train_dataset):
            return
        if self.px_strategy.replicas > 1 or jax.process_count() > 1:
            raise FeedError(
                f"An iterable train_dataset under {self.px_strategy.replicas} data-parallel replicas and "
                f"{jax.process_count()} processes: paddle_xla deals each replica the samples PaddleFormers' rank "
                "would read, which needs a dataset with a length (a map-style paddle.io.Dataset). Use one, or "
                "train on one replica in one process."
            )

    def sync_to_paddle(self) -> None:
        """The trained weights into the model, the optimizer's state and schedule into its Paddle optimizer."""
        if self._px_step is not None:
            self._px_step.sync_to(self.model)

    # ---- the compiled step ---------------------------------------------------------------------------
    def _build_step(self, batch: dict) -> TrainStep:
        names = list(batch)
        if not any(n in batch for n in self.label_names):
            raise TrainingError(
                f"The batches hold {names} but no labels ({self.label_names}): the model's first output would be "
                "taken as the loss. Give the collator a 'labels' field (label_names= names others)."
            )
        specs = [InputSpec([None, *v.shape[1:]], str(v.dtype), n) for n, v in batch.items()]
        self.model.train()
        self._px_step = TrainStep(
            self.model, None, self.optimizer, specs, strategy=self.px_strategy, inputs_by_name=True, seed=self.args.seed
        )
        self._px_step.set_scaler_state(self._px_scaler_resumed)
        self._px_skipped = 0
        return self._px_step


@contextlib.contextmanager
def _one_paddle_rank():
    """Paddle shown one rank (group.paddle_sees_one_rank), its cached view of the ranks too: Paddle reads
    PADDLE_TRAINERS_NUM once, into paddle.distributed.parallel's global ParallelEnv, at the first call that
    asks for the world size."""
    from paddle.distributed import parallel as paddle_parallel

    cached = paddle_parallel._global_parallel_env
    with paddle_sees_one_rank():
        paddle_parallel._global_parallel_env = None
        try:
            yield
        finally:
            paddle_parallel._global_parallel_env = cached


@contextlib.contextmanager
def _paddle_device_sync_skipped():
    """PaddleFormers' loop synchronizes Paddle's device before scaling accumulated gradients, which Paddle's
    CPU build refuses (TypeError: device should be gpu, xpu, ...). Nothing runs on Paddle's device here (the
    step is XLA's, and returns its loss to the host), so while training the call does nothing."""
    sync = paddle.device.synchronize
    paddle.device.synchronize = lambda *a, **k: None
    try:
        yield
    finally:
        paddle.device.synchronize = sync


def _host_batch(inputs: dict) -> dict:
    batch = {}
    for name, value in inputs.items():
        if isinstance(value, paddle.Tensor):
            value = value.numpy()
        if not isinstance(value, np.ndarray):
            raise FeedError(
                f"The batch's {name!r} is a {type(value).__name__}; paddle_xla's Trainer feeds tensors "
                "only: let the collator return arrays, or drop the field."
            )
        batch[name] = value
    return batch


def _same_shapes(micro: list[dict]) -> None:
    """One optimizer step's micro-batches run as one compiled step: they must agree in shape."""
    shapes = [{n: v.shape for n, v in m.items()} for m in micro]
    if any(s != shapes[0] for s in shapes[1:]):
        raise FeedError(
            f"The micro-batches of one optimizer step differ in shape ({shapes}); paddle_xla runs them as one "
            "compiled step. Pad every batch to one length (e.g. the collator's padding='max_length', "
            "max_length=...), which also spares a compile per length."
        )


def _has_length(dataset) -> bool:
    if isinstance(dataset, paddle.io.IterableDataset):
        return False  # NOTE: its __len__ raises RuntimeError
    try:
        len(dataset)
    except TypeError:
        return False
    return True


class _RanksBatchSampler(MappingDistributedBatchSampler):
    """PaddleFormers' data-parallel sampler, dealing over the Strategy's replicas as over its ranks, for
    the ranks [first, stop) this process feeds: each batch is those ranks' batches one after another."""

    def __init__(self, dataset, args, rows: ProcessRows):
        super().__init__(
            dataset,
            batch_size=args.per_device_train_batch_size,
            num_replicas=rows.ranks,
            rank=rows.first,
            shuffle=args.dataloader_shuffle,
            drop_last=args.dataloader_drop_last,
            data_seed=args.seed,
        )
        self._ranks = range(rows.first, rows.stop)

    def __len__(self):
        # NOTE: Paddle's DistributedBatchSampler counts ceil(samples / ranks) per rank; this one (as its
        # PaddleFormers base yields) floor: PaddleFormers' max_steps must be the steps that run
        per_rank, batch = self.total_size // self.nranks, self.batch_size * self._acc_steps
        return per_rank // batch if self.drop_last else -(-per_rank // batch)

    def set_epoch(self, epoch=0, consumed_samples=0):
        # NOTE: PaddleFormers computes consumed_samples on resume for the one rank it is shown (its
        # dataset_world_size is 1 here); the samples all ranks consumed are that many per rank.
        super().set_epoch(epoch, consumed_samples * self.nranks)

    def __iter__(self):
        per_rank = []
        for rank in self._ranks:
            one = copy.copy(self)
            one.local_rank = rank
            per_rank.append(MappingDistributedBatchSampler.__iter__(one))
        for batches in zip(*per_rank):
            yield [i for batch in batches for i in batch]


def _undo_layer_recompute(model, given) -> None:
    """PaddleFormers turns on its layers' own recompute for recompute_granularity; here the Strategy
    recomputes in the compiled step instead (Paddle's recompute is an eager-mode mechanism)."""
    if not given.get("recompute_granularity"):
        return

    def off(layer):
        if getattr(layer, "enable_recompute", None) is True:
            layer.enable_recompute = False

    model.apply(off)
