"""PaddleFormers' TrainingArguments, read into a Strategy, or refused. Paddle-free: it reads the arguments
the user set (their names and values), never PaddleFormers itself.

Every argument is one of three kinds:
- TO_STRATEGY: its meaning becomes a Strategy field (the table in docs/generation.md says which);
- KEPT: PaddleFormers' own host code still applies it unchanged (the schedule, the optimizer it builds,
  logging, evaluation, saving, the data loader);
- anything else the user set is refused, all at once, each with its reason: it would otherwise be silently
  ignored, since paddle_xla, not Paddle's distributed runtime, runs the step.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from ..errors import StrategyError
from ..strategy import LossScale, Strategy

TO_STRATEGY = {
    "tensor_model_parallel_size": "tensor (tensor_plan='auto')",
    "pipeline_model_parallel_size": "stages (schedule '1f1b', micro-batches = gradient_accumulation_steps)",
    "sharding": "sharding (stage1/stage2/stage3 -> 1/2/3) over the replicas",
    "sharding_parallel_size": "replicas",
    "sharding_degree": "replicas",
    "gradient_accumulation_steps": "micro_batches (loss_reduction='mean')",
    "bf16": "precision='bf16'",
    "fp16": "precision='fp16'",
    "fp16_opt_level": "precision (O1 and O2 both keep float32 master weights here)",
    "scale_loss": "loss_scale=LossScale(init=scale_loss) under fp16 (PaddleFormers' GradScaler's start)",
    "amp_master_grad": "precision (float32 master weights and gradients always)",
    "sep_parallel_size": "sequence (context parallelism; times context_parallel_size)",
    "context_parallel_size": "sequence (context parallelism; times sep_parallel_size)",
    "recompute_granularity": "recompute='layer'",
    "recompute_method": "recompute='layer'",
    "recompute_num_layers": "recompute='layer'",
}

KEPT = frozenset(
    [
        "output_dir",
        "overwrite_output_dir",
        "do_train",
        "do_eval",
        "do_predict",
        "evaluation_strategy",
        "eval_strategy",
        "prediction_loss_only",
        "per_device_train_batch_size",
        "per_device_eval_batch_size",
        "eval_accumulation_steps",
        "learning_rate",
        "weight_decay",
        "adam_beta1",
        "adam_beta2",
        "adam_epsilon",
        "max_grad_norm",
        "num_train_epochs",
        "max_steps",
        "lr_scheduler_type",
        "warmup_ratio",
        "warmup_steps",
        "num_cycles",
        "lr_end",
        "power",
        "min_lr",
        "log_on_each_node",
        "logging_dir",
        "output_signal_dir",
        "logging_strategy",
        "logging_first_step",
        "logging_steps",
        "save_strategy",
        "save_steps",
        "save_total_limit",
        "no_cuda",
        "seed",
        "bf16_full_eval",
        "fp16_full_eval",
        "dataloader_shuffle",
        "dataloader_drop_last",
        "eval_steps",
        "max_evaluate_steps",
        "dataloader_num_workers",
        "prefetch_factor",
        "run_name",
        "device",
        "disable_tqdm",
        "remove_unused_columns",
        "label_names",
        "load_best_model_at_end",
        "metric_for_best_model",
        "greater_is_better",
        "ignore_data_skip",
        "optim",
        "report_to",
        "resume_from_checkpoint",
        "skip_memory_metrics",
        "save_tokenizer",
        "save_rng_states",
        "pad_token_id",
        "save_checkpoint_format",
        "load_checkpoint_format",
        "save_last_step",
        "ignore_load_lr_and_optim",
        "ignore_save_lr_and_optim",
        "metrics_output_path",
        "skip_profile_timer",
        "timer",
        "lazy_data_processing",
        "local_rank",
        "count_trained_tokens",
        "save_to_hf",
        "convert_from_hf",
        "load_from_hf",
        "minimum_eval_times",
    ]
)

# NOTE: the reasons the refusal gives, by the argument's name; the first pattern that matches wins.
_REASONS = [
    (
        r"^past_index$",
        "the model's memory outputs are not fed back into the next step: the compiled step takes "
        "the batch's inputs only",
    ),
    (r"^save_on_each_node$", "process 0 alone writes checkpoints here: put output_dir on storage every node reads"),
    (
        r"^(sequence_parallel|cp_|split_inputs_sequence_dim)",
        "Megatron's split of the sequence inside the tensor group is not available: split it over its own devices "
        "with sep_parallel_size or context_parallel_size (Strategy.sequence)",
    ),
    (
        r"overlap|fusion|fuse_|async|release_grads|comm|p2p|offload|pre_alloc|sync_|_sync|clear_every_step_cache|"
        r"fa_version|flatten_param_grads|split_param|reduce_avg|scheduler|dualpipev|split_backward|"
        r"replace_with_|mp_|pp_|tp_|sd_",
        "a Paddle runtime or kernel choice: XLA schedules communication, fusion and memory itself",
    ),
    (r"expert|moe|mtp|muon", "mixture-of-experts, multi-token prediction and Muon are not supported here"),
    (r"amp_custom_", "paddle_xla's precision follows Paddle AMP O1's own op lists"),
]


def strategy_from(given: Mapping[str, Any], *, devices: int, processes: int = 1) -> Strategy:
    """The Strategy the arguments the user set ask for (`given`: name -> value, only those that differ
    from TrainingArguments' defaults). `devices`: how many the run has (all processes'); under several
    `processes` every device takes part, the ones no other flag uses as data-parallel replicas, with
    PaddleFormers' default sharding (stage1) over them, as it does over its ranks."""
    refuse_unmapped(given)
    tensor = _degree(given, "tensor_model_parallel_size")
    sequence = _degree(given, "sep_parallel_size") * _degree(given, "context_parallel_size")
    stages = _degree(given, "pipeline_model_parallel_size")
    micro = int(given.get("gradient_accumulation_steps", 1))
    # NOTE: PaddleFormers' default is sharding="stage1", applied once there is more than one rank
    stage = _sharding_stage(given.get("sharding", "stage1"))
    replicas = max(_degree(given, "sharding_parallel_size"), _degree(given, "sharding_degree"))
    if ("sharding" in given and stage or processes > 1) and replicas == 1:
        # NOTE: sharding named with no degree spreads over every replica the devices allow, as PaddleFormers
        # computes sharding_parallel_size from the world size.
        replicas = max(devices // (tensor * stages * sequence), 1)
    precision = "fp16" if given.get("fp16") else "bf16" if given.get("bf16") else "fp32"
    recompute = (
        "layer"
        if any(given.get(k) for k in ("recompute_granularity", "recompute_method", "recompute_num_layers"))
        else None
    )
    fields = dict(
        replicas=replicas,
        stages=stages,
        tensor=tensor,
        sequence=sequence,
        micro_batches=micro,
        precision=precision,
        recompute=recompute,
        sharding=stage if replicas > 1 else 0,
    )
    if tensor > 1:
        fields["tensor_plan"] = "auto"
    if stages > 1:
        fields["schedule"] = "1f1b"
    if precision == "fp16":
        # NOTE: PaddleFormers starts its GradScaler at scale_loss (default 2**15), not Paddle's 2**16
        fields["loss_scale"] = LossScale(init=float(given.get("scale_loss", 2.0**15)))
    if replicas * micro > 1:
        # NOTE: PaddleFormers scales the summed gradients by 1/gradient_accumulation_steps and data
        # parallelism averages over ranks: the mean of the parts' losses.
        fields["loss_reduction"] = "mean"
    try:
        return Strategy(**fields)
    except StrategyError as e:
        raise StrategyError(
            f"These TrainingArguments ({_listed(given, TO_STRATEGY)}) ask for a layout this machine cannot run: {e}"
        ) from None


def refuse_unmapped(given: Mapping[str, Any]) -> None:
    """Every argument set that neither becomes a Strategy field nor is kept: refused, all at once."""
    bad = sorted(k for k in given if k not in TO_STRATEGY and k not in KEPT and not k.startswith("_"))
    if not bad:
        return
    lines = "\n".join(f"  - {k}={given[k]!r}: {_reason(k)}" for k in bad)
    raise StrategyError(
        f"paddle_xla's Trainer cannot honour {len(bad)} of the TrainingArguments you set, and "
        f"will not ignore them:\n{lines}\nRemove them (or set them back to their defaults). "
        "The arguments it reads are listed in docs/generation.md, 'Training language models with "
        "PaddleFormers' Trainer'."
    )


def _reason(name: str) -> str:
    for pattern, reason in _REASONS:
        if re.search(pattern, name):
            return reason
    return "it has no meaning when paddle_xla runs the training step"


def _degree(given, name) -> int:
    return max(int(given.get(name, 1) or 1), 1)


def _sharding_stage(value) -> int:
    """'stage1 offload' / ['stage2'] / ShardingOption values -> the highest stage named (0: none)."""
    words = value.split() if isinstance(value, str) else [getattr(v, "value", v) for v in value or ()]
    stages = [int(w[-1]) for w in map(str, words) if re.fullmatch(r"stage[123]", w)]
    others = [w for w in map(str, words) if not re.fullmatch(r"stage[123]", w)]
    if others:
        raise StrategyError(
            f"TrainingArguments.sharding={value!r}: paddle_xla reads stage1, stage2 and stage3; "
            f"{others} has no meaning here (XLA places the sharded state itself): remove it."
        )
    return max(stages, default=0)


def _listed(given, names) -> str:
    return ", ".join(f"{k}={given[k]!r}" for k in names if k in given) or "defaults"
