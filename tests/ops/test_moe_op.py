"""`paddle_xla.sparse_moe` (ops/moe.py), the op a PaddleFormers sparse MoE block is captured as, against a float64
NumPy composite of the same routing and experts; and its dispatch/combine as a property."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from paddle_xla.ops.moe import route, sparse_moe

T, H, I, E = 10, 8, 6, 6


QWEN = dict(scoring="softmax", norm_add=0.0, norm_min=0.0, routed_scaling=1.0, n_group=1, topk_group=1)
ERNIE = dict(scoring="softmax", norm_add=0.0, norm_min=1e-12, routed_scaling=1.0, n_group=1, topk_group=1)
DEEPSEEK = dict(scoring="sigmoid", norm_add=1e-20, norm_min=0.0, routed_scaling=2.5, n_group=3, topk_group=2)


def _op(x, gate_w, experts, top_k, norm, routing=QWEN, bias=None, fused=True):
    weights = [w for pair in experts for w in pair]
    if not fused:  # NOTE: (gate, up, down): the fused gate|up weight split in its two halves
        weights = [w for g_u, d in experts for w in (g_u[:, :I], g_u[:, I:], d)]
    lead = [gate_w] + ([bias] if bias is not None else [])
    args = [jnp.asarray(a, jnp.float32) for a in (x, *lead, *weights)]
    attrs = dict(num_experts=E, top_k=top_k, norm_topk_prob=norm, fused_gate_up=fused, correction_bias=bias is not None)
    return sparse_moe(*args, **attrs, **routing)


def _reference(x, gate_w, experts, top_k, norm, routing=QWEN, bias=None):
    """Each token, in float64: its scores (softmax or sigmoid of x @ gate_w), its top-k experts by score plus
    bias within its best groups (lower index first on ties), their scores as weights (renormalised where norm,
    then scaled), and the weighted sum of those experts' SwiGLU MLPs."""
    logits = x @ gate_w
    if routing["scoring"] == "softmax":
        scores = np.exp(logits - logits.max(-1, keepdims=True))
        scores /= scores.sum(-1, keepdims=True)
    else:
        scores = 1 / (1 + np.exp(-logits))
    choice = scores + (0 if bias is None else bias)
    out = np.zeros_like(x)
    for t in range(len(x)):
        c = choice[t].copy()
        if routing["n_group"] > 1:
            groups = c.reshape(routing["n_group"], -1)
            best = np.sort(groups, axis=1)[:, -2:].sum(1)
            kept = np.argsort(-best, kind="stable")[: routing["topk_group"]]
            c = np.where(np.isin(np.arange(E) // groups.shape[1], kept), c, 0.0)
        chosen = np.argsort(-c, kind="stable")[:top_k]
        w = scores[t, chosen]
        if norm:
            w = w / max(w.sum() + routing["norm_add"], routing["norm_min"])
        for e, we in zip(chosen, w * routing["routed_scaling"]):
            gate_up, down = experts[e]
            g, u = np.split(x[t] @ gate_up, 2)
            out[t] += we * ((g / (1 + np.exp(-g)) * u) @ down)
    return out, logits


def _weights(rng):
    experts = [(rng.standard_normal((H, 2 * I)) * 0.3, rng.standard_normal((I, H)) * 0.3) for _ in range(E)]
    return rng.standard_normal((T, H)), rng.standard_normal((H, E)), experts


def test_the_op_equals_a_float64_composite_of_routing_and_experts():
    rng = np.random.default_rng(0)
    x, gate_w, experts = _weights(rng)
    for top_k, norm in [(1, False), (2, True), (2, False), (3, True), (E, True)]:
        want, want_logits = _reference(x, gate_w, experts, top_k, norm)
        got, logits = _op(x, gate_w, experts, top_k, norm)
        np.testing.assert_allclose(np.asarray(logits), want_logits, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(np.asarray(got), want, rtol=1e-4, atol=1e-5, err_msg=f"top_k={top_k}")
    for tokens in (1, 2):  # NOTE: a decode step's few rows take the row-by-row path (ops/moe.py FEW_ROWS)
        want, _ = _reference(x[:tokens], gate_w, experts, 2, True)
        got, _ = _op(x[:tokens], gate_w, experts, 2, True)
        np.testing.assert_allclose(np.asarray(got), want, rtol=1e-4, atol=1e-5, err_msg=f"{tokens} tokens")


def test_biased_routing_of_deepseek_and_ernie_equals_the_composite():
    rng = np.random.default_rng(2)
    x, gate_w, experts = _weights(rng)
    bias = rng.standard_normal(E) * 0.1
    cases = [(2, True, DEEPSEEK), (3, False, DEEPSEEK), (2, True, {**DEEPSEEK, "n_group": 1}), (2, True, ERNIE)]
    for top_k, norm, groups in cases:
        want, _ = _reference(x, gate_w, experts, top_k, norm, groups, bias)
        got, _ = _op(x, gate_w, experts, top_k, norm, groups, bias, fused=False)
        np.testing.assert_allclose(np.asarray(got), want, rtol=1e-4, atol=1e-5, err_msg=str((top_k, norm, groups)))


@pytest.mark.parametrize("tokens", [T, 1])  # NOTE: the tiles' custom backward, and a decode step's few rows
def test_the_op_differentiates_like_its_composite(tokens):
    rng = np.random.default_rng(1)
    x, gate_w, experts = _weights(rng)
    x = x[:tokens]
    flat = [jnp.asarray(w, jnp.float32) for pair in experts for w in pair]

    def loss(x, gate_w, *ws):
        out, logits = sparse_moe(
            x,
            gate_w,
            *ws,
            num_experts=E,
            top_k=2,
            norm_topk_prob=True,
            fused_gate_up=True,
            correction_bias=False,
            **QWEN,
        )
        return jnp.sum(out**2) + jnp.sum(logits)

    def dense(x, gate_w, *ws):
        # NOTE: every expert on every token, weighted by the same top-2 routing: the op's meaning, densely
        logits = x @ gate_w
        weights, chosen = route(logits, 2, True)
        combine = jnp.sum(jax.nn.one_hot(chosen, E) * weights[..., None], axis=1)
        outs = []
        for gate_up, down in zip(ws[0::2], ws[1::2]):
            g, u = jnp.split(x @ gate_up, 2, axis=-1)
            outs.append((jax.nn.silu(g) * u) @ down)
        out = jnp.einsum("te,eth->th", combine, jnp.stack(outs))
        return jnp.sum(out**2) + jnp.sum(logits)

    args = (jnp.asarray(x, jnp.float32), jnp.asarray(gate_w, jnp.float32), *flat)
    got = jax.grad(loss, argnums=tuple(range(len(args))))(*args)
    want = jax.grad(dense, argnums=tuple(range(len(args))))(*args)
    for g, w in zip(got, want):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-4, atol=1e-5)


@settings(max_examples=6, deadline=None)
@given(
    tokens=st.integers(1, 12),
    experts=st.integers(1, 6),
    data=st.data(),
)
def test_every_token_reaches_its_experts_in_order_and_its_weights_sum_as_the_model_says(tokens, experts, data):
    top_k = data.draw(st.integers(1, experts))
    norm = data.draw(st.booleans())
    seed = data.draw(st.integers(0, 2**16))
    logits = np.random.default_rng(seed).standard_normal((tokens, experts)).astype(np.float32)
    weights, chosen = map(np.asarray, route(jnp.asarray(logits), top_k, norm))
    # NOTE: the chosen experts are each token's k most probable, best first, with no repeats
    probs = np.asarray(jax.nn.softmax(logits, axis=-1))
    for t in range(tokens):
        assert len(set(chosen[t])) == top_k
        assert np.all(np.diff(probs[t, chosen[t]]) <= 0)
        assert probs[t, chosen[t]].min() >= np.sort(probs[t])[::-1][top_k - 1]
    np.testing.assert_allclose(
        weights.sum(-1), 1.0 if norm else probs[np.arange(tokens)[:, None], chosen].sum(-1), rtol=1e-6
    )
    # NOTE: the round trip: with all-ones experts every token's routed output is its own experts' outputs
    # (each silu(s) * s for s = its sum) times their weights, back at the token's own row
    x = jnp.eye(tokens, 4, dtype=jnp.float32) + 1.0
    gate_w = jnp.zeros((4, experts), jnp.float32)
    ones = [w for _ in range(experts) for w in (jnp.ones((4, 2)), jnp.ones((1, 4)))]
    attrs = dict(num_experts=experts, top_k=top_k, norm_topk_prob=norm, fused_gate_up=True, correction_bias=False)
    routed, _ = sparse_moe(x, gate_w, *ones, **attrs, **QWEN)
    # NOTE: zero router weights make every expert equally likely: each token gets k experts of weight 1/E
    # (or 1/k renormalised), each giving silu(s) * s for s = the token's sum
    s = np.asarray(x).sum(-1)
    per_expert = s / (1 + np.exp(-s)) * s
    share = 1.0 if norm else top_k / experts
    np.testing.assert_allclose(np.asarray(routed), np.repeat((share * per_expert)[:, None], 4, 1), rtol=1e-5)


@pytest.mark.parametrize("scoring", ["softmax", "sigmoid"])
def test_router_loss_terms_and_their_gradients_equal_paddles(scoring):
    """ERNIE 4.5 MoE's router loss terms (ops/moe_loss.py) against Paddle's own: Paddle's math_cal_aux_loss
    (the Python form of the GPU cal_aux_loss kernel) of the scores _cal_aux_loss hands it (the sigmoid divided
    by its row sum) and the counts of their top-k, the z loss and the orthogonal loss as PaddleFormers' TopKGate
    computes them; values and gradients by the router logits and the gate's weight."""
    import paddle
    from paddle.incubate.nn.functional.cal_aux_loss import math_cal_aux_loss

    from paddle_xla.ops.moe_loss import aux_loss, orthogonal_loss, z_loss

    rng = np.random.default_rng(7)
    logits, gate_w = rng.standard_normal((T, E)).astype("float32"), rng.standard_normal((H, E)).astype("float32")

    def paddle_side(logits, gate_w):
        scores = (
            paddle.nn.functional.softmax(logits, -1) if scoring == "softmax" else paddle.nn.functional.sigmoid(logits)
        )
        if scoring == "sigmoid":
            scores = scores / scores.sum(-1, keepdim=True)
        counts = paddle.bincount(scores.topk(2, axis=-1)[1].reshape([-1]), minlength=E)
        ones = paddle.ones([T], "float32")
        rows = gate_w.T / paddle.maximum(gate_w.T.norm(axis=1), paddle.to_tensor([1e-12])).unsqueeze(1)
        off = rows @ rows.T - paddle.eye(E)
        return [
            math_cal_aux_loss(scores, counts, ones, ones, E, False, 2, 1e-6)[0],
            logits.logsumexp(1).square().mean(),
            (off * off).sum() / off.size,
        ]

    mine = [lambda lg, w: aux_loss(lg, scoring, 2), lambda lg, w: z_loss(lg), lambda lg, w: orthogonal_loss(w)]
    for term, fn in enumerate(mine):
        lg, w = (paddle.to_tensor(a, stop_gradient=False) for a in (logits, gate_w))
        want = paddle_side(lg, w)[term]
        want.backward()
        got, grads = jax.value_and_grad(fn, argnums=(0, 1))(jnp.asarray(logits), jnp.asarray(gate_w))
        np.testing.assert_allclose(got, want.numpy(), rtol=1e-5)
        for g, t in zip(grads, (lg, w)):
            np.testing.assert_allclose(g, t.grad.numpy() if t.grad is not None else 0.0, rtol=1e-4, atol=1e-7)


def test_the_router_loss_reaches_the_gradient_alone():
    """With a router_loss_grad, the op's output is unchanged and the gate's gradient gains that multiple of the
    router loss's (FakeMoERouterLoss's constant gradient)."""
    from paddle_xla.ops.moe_loss import router_loss

    rng = np.random.default_rng(8)
    x, gate_w = rng.standard_normal((T, H)), rng.standard_normal((H, E))
    experts = [(rng.standard_normal((H, 2 * I)), rng.standard_normal((I, H))) for _ in range(E)]
    coefs = dict(aux_loss_coef=0.01, z_loss_coef=1e-4, orthogonal_loss_coef=0.01)

    def total(gate_w, grad):
        routing = dict(ERNIE, router_loss_grad=grad, **coefs)
        return jnp.sum(_op(x, gate_w, experts, 2, True, routing)[0])

    plain, with_loss = (jax.value_and_grad(total)(jnp.asarray(gate_w, jnp.float32), g) for g in (0.0, 0.5))
    assert plain[0] == with_loss[0]

    def loss(gate_w):
        logits = jnp.asarray(x, jnp.float32) @ gate_w
        return router_loss(logits, gate_w, "softmax", 2, 0.01, 1e-4, 0.01)

    extra = jax.grad(loss)(jnp.asarray(gate_w, jnp.float32))
    assert float(jnp.abs(extra).max()) > 1e-4
    np.testing.assert_allclose(with_loss[1], plain[1] + 0.5 * extra, rtol=1e-5, atol=1e-6)
