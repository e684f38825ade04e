"""px.Model: paddle.Model's API (prepare / fit / evaluate / predict / save / load) on XLA.

It *is* a paddle.Model whose adapter (the object paddle.Model hands every batch to) runs compiled
XLA programs, so fit's loop, callbacks, progress bar and metrics are Paddle's own, unchanged."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal, cast

import numpy as np
import paddle
from paddle.static import InputSpec

from .. import capture, x64
from ..capture.wrap import net_with_loss
from ..parallel.group import paddle_sees_one_rank
from ..runtime.compiled import CompiledModel
from ..strategy import Strategy
from .training import TrainStep


def _to_list(x: Any) -> list:
    if x is None:
        return []
    return list(x) if isinstance(x, (list, tuple)) else [x]


def _numpy(x: Any) -> np.ndarray:
    return x.numpy() if isinstance(x, paddle.Tensor) else np.asarray(x)


def _specs(specs: InputSpec | Sequence[InputSpec] | None, prefix: str) -> list[InputSpec]:
    out = []
    for i, s in enumerate(_to_list(specs)):
        name = s.name or f"{prefix}{i}"
        out.append(InputSpec(s.shape, s.dtype, name))
    return out


def _fits(spec: InputSpec, arr: np.ndarray) -> bool:
    dims = list(spec.shape)
    return len(dims) == arr.ndim and all(d in (None, -1) or d == n for d, n in zip(dims, arr.shape))


def _for_batch(specs: list[InputSpec], arrays: list[np.ndarray], prefix: str) -> list[InputSpec]:
    """The specs to capture with for this batch. paddle.Model in dynamic mode checks no shape or dtype
    against its InputSpecs: the network sees the batch as the DataLoader made it (labels of shape [32]
    under a [None, 1] spec train). So a spec the batch does not fit is replaced by the batch's own,
    with a free batch dimension, and a missing spec is taken from the batch."""
    out: list[InputSpec] = []
    for i, arr in enumerate(arrays):
        spec = specs[i] if i < len(specs) else None
        if spec is not None and _fits(spec, arr) and _same_dtype(spec.dtype, arr.dtype):
            out.append(spec)
            continue
        shape = [None, *arr.shape[1:]] if arr.ndim else []
        # NOTE: Paddle's stub lists the dtype names as literals; a NumPy dtype's name is one of them
        out.append(InputSpec(shape, str(arr.dtype), spec.name if spec is not None else f"{prefix}{i}"))  # type: ignore[arg-type]
    return out


def _same_dtype(spec_dtype: Any, dtype: Any) -> bool:
    return str(spec_dtype).replace("paddle.", "") == str(np.dtype(dtype))


@x64.methods
class XlaAdapter:
    """What paddle.Model calls for each batch, backed by a TrainStep and compiled eval/predict programs."""

    def __init__(self, model: Model) -> None:
        self.model = model
        self._input_info = None
        self._merge_count = {"eval_total": 0, "test_total": 0, "eval_batch": 0, "test_batch": 0}
        self._amp_level = "O0"
        self._amp_configs: dict[str, Any] = {}
        self._amp_custom_lists: dict[str, Any] = {}
        self._step: TrainStep | None = None
        self._eval: CompiledModel | None = None
        self._predict: CompiledModel | None = None

    @property
    def mode(self) -> Literal["train", "eval", "test"]:
        return self.model.mode

    @mode.setter
    def mode(self, value: Literal["train", "eval", "test"]) -> None:
        self.model.mode = value

    def prepare(self) -> None:
        self._step = self._eval = self._predict = None
        self._synced: dict[int, int] = {}  # id(program) -> the train step's version it last took

    # ---- the three batch entry points ------------------------------------------------------
    def train_batch(self, inputs: Any, labels: Any = None, update: bool = True) -> Any:
        self.mode = "train"
        xs, ys = [_numpy(x) for x in _to_list(inputs)], [_numpy(y) for y in _to_list(labels)]
        self._resolve(xs, ys)
        step = self.train_step()
        # NOTE: update=False is Paddle's backward without optimizer.step(): gradients add up until the
        # next update=True call (fit(accumulate_grad_batches=N) drives it this way).
        loss = step(*xs, *ys) if update else step.accumulate(*xs, *ys)
        outs = [paddle.to_tensor(np.asarray(o)) for o in step.last_outputs]
        return self._with_metrics([np.asarray(loss, np.float32)], outs, ys)

    def eval_batch(self, inputs: Any, labels: Any = None) -> Any:
        self.mode = "eval"
        xs, ys = [_numpy(x) for x in _to_list(inputs)], [_numpy(y) for y in _to_list(labels)]
        self._resolve(xs, ys)
        if self.model._loss is None:
            outs = self._run(self.predict_program(), xs)
            return self._with_metrics(None, [paddle.to_tensor(o) for o in outs], ys)
        loss, *outs = self._run(self.eval_program(), xs + ys)
        return self._with_metrics([np.asarray(loss)], [paddle.to_tensor(o) for o in outs], ys)

    def predict_batch(self, inputs: Any) -> list[np.ndarray]:
        self.mode = "test"
        xs = [_numpy(x) for x in _to_list(inputs)]
        self._resolve(xs, None)
        return self._run(self.predict_program(), xs)

    def _resolve(self, xs: list[np.ndarray], ys: list[np.ndarray] | None) -> None:
        """Specs the first batch fits (_for_batch), taken before the programs that read them are
        captured; later batches are checked against those programs as usual."""
        m = self.model
        if self._step is None and self._eval is None and self._predict is None:
            m._inputs = _for_batch(m._inputs, xs, "input")
        if ys is not None and self._step is None and self._eval is None:
            m._labels = _for_batch(m._labels, ys, "label")

    # ---- programs ------------------------------------------------------------------------------
    def train_step(self) -> TrainStep:
        if self._step is None:
            m = self.model
            self._step = TrainStep(m.network, m._loss, m._optimizer, m._inputs, m._labels, strategy=m.strategy)
        return self._step

    def eval_program(self) -> CompiledModel:
        if self._eval is None:
            m = self.model
            # NOTE: _specs and _for_batch name every spec
            names = cast("list[str]", [s.name for s in m._inputs]), cast("list[str]", [s.name for s in m._labels])
            wrapper = net_with_loss(m.network, m._loss, *names)
            cap = capture.from_layer(wrapper, m._inputs + m._labels, training=False)
            self._eval = CompiledModel(cap.graph, self._weights(cap.weights))
        return self._eval

    def predict_program(self) -> CompiledModel:
        if self._predict is None:
            cap = capture.from_layer(self.model.network, self.model._inputs, training=False)
            self._predict = CompiledModel(cap.graph, self._weights(cap.weights))
        return self._predict

    def _weights(self, captured: dict) -> dict:
        return {**captured, **(self._step.weights() if self._step is not None else {})}

    def _run(self, program: CompiledModel, xs: list[np.ndarray]) -> list[np.ndarray]:
        step = self._step
        if step is not None and self._synced.get(id(program)) != step.version:
            # NOTE: evaluate with the weights and buffers training has reached so far (once per change)
            program.set_weights({**step.state.params, **step.state.buffers})
            self._synced[id(program)] = step.version
        return [np.asarray(o) for o in program.run(*xs)]

    def _with_metrics(
        self, losses: list[np.ndarray] | None, outputs: list[paddle.Tensor], labels: list[np.ndarray]
    ) -> Any:
        tensors = [paddle.to_tensor(y) for y in labels]
        metrics = []
        for metric in self.model._metrics:
            outs = metric.compute(*(outputs + tensors))
            metrics.append(metric.update(*[_numpy(o) for o in _to_list(outs)]))
        if losses is None:
            return metrics
        return (losses, metrics) if metrics else losses

    # ---- weights --------------------------------------------------------------------------------
    def parameters(self, *args: Any, **kwargs: Any) -> list[paddle.Tensor]:
        self.sync()
        return self.model.network.parameters(*args, **kwargs)

    def sync(self) -> None:
        if self._step is not None:
            self._step.sync_to(self.model.network)

    def save(self, path: str) -> None:
        self.sync()
        paddle.save(self.model.network.state_dict(), path + ".pdparams")
        if self._step is not None:
            paddle.save(self._step.paddle_optimizer_state(), path + ".pdopt")

    def load(self, param_state_pairs: Any, optim_state: Any, scaler_state: Any = None) -> None:
        for param, state in param_state_pairs:
            param.set_value(state)
        if optim_state and self.model._optimizer is not None:
            self.model._optimizer.set_state_dict(optim_state)
        self.prepare()  # NOTE: recapture so training resumes from the loaded weights


class Model(paddle.Model):
    """paddle.Model, trained and evaluated with XLA. Same constructor and methods."""

    def __init__(
        self, network: paddle.nn.Layer, inputs: Any = None, labels: Any = None, strategy: Strategy | None = None
    ) -> None:
        # NOTE: paddle.Model.__init__ builds Paddle's own adapter, which paddle_xla's replaces at once; fit()
        # still reads the ranks for its DistributedBatchSampler.
        with paddle_sees_one_rank():
            super().__init__(network, inputs, labels)
        self._inputs: list[InputSpec] = _specs(self._inputs, "input")
        self._labels: list[InputSpec] = _specs(self._labels, "label")
        self.strategy = strategy
        # NOTE: paddle.Model calls its adapter by duck typing; XlaAdapter has the methods it calls
        self._adapter = self._xla = XlaAdapter(self)  # type: ignore[assignment]

    def network_weights(self) -> dict[str, Any]:
        self._xla.sync()
        return self.network.state_dict()
