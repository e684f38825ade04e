"""PaddleFormers 1.2's MoE language models, unchanged, with their default configs apart from size: their MoE
blocks capture as one op each (capture/moe_layers.py). Qwen2-MoE, Qwen3-MoE and DeepSeek-V3 equal Paddle
eager's forward and own-loss training, the Qwen ones its greedy decoding too. ERNIE 4.5 MoE's block calls
kernels Paddle's CPU build lacks, so its reference is the dense ERNIE 4.5 that it equals when every expert
holds the dense MLP's weights."""

import contextlib
import importlib

import numpy as np
import paddle
import pytest
from generation.paddleformers import module, moe, moe_config
from paddle.static import InputSpec

import paddle_xla as px
from paddle_xla.capture.layer_ops import REGISTRY as LAYER_OPS
from paddle_xla.errors import CaptureError

TINY = dict(
    vocab_size=128,
    hidden_size=64,
    intermediate_size=128,
    moe_intermediate_size=32,
    shared_expert_intermediate_size=64,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=64,
    head_dim=16,
    num_experts=4,
    num_experts_per_tok=2,
    fuse_rms_norm=False,
)
DEEPSEEK = dict(
    num_key_value_heads=4,
    n_routed_experts=8,
    n_shared_experts=1,
    n_group=4,
    topk_group=2,
    kv_lora_rank=16,
    q_lora_rank=32,
    qk_rope_head_dim=8,
    head_dim=8,  # NOTE: its rotary table is head_dim wide and covers the rope part of a head alone
    v_head_dim=16,
    qk_nope_head_dim=16,
    first_k_dense_replace=1,
    norm_topk_prob=True,
    routed_scaling_factor=2.5,
    # NOTE: DeepSeek-V3's own rope scaling (yarn); PaddleFormers' attention reads its factor
    rope_scaling={
        "type": "yarn",
        "factor": 4.0,
        "beta_fast": 32,
        "beta_slow": 1,
        "mscale": 1.0,
        "mscale_all_dim": 1.0,
        "original_max_position_embeddings": 16,
    },
)
FAMILIES = {
    "qwen2_moe": ("Qwen2MoeConfig", "Qwen2MoeForCausalLMDeprecated", {}),
    "qwen3_moe": ("Qwen3MoeConfig", "Qwen3MoeForCausalLMDeprecated", {}),
    "deepseek_v3": ("DeepseekV3Config", "DeepseekV3ForCausalLM", DEEPSEEK),
}


def _model(family, **over):
    mod = moe(family)
    cfg_cls, model_cls, extra = FAMILIES[family]
    cfg = getattr(moe_config(family), cfg_cls)(**{**TINY, **extra, **over})
    paddle.seed(0)
    net = getattr(mod, model_cls)(cfg)
    net.eval()
    return net


def _ids(shape, seed=0):
    return np.random.default_rng(seed).integers(3, TINY["vocab_size"], shape).astype("int64")


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_forward_equals_paddle_eager(family):
    net = _model(family)
    assert net.config.use_cache  # NOTE: the default config, its cache object left out of the program
    ids = _ids((2, 8))
    with paddle.no_grad():
        want = net(paddle.to_tensor(ids), return_dict=True).logits.numpy()
    compiled = px.compile(net, [InputSpec([2, 8], "int64", "input_ids")])
    np.testing.assert_allclose(compiled(ids), want, rtol=1e-4, atol=1e-5)
    graph = compiled.graph
    blocks = sum(type(layer).__name__ in LAYER_OPS for layer in net.sublayers())
    assert blocks >= 1 and sum(op.name == "paddle_xla.sparse_moe" for op in graph.block.ops) == blocks


def _greedy_by_forward(net, ids, new):
    """Greedy decoding by the model's full eager forward, one token at a time (no cache)."""
    seq = ids.copy()
    with paddle.no_grad():
        for _ in range(new):
            logits = net(paddle.to_tensor(seq), use_cache=False, return_dict=True).logits.numpy()
            seq = np.concatenate([seq, logits[:, -1].argmax(-1)[:, None]], axis=1)
    return seq[:, ids.shape[1] :]


# NOTE: not DeepSeek-V3: PaddleFormers 1.2's rotary code squeezes a one-token decode step's cos/sin to the
# wrong rank (`cos.squeeze()`), in its own eager decoding too
@pytest.mark.parametrize("family", ["qwen2_moe", "qwen3_moe"])
def test_greedy_generation_equals_greedy_by_paddles_forward(family):
    net = _model(family)
    ids = _ids((2, 6), seed=1)
    gen = px.Generator(net, max_batch_size=2, max_length=16)
    got, _ = gen.generate(ids, max_new_tokens=6, decode_strategy="greedy_search")
    np.testing.assert_array_equal(np.asarray(got), _greedy_by_forward(net, ids, 6))


STEPS, LR = 3, 1e-3
SPECS = [InputSpec([None, 8], "int64", "input_ids")], [InputSpec([None, 8], "int64", "labels")]


def _batches():
    out = []
    for step in range(STEPS):
        ids = _ids((4, 8), seed=10 + step)
        labels = np.roll(ids, -1, axis=1)
        labels[:, -1] = -100
        out.append((ids, labels))
    return out


def _adamw(net):
    return paddle.optimizer.AdamW(LR, parameters=net.parameters(), weight_decay=0.01)


def _train_eager(net):
    net.train()
    opt, losses = _adamw(net), []
    for ids, labels in _batches():
        loss = net(paddle.to_tensor(ids), labels=paddle.to_tensor(labels), return_dict=True).loss
        loss.backward()
        opt.step()
        opt.clear_grad()
        losses.append(float(loss))
    return losses, {k: v.numpy() for k, v in net.state_dict().items()}


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_own_loss_training_equals_paddle_eager(family):
    # NOTE: output_router_logits asks for the load-balancing loss; PaddleFormers 1.2's Paddle-native Qwen MoE
    # models collect no router logits, so their aux_loss is the number 0 (eager too), left out of the step, and
    # its DeepSeek-V3 (DeepseekV3MoE) computes none
    net = _model(family, output_router_logits=True)
    ids, labels = _batches()[0]
    assert getattr(net(paddle.to_tensor(ids), labels=paddle.to_tensor(labels), return_dict=True), "aux_loss", 0) == 0
    want = _train_eager(_model(family, output_router_logits=True))
    net.train()
    # NOTE: DeepSeek-V3's rotary code tests `if b == 1` on the batch size: a symbolic batch makes that a branch
    # of the program whose two sides differ in rank, which Paddle refuses, so it trains at a fixed batch
    specs = SPECS if family != "deepseek_v3" else [[InputSpec([4, 8], "int64", s[0].name)] for s in SPECS]
    step = px.train_step(net, None, _adamw(net), *specs)
    losses = [step(ids, labels) for ids, labels in _batches()]
    np.testing.assert_allclose(losses, want[0], rtol=1e-5)
    keys = step.captured.state_keys
    got = {keys[k].removeprefix("net."): np.asarray(v) for k, v in step.weights().items() if k in keys}
    assert set(got) == set(want[1])
    for k, w in want[1].items():
        _assert_weights_close(got[k], w, k)


def _assert_weights_close(got, want, key):
    """Within rel 1e-4, but for AdamW's knife edge: where an element's gradient is near 0 its update
    lr * m / (sqrt(v) + eps) swings by up to lr a step on a rounding difference (1 or 2 elements of the
    4096-element weights here, test_paddleformers_training.py's note); a wrong gradient moves far more."""
    off = ~np.isclose(got, want, rtol=1e-4, atol=1e-6)
    assert off.sum() <= max(1, off.size // 1000), f"{key}: {off.sum()} of {off.size} elements off"
    np.testing.assert_allclose(got, want, rtol=0, atol=2 * LR * STEPS, err_msg=key)


ERNIE = dict(TINY, intermediate_size=32, num_hidden_layers=3)  # NOTE: its default layout: layer 0 dense, 1-2 MoE


def _ernie_twins(**over):
    """(ERNIE 4.5 MoE, dense ERNIE 4.5): every expert of the MoE holds the dense layer's MLP weights and there is
    no shared expert, so with top-k weights that sum to 1 (moe_norm_gate_logits, the default) each MoE layer
    computes the dense MLP whatever the (random) gate and correction bias choose."""
    mod, dense_mod = moe("ernie4_5_moe"), module("transformers.ernie4_5")
    paddle.seed(0)
    dense = dense_mod.Ernie4_5ForCausalLM(dense_mod.Ernie4_5Config(**ERNIE))
    net = mod.Ernie4_5_MoeForCausalLM(
        mod.Ernie4_5_MoeConfig(
            **{**ERNIE, "moe_intermediate_size": 32, "moe_num_experts": 4, "moe_num_shared_experts": 0, **over}
        )
    )
    dense_state, rng = dense.state_dict(), np.random.default_rng(3)
    state = {}
    for key, value in net.state_dict().items():
        if ".mlp.experts." in key:
            layer, rest = key.split(".experts.")
            state[key] = dense_state[f"{layer}.{rest.split('.', 1)[1]}"]
        elif "e_score_correction_bias" in key:
            state[key] = paddle.to_tensor(rng.standard_normal(value.shape).astype("float32") * 0.05)
        elif key in dense_state:
            state[key] = dense_state[key]
    net.set_state_dict(state)
    net.eval(), dense.eval()
    assert net.config.moe_use_aux_free and net.config.moe_norm_gate_logits  # NOTE: the defaults under test
    return net, dense


def test_ernie_moe_forward_equals_the_dense_model_it_reduces_to():
    net, dense = _ernie_twins()
    ids = _ids((2, 8), seed=4)
    with paddle.no_grad():
        want = dense(paddle.to_tensor(ids), return_dict=True).logits.numpy()
    got = px.compile(net, [InputSpec([2, 8], "int64", "input_ids")])(ids)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_ernie_moe_generates_the_dense_models_greedy_tokens_without_running_its_kernels():
    # NOTE: the generator's eager probes (vocabulary, causality, cache class) run the MoE block through its
    # op's lowering: the block's own forward calls kernels Paddle's CPU build lacks
    net, dense = _ernie_twins()
    ids = _ids((2, 6), seed=5)
    got, _ = px.Generator(net, max_batch_size=2, max_length=16).generate(ids, max_new_tokens=6)
    np.testing.assert_array_equal(np.asarray(got), _greedy_by_forward(dense, ids, 6))


@contextlib.contextmanager
def _cpu_forms_of_gate_kernels():
    """PaddleFormers' TopKGate with Paddle's Python forms of its GPU kernels (math_cal_aux_loss,
    math_int_bincount, which Paddle ships beside them) in their place, for the reference run alone."""
    from paddle.incubate.nn.functional.cal_aux_loss import math_cal_aux_loss
    from paddle.incubate.nn.functional.int_bincount import math_int_bincount

    moe("ernie4_5_moe")
    gate = importlib.import_module("paddleformers.nn.moe.topk_gate")  # NOTE: TopKGate's module, which calls them
    kept = gate.cal_aux_loss, gate.int_bincount
    gate.cal_aux_loss, gate.int_bincount = math_cal_aux_loss, math_int_bincount
    try:
        yield
    finally:
        gate.cal_aux_loss, gate.int_bincount = kept


def _reference_block(layer):
    """ERNIE 4.5 MoE's block in ops Paddle's CPU build has, for the reference run alone (its own forward calls
    GPU-only kernels): its routing (fused_gate_logits_process_fused: softmax, the correction bias for the choice
    only, the weights / clip(sum, 1e-12)), its experts by a loop of index gathers, its shared experts, and its
    own router loss (calc_router_loss_and_logging, as the block calls it, with Paddle's Python forms of the
    gate's two GPU kernels). The decoder layer hands that loss to FakeMoERouterLoss, as it does on a GPU."""
    gate = layer.gate

    def forward(hidden_states):
        x = hidden_states.reshape([-1, hidden_states.shape[-1]])
        logits, _, _ = gate(x, transform_weight=False)
        prob = gate.act(logits)
        _, chosen = (prob + layer.moe_statics.e_score_correction_bias[0].detach()).topk(layer.k, axis=-1)
        weights = paddle.take_along_axis(prob, chosen, axis=-1)
        weights = weights / paddle.clip(weights.sum(-1, keepdim=True), min=1e-12)
        out = paddle.zeros_like(x)
        for e, expert in enumerate(layer.experts):
            rows, slots = (t.flatten() for t in paddle.nonzero(chosen == e, as_tuple=True))
            if rows.shape[0]:
                w = paddle.gather_nd(weights, paddle.stack([rows, slots], -1)).unsqueeze(-1)
                out = paddle.index_add(out, rows, 0, expert(paddle.gather(x, rows)) * w)
        out = out + layer.shared_experts(x)
        counts = paddle.bincount(chosen.reshape([-1]), minlength=prob.shape[-1])  # NOTE: the dispatch's counts
        with _cpu_forms_of_gate_kernels():
            loss = layer.calc_router_loss_and_logging(
                paddle.zeros([1], "float32"), logits, prob, None, None, weights, counts, None, None
            )
        return out.reshape(hidden_states.shape), weights, loss, logits

    return forward


def _ernie_moe(**over):
    """ERNIE 4.5 MoE at its defaults apart from size (2 shared experts, the correction bias, all three router
    losses), random weights and a random correction bias; no multi-token-prediction layer."""
    mod = moe("ernie4_5_moe")
    paddle.seed(1)
    net = mod.Ernie4_5_MoeForCausalLM(
        mod.Ernie4_5_MoeConfig(
            **{**ERNIE, "moe_intermediate_size": 32, "moe_num_experts": 4, "num_nextn_predict_layers": 0, **over}
        )
    )
    rng = np.random.default_rng(3)
    for key, value in net.state_dict().items():
        if "e_score_correction_bias" in key:
            value.set_value(rng.standard_normal(value.shape).astype("float32") * 0.05)
    return net


def _ernie_reference():
    """_ernie_moe()'s twin whose MoE blocks run _reference_block: Paddle eager's reference model."""
    ref = _ernie_moe()
    for layer in ref.sublayers():
        if type(layer).__name__ == "Ernie4_5_MoeSparseMoeBlock":
            layer.__dict__["forward"] = _reference_block(layer)
    return ref


def test_ernie_moe_own_loss_training_with_its_router_loss_equals_paddle_eager():
    # NOTE: the reference is Paddle eager with the block's routing in CPU ops (_reference_block); the router loss
    # reaches the gradient alone (FakeMoERouterLoss), so the gate's weights and correction-free routing train
    # on it and the losses' values are the language model's
    ref = _ernie_reference()
    cfg = ref.config
    assert cfg.moe_num_shared_experts and cfg.router_aux_loss_coef and cfg.router_z_loss_coef
    assert cfg.moe_orthogonal_loss_lambda and cfg.moe_use_aux_free
    want = _train_eager(ref)
    net = _ernie_moe()
    net.train()
    step = px.train_step(net, None, _adamw(net), *SPECS)
    losses = [step(ids, labels) for ids, labels in _batches()]
    np.testing.assert_allclose(losses, want[0], rtol=1e-5)
    keys = step.captured.state_keys
    got = {keys[k].removeprefix("net."): np.asarray(v) for k, v in step.weights().items() if k in keys}
    # NOTE: tie_word_embeddings, ERNIE's default: the embedding is the head's weight, one parameter under 2 names
    assert set(want[1]) - set(got) == {"model.embed_tokens.weight"} and net.config.tie_word_embeddings
    for k in got:
        _assert_weights_close(got[k], want[1][k], k)
    gate = "model.layers.1.mlp.gate.weight"
    assert not np.allclose(got[gate], _ernie_moe().state_dict()[gate].numpy(), rtol=0, atol=1e-5)


def test_an_ernie_moe_capacity_that_could_drop_tokens_is_refused():
    net, _ = _ernie_twins(moe_capacity=[2, 2, 2])  # NOTE: 2 slots per 4 experts' share of the tokens: drops
    with pytest.raises(
        CaptureError, match=r"moe_capacity \[2.0, 2.0, 2.0\].*dropless.*at least the expert count \(4\)"
    ):
        px.compile(net, [InputSpec([2, 8], "int64", "input_ids")])


def test_ernie_moe_grouped_experts_are_refused():
    net = _ernie_moe(moe_group_experts=True, moe_use_aux_free=False)
    with pytest.raises(CaptureError, match="moe_group_experts=True.*not captured"):
        px.compile(net, [InputSpec([2, 8], "int64", "input_ids")])


def test_ernie_moe_router_loss_is_averaged_over_micro_batches_as_paddles_trainer_does():
    """Strategy(micro_batches=2) against Paddle eager accumulating 2 half-batches as PaddleFormers' Trainer does
    with enable_delay_scale_loss (the default): each half's loss.backward(), then the summed gradients halved.
    FakeMoERouterLoss gives each half's router loss the gradient 1, so the router, like the language model,
    gets the mean of the halves; the engine divides the op's constant among its groups to match."""
    ref = _ernie_reference()
    ref.train()
    opt = _adamw(ref)
    for ids, labels in _batches()[:2]:
        for half in (slice(0, 2), slice(2, 4)):
            ref(paddle.to_tensor(ids[half]), labels=paddle.to_tensor(labels[half]), return_dict=True).loss.backward()
        for p in ref.parameters():
            if p.grad is not None:
                p.grad.set_value(p.grad * 0.5)
        opt.step()
        opt.clear_grad()
    net = _ernie_moe()
    net.train()
    step = px.train_step(net, None, _adamw(net), *SPECS, strategy=px.Strategy(micro_batches=2, loss_reduction="mean"))
    for ids, labels in _batches()[:2]:
        step(ids, labels)
    keys = step.captured.state_keys
    got = {keys[k].removeprefix("net."): np.asarray(v) for k, v in step.weights().items() if k in keys}
    for k, w in ref.state_dict().items():
        if k in got:
            _assert_weights_close(got[k], w.numpy(), k)


def test_ernie_moe_with_differing_experts_equals_paddle_eager_with_its_routing_in_cpu_ops():
    ref = _ernie_reference()
    ref.eval()
    ids = _ids((2, 8), seed=6)
    with paddle.no_grad():
        want = ref(paddle.to_tensor(ids), return_dict=True).logits.numpy()
    got = px.compile(_ernie_moe().eval(), [InputSpec([2, 8], "int64", "input_ids")])(ids)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
