"""Fused LLM ops that Paddle's CPU build cannot run: each is built in a static Program, captured, lowered and
run, and compared with Paddle eagerly running the same computation written with its plain ops.

Paddle's PIR builders refuse an op that has no kernel on this device, so most ops are built as a legacy
OpDesc and translated to PIR (paddle.pir.translate_to_pir), the path an old saved model takes too; the
result is the same pd_op a GPU export holds. Where the reference is differentiable, the lowering's
jax.vjp is compared with Paddle's gradient of the reference as well."""

from contextlib import contextmanager

import jax
import jax.numpy as jnp
import numpy as np
import paddle
import paddle.nn.functional as F
import pytest
from paddle.base.layer_helper import LayerHelper

from paddle_xla import capture, x64
from paddle_xla.lowering.lower import lower

_C = paddle._C_ops
F32 = dict(rtol=1e-5, atol=1e-5)  # float32 sums (attention, norms) in another order
HALF = dict(rtol=2e-2, atol=2e-2)  # bf16 inputs and outputs: 8 bits of mantissa


# ---- building and running one fused op ------------------------------------------------------------
def i64(v):
    return ("_set_int64_attr", v)


def f64(v):
    return ("_set_float64_attr", v)


def i64s(v):
    return ("_set_int64s_attr", list(v))


_SETTERS = {bool: "_set_bool_attr", int: "_set_int32_attr", float: "_set_float32_attr", str: "_set_str_attr"}


@contextmanager
def _static():
    paddle.enable_static()
    try:
        yield
    finally:
        paddle.disable_static()


def _dtype_name(a):
    return "bfloat16" if a.dtype == jnp.bfloat16 else str(a.dtype)


def translated(op_type, inputs, outputs, attrs):
    """A PIR Program holding one `op_type` op, and its results. `inputs`: name -> array (None: absent),
    `outputs`: name -> (shape, dtype), `attrs`: name -> value, or (OpDesc setter, value) for a typed one."""
    with _static(), paddle.pir_utils.OldIrGuard():
        main = paddle.static.Program()
        with paddle.static.program_guard(main, paddle.static.Program()):
            ins = {k: paddle.static.data(k, list(a.shape), _dtype_name(a)) for k, a in inputs.items() if a is not None}
            helper = LayerHelper(op_type)
            outs = {}
            for name, (shape, dtype) in outputs.items():
                outs[name] = helper.create_variable_for_type_inference(dtype=dtype)
                outs[name].desc.set_shape(list(shape))
            # NOTE: a raw OpDesc, because append_op runs the (absent) CPU kernel's infer-shape.
            desc = main.global_block().desc.append_op()
            desc.set_type(op_type)
            for k, v in ins.items():
                desc.set_input(k, [v.name])
            for k, v in outs.items():
                desc.set_output(k, [v.name])
            for k, v in attrs.items():
                setter, value = v if isinstance(v, tuple) else (_SETTERS[type(v)], v)
                getattr(desc, setter)(k, value)
        program = paddle.pir.translate_to_pir(main.desc)
    op = next(o for o in program.global_block().ops if o.name() == f"pd_op.{op_type}")
    return program, list(op.results())


def built(fn, inputs):
    """A PIR Program from `fn(*data)` under program_guard (for ops whose PIR builder accepts this build)."""
    with _static():
        main = paddle.static.Program()
        with paddle.static.program_guard(main, paddle.static.Program()):
            data = [paddle.static.data(k, list(a.shape), _dtype_name(a)) for k, a in inputs.items()]
            out = fn(*data)
    return main, list(out) if isinstance(out, (list, tuple)) else [out]


def lowered(program, fetches):
    """The captured Program as a function feeds -> list of outputs, and its feed names."""
    graph = capture.from_program(program, fetch_list=fetches).graph
    f = lower(graph)
    names = [t.name for t in graph.feeds]

    def run(feeds, key=0):
        outs, _ = f({}, {}, {n: feeds[n] for n in names}, jax.random.key(key))
        return list(outs)

    return run, names


def run_fused(program, fetches, feeds, key=0):
    """The lowered Program's outputs, run eagerly; checked to match a jitted run."""
    run, names = lowered(program, fetches)
    with x64.scope():
        eager = [None if o is None else np.asarray(o) for o in run(feeds, key)]
        jitted = jax.jit(run, static_argnums=1)({n: feeds[n] for n in names}, key)
    for e, j in zip(eager, jitted):
        np.testing.assert_allclose(np.asarray(e, np.float64), np.asarray(j, np.float64), rtol=1e-6, atol=1e-6)
    return eager


def _np(t):
    return np.asarray(t.astype("float32").numpy()) if t.dtype == paddle.bfloat16 else t.numpy()


def _tensor(a, grad=False):
    t = (
        paddle.to_tensor(np.asarray(a, np.float32)).astype("bfloat16")
        if a.dtype == jnp.bfloat16
        else paddle.to_tensor(a)
    )
    t.stop_gradient = not grad
    return t


def reference(fn, arrays, upcast=False):
    """Paddle eager outputs of `fn` (the unfused computation) on `arrays` (bf16 ones upcast when asked)."""
    ts = [_tensor(a.astype(np.float32) if upcast and a.dtype == jnp.bfloat16 else a) for a in arrays]
    out = fn(*ts)
    return [_np(o) for o in (out if isinstance(out, (list, tuple)) else [out])]


def assert_close(got, want, tol, what=""):
    for i, (g, w) in enumerate(zip(got, want)):
        assert g.shape == w.shape, f"{what}[{i}]: shape {g.shape} vs {w.shape}"
        np.testing.assert_allclose(np.asarray(g, np.float64), np.asarray(w, np.float64), err_msg=f"{what}[{i}]", **tol)


def assert_grads_match(program, fetches, feeds, grad_names, ref_fn, ref_arrays, tol, outputs=(0,)):
    """jax.vjp of the lowering against Paddle's gradient of `ref_fn`, both of sum(out * cotangent)."""
    run, _ = lowered(program, fetches)
    rng = np.random.default_rng(7)
    with x64.scope():
        shapes = [np.asarray(o).shape for o in run(feeds)]
        cots = {i: rng.standard_normal(shapes[i]).astype(np.float32) for i in outputs}

        def loss(*vals):
            outs = run({**feeds, **dict(zip(grad_names, vals))})
            return sum(jnp.sum(outs[i].astype(jnp.float32) * c) for i, c in cots.items())

        grad = jax.grad(loss, argnums=tuple(range(len(grad_names))))
        got = grad(*[jnp.asarray(feeds[n]) for n in grad_names])
    ts = [_tensor(a, grad=True) for a in ref_arrays]
    outs = ref_fn(*ts)
    outs = outs if isinstance(outs, (list, tuple)) else [outs]
    total = sum((outs[i].astype("float32") * paddle.to_tensor(c)).sum() for i, c in cots.items())
    want = paddle.grad(total, ts[: len(grad_names)])
    assert_close([np.asarray(g) for g in got], [_np(w) for w in want], tol, "grad")


def _rand(rng, *shape, dtype=np.float32):
    return rng.standard_normal(shape).astype(np.float32).astype(dtype)


# ---- RMS norms ------------------------------------------------------------------------------------
def _rms_ref(axes, eps):
    def fn(x, w=None):
        inv = paddle.rsqrt((x.astype("float32") ** 2).mean(axis=axes, keepdim=True) + eps)
        y = x.astype("float32") * inv
        return (y if w is None else y * w.astype("float32")), inv

    return fn


@pytest.mark.parametrize("dtype", [np.float32, jnp.bfloat16], ids=["f32", "bf16"])
def test_fused_rms_norm_ext(dtype):
    rng = np.random.default_rng(0)
    x, w = _rand(rng, 2, 3, 16, dtype=dtype), _rand(rng, 16, dtype=dtype)
    outs = {"y": ((2, 3, 16), _dtype_name(x)), "invvar": ((6,), "float32")}
    prog, res = translated("fused_rms_norm_ext", {"x": x, "scale": w}, outs, {"epsilon": 1e-6})
    got = run_fused(prog, res, {"x": x, "scale": w})
    assert got[0].dtype == w.dtype and got[1].dtype == np.float32
    want = reference(
        lambda x, w: (lambda y, inv: (y, inv.reshape([-1])))(*_rms_ref(-1, 1e-6)(x, w)), [x, w], upcast=True
    )
    assert_close(got, want, F32 if dtype == np.float32 else HALF, "fused_rms_norm_ext")
    if dtype == np.float32:
        assert_grads_match(
            prog,
            res,
            {"x": x, "scale": w},
            ["x", "scale"],
            lambda x, w: _rms_ref(-1, 1e-6)(x, w)[0],
            [x, w],
            dict(rtol=1e-4, atol=1e-4),
        )


@pytest.mark.parametrize(
    "shape,weighted", [([16], True), ([3, 16], True), ([16], False)], ids=["last", "last2", "no_weight"]
)
def test_rms_norm(shape, weighted):
    rng = np.random.default_rng(1)
    x, w = _rand(rng, 2, 3, 16), _rand(rng, *shape)
    axes = list(range(3 - len(shape), 3))
    rows = (2, 3, 16)[: 3 - len(shape)]
    prog, res = translated(
        "rms_norm",
        {"x": x, "scale": w if weighted else None},
        {"y": ((2, 3, 16), "float32"), "invvar": (rows, "float32")},
        {"normalized_shape": i64s(shape), "epsilon": f64(1e-5)},
    )
    got = run_fused(prog, res, {"x": x, "scale": w})
    args = [x, w] if weighted else [x]
    want = reference(lambda *a: (lambda y, inv: (y, inv.reshape(list(rows))))(*_rms_ref(axes, 1e-5)(*a)), args)
    assert_close(got, want, F32, "rms_norm")


@pytest.mark.parametrize("round_type", [0, 1])
def test_fused_rms_norm_quant_int8(round_type):
    rng = np.random.default_rng(2)
    x, r, w, nb = _rand(rng, 4, 16), _rand(rng, 4, 16), _rand(rng, 16), _rand(rng, 16)
    prog, res = built(
        lambda x, r, w, nb: _C.fused_rms_norm_quant(x, None, r, w, nb, 1e-6, 1, 0.5, round_type, 127.0, -127.0),
        {"x": x, "r": r, "w": w, "nb": nb},
    )
    got = run_fused(prog, res, {"x": x, "r": r, "w": w, "nb": nb})
    y = reference(lambda x, r, w, nb: _rms_ref(-1, 1e-6)(x + r, w)[0] + nb, [x, r, w, nb])[0]
    q = 127.0 * 0.5 * y.astype(np.float64)
    q = np.rint(q) if round_type == 0 else np.sign(q) * np.floor(np.abs(q) + 0.5)
    assert got[0].dtype == np.int8
    # NOTE: a value within float32 rounding of a .5 boundary may round either way: one step of slack.
    np.testing.assert_allclose(got[0].astype(np.int32), np.clip(q, -127, 127), atol=1)
    np.testing.assert_allclose(got[1], x + r, rtol=1e-6)


def test_fused_layer_norm_quant_int8():
    rng = np.random.default_rng(3)
    x, w, nb = _rand(rng, 4, 16), _rand(rng, 16), _rand(rng, 16)

    def fused(x, w, nb):
        return _C.fused_bias_residual_layernorm(x, None, None, w, nb, 1e-5, 1.0, 1, 0.25, 0, 127.0, -127.0)

    prog, res = built(fused, {"x": x, "w": w, "nb": nb})
    got = run_fused(prog, res[:1], {"x": x, "w": w, "nb": nb})
    y = reference(lambda x, w, nb: F.layer_norm(x, 16, w, nb, 1e-5), [x, w, nb])[0]
    assert got[0].dtype == np.int8
    np.testing.assert_allclose(got[0].astype(np.int32), np.clip(np.rint(127.0 * 0.25 * y), -127, 127), atol=1)


# ---- rotary position embedding ----------------------------------------------------------------------
def _rotate_ref(x, every_two):
    if every_two:
        shape = x.shape
        pairs = x.reshape(shape[:-1] + [shape[-1] // 2, 2])
        return paddle.stack([-pairs[..., 1], pairs[..., 0]], axis=-1).reshape(shape)
    half = x.shape[-1] // 2
    return paddle.concat([-x[..., half:], x[..., :half]], axis=-1)


def _rope_tables_np(pos, d, base=10000.0):
    inv_freq = 1.0 / np.power(np.float32(base), (np.arange(d) // 2 * 2).astype(np.float32) / np.float32(d))
    angle = pos.astype(np.float32)[..., None] * inv_freq.astype(np.float32)
    return np.sin(angle).astype(np.float32), np.cos(angle).astype(np.float32)


def _rope_case(rng, *, every_two, tables, position_ids, time_major, with_v, dtype=np.float32):
    b, s, h, hk, d, table_len = 2, 5, 4, 2, 8, 7
    lead = (s, b) if time_major else (b, s)
    q, k = _rand(rng, *lead, h, d, dtype=dtype), _rand(rng, *lead, hk, d, dtype=dtype)
    v = _rand(rng, *lead, hk, d, dtype=dtype) if with_v else None
    pos = rng.integers(0, table_len, (b, s)).astype(np.int64) if position_ids else None
    positions = pos if position_ids else np.broadcast_to(np.arange(s), (b, s))
    if tables:
        sin_t, cos_t = _rope_tables_np(np.arange(table_len), d, 500.0)
        sin, cos = sin_t[None, :, None].astype(dtype), cos_t[None, :, None].astype(dtype)
        sin_rows, cos_rows = (np.take(t[0, :, 0].astype(np.float32), positions, axis=0) for t in (sin, cos))
    else:
        sin = cos = None
        sin_rows, cos_rows = _rope_tables_np(positions, d)
    return dict(q=q, k=k, v=v, sin=sin, cos=cos, position_ids=pos), sin_rows[:, :, None], cos_rows[:, :, None]


@pytest.mark.parametrize("every_two", [True, False], ids=["neox_pairs", "halves"])
@pytest.mark.parametrize(
    "tables,position_ids,time_major,with_v",
    [
        (True, False, False, False),
        (True, True, False, True),
        (False, False, False, False),
        (False, True, False, False),
        (True, True, True, False),
        (False, False, True, True),
    ],
    ids=["tables", "tables_pos_v", "computed", "computed_pos", "tables_pos_time_major", "computed_time_major_v"],
)
def test_fused_rotary_position_embedding(every_two, tables, position_ids, time_major, with_v):
    rng = np.random.default_rng(4)
    ins, sin_rows, cos_rows = _rope_case(
        rng, every_two=every_two, tables=tables, position_ids=position_ids, time_major=time_major, with_v=with_v
    )
    outs = {f"out_{n}": (ins[n].shape if ins[n] is not None else ins["k"].shape, "float32") for n in "qkv"}
    prog, res = translated(
        "fused_rotary_position_embedding",
        ins,
        outs,
        {"use_neox_rotary_style": every_two, "time_major": time_major, "rotary_emb_base": 10000.0},
    )
    present = [n for n in "qkv" if ins[n] is not None]
    feeds = {n: a for n, a in ins.items() if a is not None}
    got = run_fused(prog, [res["qkv".index(n)] for n in present], feeds)

    def ref(*xs):
        sin, cos = paddle.to_tensor(sin_rows), paddle.to_tensor(cos_rows)
        if time_major:
            sin, cos = sin.transpose([1, 0, 2, 3]), cos.transpose([1, 0, 2, 3])
        return [x * cos + _rotate_ref(x, every_two) * sin for x in xs]

    want = reference(ref, [ins[n] for n in present])
    assert_close(got, want, F32, "rope")
    if tables and position_ids and not time_major:
        assert_grads_match(prog, [res[0]], feeds, ["q"], lambda q: ref(q), [ins["q"]], F32)


def test_fused_rotary_position_embedding_bf16():
    rng = np.random.default_rng(5)
    ins, sin_rows, cos_rows = _rope_case(
        rng, every_two=False, tables=True, position_ids=True, time_major=False, with_v=False, dtype=jnp.bfloat16
    )
    outs = {f"out_{n}": (ins["k" if n == "v" else n].shape, "bfloat16") for n in "qkv"}
    attrs = {"use_neox_rotary_style": False, "time_major": False, "rotary_emb_base": 10000.0}
    prog, res = translated("fused_rotary_position_embedding", ins, outs, attrs)
    got = run_fused(prog, res[:2], {n: a for n, a in ins.items() if a is not None})
    assert got[0].dtype == jnp.bfloat16
    sin, cos = paddle.to_tensor(sin_rows), paddle.to_tensor(cos_rows)
    want = reference(
        lambda q, k: [x * cos + _rotate_ref(x, False) * sin for x in (q, k)], [ins["q"], ins["k"]], upcast=True
    )
    assert_close(got, want, HALF, "rope bf16")


# ---- flash attention ---------------------------------------------------------------------------------
def _attention_ref(scale, causal, group=1, mask=None):
    """softmax(q k^T * scale + mask) v of [batch, seq, heads, dim] tensors, keys repeated for head groups."""

    def fn(q, k, v):
        q, k, v = (t.astype("float32").transpose([0, 2, 1, 3]) for t in (q, k, v))
        if group > 1:
            k, v = (paddle.repeat_interleave(t, group, axis=1) for t in (k, v))
        scores = paddle.matmul(q, k, transpose_y=True) * scale
        if mask is not None:
            scores = scores + paddle.to_tensor(mask)
        if causal:
            sq, sk = scores.shape[-2:]
            scores = scores + paddle.to_tensor(
                np.where(np.tril(np.ones((sq, sk), bool)), 0, -np.inf).astype(np.float32)
            )
        out = paddle.matmul(F.softmax(scores, axis=-1), v).transpose([0, 2, 1, 3])
        return out, paddle.logsumexp(scores, axis=-1)

    return fn


def _flash_outputs(q, v, lse_shape, probs_shape):
    out_shape = q.shape[:-1] + v.shape[-1:]
    return {
        "out": (out_shape, _dtype_name(q)),
        "softmax": (probs_shape, _dtype_name(q)),
        "softmax_lse": (lse_shape, "float32"),
        "seed_offset": ((2,), "int64"),
    }


def _flash(q, k, v, mask=None, causal=False, dropout=0.0, is_test=True):
    b, sq, h, _ = q.shape
    outs = _flash_outputs(q, v, (b, h, sq), (b, h, 128, 128))
    return translated(
        "flash_attn",
        {"q": q, "k": k, "v": v, "attn_mask": mask},
        outs,
        {"dropout": dropout, "causal": causal, "return_softmax": False, "is_test": is_test, "rng_name": ""},
    )


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("shape", ["equal", "gqa", "cross", "mask", "dropout_is_test"])
def test_flash_attn(causal, shape):
    rng = np.random.default_rng(6)
    b, sq, sk, h, hk, d = 2, 6, 6, 4, 4, 8
    if shape == "gqa":
        hk = 2
    if shape == "cross":
        sk = 9  # NOTE: causal keeps key j <= query i, aligned at the top left (the Paddle fork's mask)
    q, k, v = _rand(rng, b, sq, h, d), _rand(rng, b, sk, hk, d), _rand(rng, b, sk, hk, d)
    mask = rng.uniform(-3, 0, (b, 1, sq, sk)).astype(np.float32) if shape == "mask" else None
    prog, res = _flash(q, k, v, mask, causal, dropout=0.3 if shape == "dropout_is_test" else 0.0)
    feeds = {"q": q, "k": k, "v": v, "attn_mask": mask}
    got = run_fused(prog, [res[0], res[2]], feeds)
    ref = _attention_ref(1 / np.sqrt(d), causal, h // hk, mask)
    assert_close(got, reference(ref, [q, k, v]), F32, f"flash_attn {shape}")
    if shape in ("equal", "gqa"):
        assert_grads_match(
            prog, [res[0]], feeds, ["q", "k", "v"], lambda *t: ref(*t)[0], [q, k, v], dict(rtol=1e-4, atol=1e-4)
        )


def test_flash_attn_bf16():
    rng = np.random.default_rng(8)
    q, k, v = (_rand(rng, 2, 8, 4, 16, dtype=jnp.bfloat16) for _ in range(3))
    prog, res = _flash(q, k, v, causal=True)
    got = run_fused(prog, res[:1], {"q": q, "k": k, "v": v})
    assert got[0].dtype == jnp.bfloat16
    want = reference(_attention_ref(0.25, True), [q, k, v], upcast=True)[:1]
    assert_close(got, want, HALF, "flash_attn bf16")


def test_flash_attn_dropout_training():
    """In training out = sum_j keep_j p_j / (1 - dropout) v_j: v = 1 gives mean 1, and the values vary."""
    rng = np.random.default_rng(9)
    q, k = _rand(rng, 2, 64, 2, 8), _rand(rng, 2, 64, 2, 8)
    v = np.ones((2, 64, 2, 8), np.float32)
    prog, res = _flash(q, k, v, dropout=0.4, is_test=False)
    out, seed_offset = run_fused(prog, [res[0], res[3]], {"q": q, "k": k, "v": v})
    assert abs(out.mean() - 1.0) < 0.05 and out.std() > 0.05
    assert seed_offset.shape == (2,) and seed_offset.dtype == np.int64
    again = run_fused(prog, [res[0]], {"q": q, "k": k, "v": v}, key=1)[0]
    assert not np.allclose(out, again)


def test_flash_attn_qkvpacked():
    rng = np.random.default_rng(10)
    b, s, groups, hk, d = 2, 6, 2, 2, 8
    qkv = _rand(rng, b, s, groups + 2, hk, d)
    q_like = qkv[:, :, 0].repeat(groups, axis=2)
    outs = _flash_outputs(q_like, qkv[:, :, 0], (b, groups * hk, s), (b, groups * hk, 128, 128))
    attrs = {"dropout": 0.0, "causal": True, "return_softmax": False, "is_test": True, "rng_name": ""}
    prog, res = translated("flash_attn_qkvpacked", {"qkv": qkv}, outs, attrs)
    got = run_fused(prog, res[:1], {"qkv": qkv})

    def ref(qkv):
        q = qkv[:, :, :groups].reshape([b, s, groups * hk, d])
        return _attention_ref(1 / np.sqrt(d), True, groups)(q, qkv[:, :, groups], qkv[:, :, groups + 1])[0]

    assert_close(got, reference(ref, [qkv]), F32, "flash_attn_qkvpacked")


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("variant", ["plain", "gqa_padded", "mask"])
def test_flash_attn_unpadded(causal, variant):
    """Two packed sequences (3 and 5 tokens); `gqa_padded` adds grouped keys and a trailing padding token."""
    rng = np.random.default_rng(11)
    lens, h, d, scale = [3, 5], 4, 8, 0.3
    hk = 2 if variant == "gqa_padded" else h
    total = sum(lens) + (1 if variant == "gqa_padded" else 0)
    cu = np.array([0, 3, 8], np.int32)
    q, k, v = _rand(rng, total, h, d), _rand(rng, total, hk, d), _rand(rng, total, hk, d)
    mask = rng.uniform(-3, 0, (2, 1, 5, 5)).astype(np.float32) if variant == "mask" else None
    outs = _flash_outputs(q, v, (h, total), (h, 128, 128))
    feeds = {"q": q, "k": k, "v": v, "cu_seqlens_q": cu, "cu_seqlens_k": cu, "attn_mask": mask}
    prog, res = translated(
        "flash_attn_unpadded",
        feeds,
        outs,
        {
            "max_seqlen_q": i64(5),
            "max_seqlen_k": i64(5),
            "scale": scale,
            "dropout": 0.0,
            "causal": causal,
            "return_softmax": False,
            "is_test": True,
            "rng_name": "",
        },
    )
    out, lse = run_fused(prog, [res[0], res[2]], feeds)
    want_out, want_lse = np.zeros_like(q), np.full((h, total), np.inf, np.float32)
    for i, (a, e) in enumerate(zip(cu[:-1], cu[1:])):
        m = None if mask is None else mask[i : i + 1, :, : e - a, : e - a]
        o, l = reference(_attention_ref(scale, causal, h // hk, m), [x[None, a:e] for x in (q, k, v)])
        want_out[a:e], want_lse[:, a:e] = o[0], l[0]
    assert_close([out, lse], [want_out, want_lse], F32, f"flash_attn_unpadded {variant}")


# ---- bias + activation, dropout + add, GEMM epilogue ---------------------------------------------------
_ACT_REFS = {
    "gelu": lambda x: F.gelu(x),
    "relu": F.relu,
    "swiglu": lambda x: (lambda a, b: F.silu(a) * b)(*paddle.chunk(x, 2, axis=-1)),
    "geglu": lambda x: (lambda a, b: F.gelu(a) * b)(*paddle.chunk(x, 2, axis=-1)),
}


def _bias_act(
    x,
    bias=None,
    act="gelu",
    shift=None,
    smooth=None,
    dequant=None,
    compute="default",
    quant_scale=-1.0,
    out_dtype="float32",
):
    cols = x.shape[-1] // 2 if act in ("swiglu", "geglu") else x.shape[-1]
    ins = {"x": x, "bias": bias, "dequant_scales": dequant, "shift": shift, "smooth": smooth}
    attrs = {
        "act_method": act,
        "compute_dtype": compute,
        "quant_scale": quant_scale,
        "quant_round_type": 0,
        "quant_max_bound": 127.0,
        "quant_min_bound": -127.0,
    }
    return translated("fused_bias_act", ins, {"out": (x.shape[:-1] + (cols,), out_dtype)}, attrs)


@pytest.mark.parametrize("act", ["gelu", "relu", "swiglu", "geglu"])
@pytest.mark.parametrize("with_bias", [True, False], ids=["bias", "no_bias"])
def test_fused_bias_act(act, with_bias):
    rng = np.random.default_rng(12)
    x, bias = _rand(rng, 2, 3, 16), _rand(rng, 16) if with_bias else None
    prog, res = _bias_act(x, bias, act)
    got = run_fused(prog, res, {"x": x, "bias": bias})
    ref = (lambda x, b: _ACT_REFS[act](x + b)) if with_bias else _ACT_REFS[act]
    args = [x, bias] if with_bias else [x]
    assert_close(got, reference(ref, args), F32, f"fused_bias_act {act}")
    if act in ("gelu", "swiglu"):
        assert_grads_match(prog, res, {"x": x, "bias": bias}, ["x", "bias"][: len(args)], ref, args, F32)


def test_fused_bias_act_shift_smooth_quant():
    rng = np.random.default_rng(13)
    x, bias, shift, smooth = _rand(rng, 4, 16), _rand(rng, 16), _rand(rng, 8), _rand(rng, 8)
    feeds = {"x": x, "bias": bias, "shift": shift, "smooth": smooth}
    prog, res = _bias_act(x, bias, "swiglu", shift, smooth)
    got = run_fused(prog, res, feeds)
    want = reference(lambda x, b, sh, sm: (_ACT_REFS["swiglu"](x + b) + sh) * sm, [x, bias, shift, smooth])
    assert_close(got, want, F32, "shift/smooth")
    prog, res = _bias_act(x, bias, "swiglu", shift, smooth, quant_scale=0.05, out_dtype="int8")
    q = run_fused(prog, res, feeds)[0]
    assert q.dtype == np.int8
    np.testing.assert_allclose(q.astype(np.int32), np.clip(np.rint(127 * 0.05 * want[0]), -127, 127), atol=1)


def test_fused_bias_act_dequant_int32():
    rng = np.random.default_rng(14)
    x = rng.integers(-2000, 2000, (4, 16)).astype(np.int32)
    scales, bias = rng.uniform(1e-3, 2e-3, 16).astype(np.float32), _rand(rng, 16)
    prog, res = _bias_act(x, bias, "gelu", dequant=scales, compute="fp32")
    got = run_fused(prog, res, {"x": x, "bias": bias, "dequant_scales": scales})
    want = reference(lambda b: F.gelu(paddle.to_tensor(x.astype(np.float32) * scales) + b), [bias])
    assert_close(got, want, F32, "dequant")


@pytest.mark.parametrize("mode", ["upscale_in_train", "downscale_in_infer"])
@pytest.mark.parametrize("p,is_test", [(0.0, False), (0.3, True)], ids=["p0_train", "p03_test"])
def test_fused_dropout_add(mode, p, is_test):
    rng = np.random.default_rng(15)
    x, y = _rand(rng, 4, 8), _rand(rng, 4, 8)
    prog, res = translated(
        "fused_dropout_add",
        {"x": x, "y": y},
        {"out": ((4, 8), "float32"), "seed_offset": ((2,), "int64")},
        {"p": p, "is_test": is_test, "mode": mode, "seed": 0, "fix_seed": False},
    )
    got = run_fused(prog, res[:1], {"x": x, "y": y})
    want = reference(lambda x, y: F.dropout(x, p, training=not is_test, mode=mode) + y, [x, y])
    assert_close(got, want, F32, "fused_dropout_add")


def test_fused_dropout_add_training_drops():
    rng = np.random.default_rng(16)
    x, y = np.ones((200, 100), np.float32), _rand(rng, 200, 100)
    outs = {"out": ((200, 100), "float32"), "seed_offset": ((2,), "int64")}
    attrs = {"p": 0.25, "is_test": False, "mode": "upscale_in_train", "seed": 0, "fix_seed": False}
    prog, res = translated("fused_dropout_add", {"x": x, "y": y}, outs, attrs)
    dropped = run_fused(prog, res[:1], {"x": x, "y": y})[0] - y
    kept = np.isclose(dropped, 1 / 0.75, atol=1e-5)
    assert np.all(kept | np.isclose(dropped, 0, atol=1e-5)) and abs(kept.mean() - 0.75) < 0.01


@pytest.mark.parametrize("activation", [None, "relu", "gelu"])
@pytest.mark.parametrize("layout", ["plain", "trans_y", "rank3"])
def test_fused_gemm_epilogue(activation, layout):
    """paddle.incubate's fused_linear / fused_linear_activation, which emit pd_op.fused_gemm_epilogue."""
    from paddle.incubate.nn.functional import fused_linear, fused_linear_activation

    rng = np.random.default_rng(17)
    n = 128  # NOTE: the infer-shape asks N % 128 == 0 for relu (8 for gelu), for cuBLASLt's aux output
    x = _rand(rng, 2, 3, 16) if layout == "rank3" else _rand(rng, 4, 16)
    w = _rand(rng, n, 16) if layout == "trans_y" else _rand(rng, 16, n)
    bias = _rand(rng, n)
    trans_y = layout == "trans_y"
    feeds = {"x": x, "w": w, "b": bias}
    if activation is None:
        prog, res = built(lambda x, w, b: fused_linear(x, w, b, transpose_weight=trans_y), feeds)
    else:
        prog, res = built(
            lambda x, w, b: fused_linear_activation(x, w, b, trans_y=trans_y, activation=activation), feeds
        )
    assert "pd_op.fused_gemm_epilogue" in [op.name() for op in prog.global_block().ops]
    got = run_fused(prog, res, feeds)
    act = {None: lambda t: t, "relu": F.relu, "gelu": lambda t: F.gelu(t, approximate=True)}[activation]
    ref = lambda x, w, b: act(paddle.matmul(x, w, transpose_y=trans_y) + b)  # noqa: E731
    assert_close(got, reference(ref, [x, w, bias]), F32, "fused_gemm_epilogue")
    if layout == "plain":
        assert_grads_match(prog, res, feeds, ["x", "w", "b"], ref, [x, w, bias], dict(rtol=1e-4, atol=1e-4))


# ---- ERNIE 4.5's fused MoE gate kernels -------------------------------------------------------------------
@pytest.mark.parametrize("out", [7, 9], ids=["int32", "int64"])
def test_int_bincount(out):
    # NOTE: the reference is Paddle's own math_int_bincount (its Python form of the kernel); values outside
    # [low, high) are not counted (cub's HistogramEven)
    from paddle.incubate.nn.functional.int_bincount import math_int_bincount

    rng = np.random.default_rng(20)
    x = rng.integers(0, 12, (6, 4)).astype(np.int64)
    prog, res = translated(
        "int_bincount", {"x": x}, {"out": ((8,), "int64")}, {"low": i64(2), "high": i64(10), "dtype": i64(out)}
    )
    (got,) = run_fused(prog, res, {"x": x})
    want = math_int_bincount(paddle.to_tensor(x), 2, 10, "int32" if out == 7 else "int64").numpy()
    assert got.dtype == want.dtype and np.array_equal(got, want) and got.sum() < x.size


@pytest.mark.parametrize("group", [False, True])
@pytest.mark.parametrize("per_modality,offset", [(0, 0), (4, 0), (4, 1)])
def test_expand_modality_expert_id(group, per_modality, offset):
    """From expand_modality_expert_id_kernel.cu: the j-th of k choices moves by j * group_size where
    is_group_expert; then an id e of rank e // n becomes rank * 2n + e % n + offset * n (two modalities a rank)."""
    rng = np.random.default_rng(21)
    ids = rng.integers(0, 8, (5, 2)).astype(np.int64)
    attrs = {"num_expert_per_modality": i64(per_modality), "group_size": i64(8), "modality_offset": i64(offset)}
    attrs["is_group_expert"] = group
    prog, res = translated("expand_modality_expert_id", {"expert_id": ids}, {"expert_id_out": ((5, 2), "int64")}, attrs)
    (got,) = run_fused(prog, res, {"expert_id": ids})
    want = np.empty_like(ids)
    for s in range(5):
        for j in range(2):
            e = ids[s, j] + (j * 8 if group else 0)
            n = per_modality
            want[s, j] = e if n <= 0 else (e // n) * 2 * n + e % n + offset * n
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("masks", ["none", "tokens", "both", "both_global"])
@pytest.mark.parametrize("use_group", [False, True])
def test_cal_aux_loss(masks, use_group):
    """Against Paddle's math_cal_aux_loss (its Python form of the kernel), the loss's value and its gradient by
    gate_prob. "both": the two masks over the same tokens, with different counts (no scale); "both_global": a
    dispatch mask over 16 tokens beside 12 rows, where the forward alone is scaled by 16's count over the
    tokens mask's."""
    from paddle.incubate.nn.functional.cal_aux_loss import math_cal_aux_loss

    rng = np.random.default_rng(22)
    tokens, experts = 12, 4
    prob = rng.uniform(0, 1, (tokens, experts)).astype(np.float32)
    counts = rng.integers(0, 6, (experts,)).astype(np.int64)
    tmask = (rng.uniform(size=tokens) < 0.75).astype(np.float32)
    dmask = rng.uniform(size=16 if masks == "both_global" else tokens) < 0.4
    feeds = {"gate_prob": prob, "dispatch_mask": counts}
    if masks != "none":
        feeds["tokens_mask"] = tmask
    if masks.startswith("both"):
        feeds["dispatch_tokens_mask"] = dmask
    attrs = {"num_experts": i64(experts), "use_group": use_group, "moe_k": i64(2), "clip_min": 1e-6}
    outs = {"l_aux_loss": ((), "float32"), "seqlen_float": ((), "float32"), "ce": ((experts,), "float32")}
    prog, res = translated("cal_aux_loss", feeds, outs, attrs)
    got = run_fused(prog, res, feeds)
    assert masks != "both" or tmask.sum() != dmask.sum()  # NOTE: a scale would show

    def ref(p):
        t = paddle.to_tensor(tmask) if masks != "none" else None
        d = paddle.to_tensor(dmask) if masks.startswith("both") else None
        return math_cal_aux_loss(p, paddle.to_tensor(counts), t, d, experts, use_group, 2, 1e-6)

    want = reference(ref, [prob])
    assert_close(got, want, F32, "cal_aux_loss")
    assert_grads_match(prog, res, feeds, ["gate_prob"], lambda p: ref(p)[0], [prob], F32)
