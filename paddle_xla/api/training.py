"""The public face for training: train_step(net, loss_fn, optimizer, ...) -> TrainStep.

An edge module (imports paddle): it reads the user's Layer and paddle.optimizer, captures the
network and loss in train mode as one program, and runs Paddle's update rule on XLA."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import jax
import numpy as np
import paddle

from .. import capture, x64
from ..capture.stage_markers import markers
from ..capture.wrap import net_with_loss, takes_labels
from ..errors import CheckFailedError, StrategyError, TrainingError, UnsupportedOpsError
from ..interop import paddle_optimizer as optim_interop
from ..lowering.interpreter import check_message, fail_on_false_flags, raise_failed_check
from ..lowering.lower import check_graph, checked_ops
from ..parallel.mesh import to_host
from ..parallel.tensor_plan import tensor_plan_for
from ..runtime.feeds import checked
from ..runtime.step_runner import StepRunner
from ..strategy import Strategy
from ..train import checkpoint, optim
from ..train.step import TrainState, split_weights

if TYPE_CHECKING:
    from ..parallel.placement import Placement


@x64.methods
class TrainStep:
    """One compiled training step: forward, loss, gradients, clipping, update, LR schedule.

    `step(*inputs, *labels) -> loss (float)`; `step.sync_to(net)` writes weights back to the Layer.
    inputs_by_name=True calls net(name=value, ...) with the InputSpecs' names, as model(**batch) does."""

    def __init__(
        self,
        net: paddle.nn.Layer,
        loss_fn: Callable[..., Any] | None,
        optimizer: paddle.optimizer.Optimizer,
        input_spec: Sequence,
        label_spec: Sequence = (),
        *,
        seed: int = 0,
        strategy: Strategy | None = None,
        inputs_by_name: bool = False,
    ) -> None:
        if strategy is not None and strategy.quant_type is not None:
            raise StrategyError(
                f"Strategy(quant_type={strategy.quant_type!r}) holds a generator's weights in int8 for "
                "inference; training updates float weights: drop quant_type from the training Strategy"
            )
        self.net, self.optimizer = net, optimizer
        specs = list(input_spec) + list(label_spec)
        _check_own_loss(net, loss_fn, label_spec)
        wrapper = net_with_loss(
            net, loss_fn, [s.name for s in input_spec], [s.name for s in label_spec], by_name=inputs_by_name
        )
        self.captured = capture.from_layer(wrapper, specs, training=True)
        report = check_graph(self.captured.graph)
        if not report.ok:
            raise UnsupportedOpsError(report)
        # NOTE: parameters the loss does not read get no gradient in Paddle, and its optimizers skip
        # them (no decay, no moments); jax.grad would give zeros that AdamW still decays. So they are
        # frozen here, for the step, the optimizer state, .pdopt export and the pipeline alike.
        self.unused_params = self.captured.graph.unused_by(0)
        self.captured.graph = self.captured.graph.with_frozen(self.unused_params)
        self.graph = self.captured.graph
        self.config = optim_interop.optimizer_config(optimizer).with_frozen(self.unused_params)
        self.schedule = optim_interop.schedule_config(optimizer._learning_rate)
        # NOTE: a scheduler the user already stepped continues from where it is (Paddle's last_epoch).
        first = (
            optim_interop.schedule_state(optimizer._learning_rate)
            if isinstance(optimizer._learning_rate, paddle.optimizer.lr.LRScheduler)
            else 0
        )
        self._lr_offset = first if isinstance(first, int) else 0
        params, buffers = split_weights(self.graph, self.captured.weights)
        self.version = 0  # bumped by every new state: readers can tell stale copies
        self.state = TrainState(params, buffers, self._initial_opt_state(params), 0, jax.random.key(seed))
        # NOTE: the Strategy's layout (replicas, stages, precision, ...) lives in the step runner;
        # the plan of a pipeline is printed here, before anything compiles.
        self._step = StepRunner(
            self.graph,
            self.config,
            strategy,
            placement_for(self.captured, strategy),
            tensor_plan_for(self.graph, self.captured.state_keys, strategy),
            name=type(net).__name__,
        )
        self.loss_scale, self.skipped_steps = self._step.loss_scale, 0
        self.last_outputs: list[jax.Array] = []
        self._accumulated, self._micro = None, 0  # gradients of accumulate() calls since the last step

    @property
    def state(self) -> TrainState:
        return self._state

    @state.setter
    def state(self, value: TrainState) -> None:
        self._state = value
        self.version += 1

    @property
    def lr_offset(self) -> int:
        """The LR scheduler's position (Paddle's last_epoch) when this step started at step 0."""
        return self._lr_offset

    # ---- running ------------------------------------------------------------------------
    def lr(self) -> float:
        # NOTE: a Paddle LRScheduler advances once per step here, as hapi's LRScheduler callback does
        # by default (by_step=True).
        return float(self.schedule.lr_at(self._lr_offset + self.state.step))

    def hold_schedule(self) -> None:
        """The LR schedule stays where it was before the step just run: PaddleFormers' Trainer does not advance
        it on a step its fp16 loss scaler skipped (a plain Paddle loop, stepping its scheduler every
        iteration, does)."""
        self._lr_offset -= 1

    def feeds(self, args: Sequence[Any], kwargs: Mapping[str, Any]) -> dict[str, Any]:
        arrays = [a.numpy() if isinstance(a, paddle.Tensor) else a for a in args]
        named = {k: v.numpy() if isinstance(v, paddle.Tensor) else v for k, v in kwargs.items()}
        return checked(self.graph.feeds, arrays, named)

    def accumulate(self, *args: Any, **kwargs: Any) -> float:
        """Forward and backward without an update: the gradients add up, and the next step(...) applies
        their sum with its own (Paddle's loss.backward() without optimizer.step(); hapi's
        train_batch(update=False)). Buffers such as BatchNorm statistics update on every call."""
        s = self.state
        loss, fetches, buffers, grads = self._step.backward(s, self.feeds(args, kwargs), self._accumulated, self._micro)
        loss = float(loss)
        n = len(self.graph.fetches)
        fail_on_false_flags(fetches[n:], [check_message(op) for op in checked_ops(self.graph)])
        if not np.isfinite(loss):
            raise TrainingError(
                f"The loss is not finite at step {s.step} (accumulation pass {self._micro + 1}; "
                f"loss = {loss}); nothing was added. Check the inputs for NaN/Inf or lower the "
                "learning rate."
            )
        self._accumulated, self._micro = grads, self._micro + 1
        self.state = TrainState(s.params, buffers, s.opt_state, s.step, s.key)
        self.last_outputs = list(fetches[1:n])
        return loss

    def __call__(self, *args: Any, **kwargs: Any) -> float | list[float]:
        """One optimizer step; with Strategy(steps_per_call=k), k steps on stacked inputs -> k losses."""
        s = self.state
        feeds = [self.feeds(a, k) for a, k in self._step.split(args, kwargs)]
        lrs = [float(self.schedule.lr_at(self._lr_offset + s.step + i)) for i in range(len(feeds))]
        try:
            result = self._step(s, feeds, lrs, self._accumulated)
        except jax.errors.JaxRuntimeError as e:
            raise_failed_check(e)  # NOTE: a Paddle assert in the program, false for this batch
            raise
        self._accumulated, self._micro = None, 0
        self.state, self.last_outputs = result.state, result.outputs
        self.loss_scale, self.skipped_steps = self._step.loss_scale, self._step.skipped_steps
        if result.error:
            raise (CheckFailedError if result.failed else TrainingError)(result.error)
        return result.losses[0] if self._step.steps_per_call == 1 else result.losses

    def _initial_opt_state(self, params: Mapping[str, jax.Array]) -> dict[str, dict[str, jax.Array]]:
        """Fresh state, or the paddle optimizer's own accumulators when it has trained already
        (e.g. after set_state_dict from a .pdopt file)."""
        saved = {k: v for k, v in self.optimizer.state_dict().items() if k != "LR_Scheduler"}
        if not saved:
            return optim.init_state(self.config, params)
        state, _ = optim_interop.from_paddle_state_dict(self.config, self.optimizer.state_dict(), params)
        return state

    def paddle_optimizer_state(self) -> dict:
        """The optimizer state in paddle_opt.state_dict()'s layout (save it as .pdopt, or
        set_state_dict it into the Paddle optimizer to continue natively)."""
        # NOTE: on the host: the state may be split across processes (sharding), each gathering it at once
        opt = {n: {a: to_host(x) for a, x in accs.items()} for n, accs in self.state.opt_state.items()}
        params = {n: to_host(x) for n, x in self.state.params.items()}
        return optim_interop.to_paddle_state_dict(
            self.config, opt, params, schedule_state=self._lr_offset + self.state.step
        )

    # ---- weights back to Paddle, checkpoints -------------------------------------------------
    def layout(self) -> dict:
        """How the Strategy spread the step: mesh shape, micro-batches, pipeline schedule and its bubble
        fraction, parameter bytes per device, and the stage plan."""
        return self._step.report()

    def weights(self) -> dict[str, np.ndarray]:
        # NOTE: to_host gathers a weight split across processes (sharding 3), in every process at once
        return {k: to_host(v) for k, v in {**self.state.params, **self.state.buffers}.items()}

    def sync_to(self, net: paddle.nn.Layer | None = None, optimizer: bool = True) -> None:
        """Copy trained weights and buffers into the Paddle Layer (then paddle.save works as usual),
        and the optimizer state and LR schedule into the Paddle optimizer, so training can go on natively."""
        net = net or self.net
        values = self.weights()
        for tensor in net.state_dict().values():
            if tensor.name in values:
                tensor.set_value(values[tensor.name])
        if optimizer and net is self.net:
            self.optimizer.set_state_dict(self.paddle_optimizer_state())

    def stable_names(self) -> dict[str, str]:
        """Param name (linear_3.w_0) -> the network's state_dict key (l1.weight)."""
        return {k: v.removeprefix("net.") for k, v in self.captured.state_keys.items()}

    def fingerprint(self) -> str:
        names = self.stable_names()
        return checkpoint.fingerprint({names.get(p.name, p.name): p.shape for p in self.graph.params})

    def scaler_state(self) -> dict | None:
        """The fp16 loss scaler (scale, clean steps in a row, skipped steps), or None without one."""
        return self._step.scaler_state()

    def set_scaler_state(self, state: dict | None) -> None:
        """Go on from a scaler_state() (a resumed run's); None leaves the scaler as it is."""
        self._step.set_scaler_state(state)
        self.loss_scale, self.skipped_steps = self._step.loss_scale, self._step.skipped_steps

    def save_checkpoint(self, path: str) -> None:
        extra = {"lr_offset": self._lr_offset, "schedule": self.schedule.to_dict()}
        scaler = self.scaler_state()
        if scaler is not None:
            extra["loss_scaler"] = scaler
        checkpoint.save(path, self.state, self.fingerprint(), extra, names=self.stable_names())

    def load_checkpoint(self, path: str) -> None:
        """Restore params, buffers, optimizer state, step, RNG key, LR position and the fp16 loss
        scaler, all or nothing."""
        self.state, extra = checkpoint.load(path, self.state, self.fingerprint(), names=self.stable_names())
        self._lr_offset = int(extra.get("lr_offset", 0))
        self.set_scaler_state(extra.get("loss_scaler"))


def _check_own_loss(net: paddle.nn.Layer, loss_fn: Callable[..., Any] | None, label_spec: Sequence) -> None:
    """Labels without a loss_fn go to the model, which computes its own loss; a model that takes no such
    argument would train on its first output with the labels unread."""
    names = [s.name for s in label_spec]
    if loss_fn is None and names and not takes_labels(net, names):
        raise TrainingError(
            f"loss_fn is None, so {type(net).__name__} must compute its own loss from the labels "
            f"{names}, but its forward takes no argument named {' or '.join(map(repr, names))}. Pass a loss_fn "
            "(loss_fn(*outputs, *labels)), or name the label InputSpecs as the forward's arguments "
            "(e.g. InputSpec(..., name='labels')), or drop label_spec if the first output already is the loss."
        )


def train_step(
    net: paddle.nn.Layer,
    loss_fn: Callable[..., Any] | None,
    optimizer: paddle.optimizer.Optimizer,
    input_spec: Sequence,
    label_spec: Sequence = (),
    **kw: Any,
) -> TrainStep:
    """Compile one training step of `net` (and `loss_fn(outputs..., labels...)`, or None when
    net's first output is the loss) with `optimizer`'s exact Paddle update rule."""
    return TrainStep(net, loss_fn, optimizer, input_spec, label_spec, **kw)


def placement_for(captured: capture.Captured, strategy: Strategy | None, verbose: bool = True) -> Placement | None:
    """The stage of every op of a captured program under `strategy` (None without stages), with
    the plan printed before compiling."""
    if strategy is None or strategy.stages == 1:
        return None
    from ..parallel import placement as pl
    from ..parallel import report

    graph = captured.graph
    values = report.stand_in_values(graph, strategy.precision)
    cost, cut_bytes = report.costs(graph, values)
    result = pl.place(graph, strategy.stages, strategy.placement, markers(graph), captured.state_keys, cost, cut_bytes)
    result.plan = report.describe(graph, result, values)
    if verbose:
        print(result.plan)
    return result
