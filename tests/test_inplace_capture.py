"""In-place ops at capture: the operand Paddle's op definition says is written is the one later
readers see as written, in the block of the write and nowhere else; writes inside if/while blocks
leave them as Paddle's shared memory would."""

import numpy as np
import paddle
import pytest
from ops.test_ops import CASES, TABLES
from paddle.base.libpaddle import pir
from paddle.static import InputSpec

import paddle_xla as px
from paddle_xla import capture
from paddle_xla.capture.pir_reader import ALIASES_ONLY
from paddle_xla.ops.registry import REGISTRY

INPLACE_CASES = [c for c in CASES if any(o.endswith("_") for o in c.ops)]
# NOTE: ops Paddle calls in place that write no new values (detach's share_data_): readers keep the operand
WRITING_CASES = [c for c in INPLACE_CASES if not set(c.ops) & set(ALIASES_ONLY)]
RANDOM = {op for t in TABLES for op in getattr(t, "COVERED", [])}


def test_every_inplace_lowering_has_a_case_here():
    named = {n for n in REGISTRY if n.endswith("_")} - RANDOM
    assert named <= {op for c in INPLACE_CASES for op in c.ops}


def _static_with_readers(case):
    """The case built as a static program, then one assign per written operand, appended after it."""
    main = paddle.static.Program()
    with paddle.static.program_guard(main, paddle.static.Program()):
        xs = [paddle.static.data(f"x{i}", list(a.shape), a.dtype) for i, a in enumerate(case.args)]
        case.fn(*xs)
        inplace = [op for op in main.global_block().ops if op.name() in case.ops and op.name().endswith("_")]
        pairs = [
            (k, out_i, op.operands_source()[in_i])
            for k, op in enumerate(inplace)
            for out_i, in_i in pir.get_op_inplace_info(op).items()
        ]
        readers = [paddle.assign(v) for _, _, v in pairs]
    return main, inplace, pairs, readers


@pytest.mark.parametrize("case", WRITING_CASES, ids=[c.id for c in WRITING_CASES])
def test_readers_after_an_inplace_op_see_the_output_paddle_names(case):
    paddle.enable_static()
    try:
        main, inplace, pairs, readers = _static_with_readers(case)
        assert pairs, f"Paddle gives {case.ops} no in-place pairs"
        graph = capture.from_program(main, fetch_list=readers).graph
    finally:
        paddle.disable_static()
    producer = {v: op for op in graph.ops() for v in op.outputs}
    name = inplace[0].name()
    in_graph = [op for op in graph.ops() if op.name == name]
    for (k, out_i, _), fetch in zip(pairs, graph.fetches):
        reader = producer[fetch.value]
        assert reader.name == "pd_op.assign"
        assert reader.inputs[0] == in_graph[k].outputs[out_i], (name, out_i)


def test_readers_after_detach_still_see_the_operand():
    """x.detach() is share_data_ in a static program, "in place" by Paddle's op info; a later reader of x
    must read x itself (with its gradient), not the detached alias."""
    case = next(c for c in INPLACE_CASES if "pd_op.share_data_" in c.ops)
    paddle.enable_static()
    try:
        main, inplace, pairs, readers = _static_with_readers(case)
        assert pairs
        graph = capture.from_program(main, fetch_list=readers).graph
    finally:
        paddle.disable_static()
    producer = {v: op for op in graph.ops() for v in op.outputs}
    detached = {v for op in graph.ops() if op.name == "pd_op.share_data_" for v in op.outputs}
    for fetch in graph.fetches:
        assert producer[fetch.value].inputs[0] not in detached


class WhereInPlace(paddle.nn.Layer):
    def forward(self, c, x, y):
        x2 = x * 1.0
        out = paddle._C_ops.where_(c, x2, y)
        return out, x2 + 0.0, paddle.cast(c, "float32")


def test_where_inplace_writes_x_and_leaves_the_condition():
    rng = np.random.default_rng(0)
    c, x, y = (
        rng.random((4, 5)) > 0.5,
        rng.standard_normal((4, 5)).astype("float32"),
        rng.standard_normal((4, 5)).astype("float32"),
    )
    net = WhereInPlace()
    want = [t.numpy() for t in net(*map(paddle.to_tensor, (c, x, y)))]
    model = px.compile(
        net, [InputSpec([4, 5], "bool", "c"), InputSpec([4, 5], "float32", "x"), InputSpec([4, 5], "float32", "y")]
    )
    for got, w in zip(model(c, x, y), want):
        np.testing.assert_allclose(got, w, rtol=1e-6)


class RepVggBlock(paddle.nn.Layer):
    """PaddleDetection's RepVggBlock before deploy conversion: an in-place BatchNorm in both branches."""

    def __init__(self, alpha=1.0):
        super().__init__()
        self.conv = paddle.nn.Conv2D(4, 4, 3, padding=1)
        self.bn = paddle.nn.BatchNorm2D(4)
        self.alpha = self.create_parameter([1], default_initializer=paddle.nn.initializer.Constant(alpha))

    def forward(self, x):
        if self.alpha:
            y = self.bn(self.conv(x)) * self.alpha
        else:
            y = self.bn(self.conv(x))
        return y


SPEC = [InputSpec([None, 4, 8, 8], "float32", "x")]


def _repvgg(alpha):
    paddle.seed(3)
    net = RepVggBlock(alpha)
    # NOTE: running statistics away from 0/1, so reading the wrong ones shows.
    net.bn._mean.set_value(paddle.full([4], 0.3))
    net.bn._variance.set_value(paddle.full([4], 2.0))
    return net


@pytest.mark.parametrize("alpha", [1.0, 0.0], ids=["true_branch", "false_branch"])
def test_repvgg_block_inference_matches_paddle(alpha):
    net = _repvgg(alpha)
    net.eval()
    x = np.random.default_rng(1).standard_normal((2, 4, 8, 8)).astype("float32")
    assert px.check(net, SPEC).ok
    np.testing.assert_allclose(px.compile(net, SPEC)(x), net(paddle.to_tensor(x)).numpy(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("alpha", [1.0, 0.0], ids=["true_branch", "false_branch"])
def test_repvgg_block_training_updates_running_statistics_as_paddle(alpha):
    net = _repvgg(alpha)
    mean0 = net.bn._mean.numpy().copy()
    x = np.random.default_rng(2).standard_normal((2, 4, 8, 8)).astype("float32")
    loss_fn = lambda y: (y * y).mean()  # noqa: E731
    wrapped = _Loss(net, loss_fn)
    step = px.train_step(wrapped, None, paddle.optimizer.SGD(0.1, parameters=net.parameters()), SPEC)
    got_losses = [step(x) for _ in range(2)]
    step.sync_to(wrapped)
    got_mean, got_var = net.bn._mean.numpy().copy(), net.bn._variance.numpy().copy()

    ref = _repvgg(alpha)
    opt = paddle.optimizer.SGD(0.1, parameters=ref.parameters())
    want_losses = []
    for _ in range(2):
        loss = loss_fn(ref(paddle.to_tensor(x)))
        loss.backward()
        opt.step()
        opt.clear_grad()
        want_losses.append(float(loss))
    np.testing.assert_allclose(got_losses, want_losses, rtol=1e-5)
    assert not np.allclose(ref.bn._mean.numpy(), mean0)
    np.testing.assert_allclose(got_mean, ref.bn._mean.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got_var, ref.bn._variance.numpy(), rtol=1e-5, atol=1e-6)


class _Loss(paddle.nn.Layer):
    def __init__(self, net, loss_fn):
        super().__init__()
        self.net, self.loss_fn = net, loss_fn

    def forward(self, x):
        return self.loss_fn(self.net(x))


def _loop_program():
    """acc.add_() inside a while body writes a value defined outside the loop; h.scale_() writes a
    loop-carried argument. (Built as a static Program: to_static turns in-place ops in a loop body
    into out-of-place ones, so only a Program carries them.)"""
    main, startup = paddle.static.Program(), paddle.static.Program()
    with paddle.static.program_guard(main, startup):
        x, n = paddle.static.data("x", [3], "float32"), paddle.static.data("n", [1], "int64")
        acc, h = paddle.scale(x, 1.0), paddle.scale(x, 1.0)

        def body(i, h):
            paddle._C_ops.add_(acc, h)
            paddle._C_ops.scale_(h, 3.0, 0.0, True)
            return [i + 1, h * 0.5]

        _, h = paddle.static.nn.while_loop(lambda i, h: i < n, body, [paddle.full([1], 0, "int64"), h])
        fetches = [acc + 0.0, h]
    return main, startup, fetches


def test_inplace_writes_inside_a_while_loop_carry_over_iterations():
    paddle.enable_static()
    try:
        main, startup, fetches = _loop_program()
        exe = paddle.static.Executor(paddle.CPUPlace())
        exe.run(startup)
        x = np.array([1.0, -2.0, 0.5], "float32")
        feeds = [{"x": x, "n": np.array([n], "int64")} for n in (0, 1, 4)]
        want = [exe.run(main, feed=f, fetch_list=fetches) for f in feeds]
        captured = capture.from_program(main, fetch_list=fetches)
    finally:
        paddle.disable_static()
    from paddle_xla.runtime.compiled import CompiledModel

    model = CompiledModel(captured.graph, captured.weights)
    assert not np.allclose(want[-1][0], x)  # the loop did write acc
    for f, w in zip(feeds, want):
        for got, ref in zip(model(**f), w):
            np.testing.assert_allclose(got, ref, rtol=1e-6)


class _FakeOp:
    def __init__(self, attrs):
        self._attrs = attrs

    def name(self):
        return "pd_op.fancy"

    def attrs(self):
        return self._attrs


def test_an_attribute_of_unknown_type_is_refused_not_stringified():
    from paddle_xla.capture.pir_reader import _attrs
    from paddle_xla.errors import CaptureError

    assert _attrs(_FakeOp({"axis": [1, 2], "struct_name": "/L/"})) == {"axis": [1, 2]}
    with pytest.raises(CaptureError, match=r"pd_op.fancy has attribute 'mode' of type object"):
        _attrs(_FakeOp({"mode": object()}))
