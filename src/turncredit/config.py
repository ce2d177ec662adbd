"""Typed experiment configs: YAML files plus dotted command-line overrides, validated.

A typo in a config silently running the default is the worst kind of bug in an RL sweep, so an
unknown key or a wrong type is an error naming the key path and what was expected.
"""

from __future__ import annotations

import dataclasses
import re
import types
import typing
from pathlib import Path
from typing import Any, Literal, Union

import yaml

from turncredit.config_types import (
    AlgoConfig,
    Bf16Setting,
    Config,
    EnvConfig,
    EvalConfig,
    LoraConfig,
    ModelConfig,
    RolloutConfig,
    RunConfig,
    SFTConfig,
    TrainConfig,
)  # re-exported: callers build and read the sections from here
from turncredit.errors import ConfigError
from turncredit.registry import unknown_options


_FLOAT = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?")


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
    if cfg.sft.env_options:  # env.options already passed: a bad key here is one of sft.env_options
        validate_env_options(cfg, for_demos=True)
    validate_estimator(cfg)
    validate_backend(cfg)
    validate_loggers(cfg)
    _check_ranges(cfg)
    return cfg


def validate_env_options(cfg: Config, for_demos: bool = False) -> Any:
    """Validate `env.options` against the chosen environment's own Options dataclass; with
    `for_demos`, the options the demonstrations are played with (sft.env_options merged over them)."""
    from turncredit.envs import ENVS

    try:
        env_cls = ENVS.get(cfg.env.name)
    except KeyError as e:
        raise ConfigError(f"env.name: {e.args[0]}") from None
    data = {**cfg.env.options, **cfg.sft.env_options} if for_demos else cfg.env.options
    options = build(env_cls.Options, data, "sft.env_options" if for_demos else "env.options")
    if int(getattr(options, "concurrency", 1)) < 1:
        raise ConfigError(f"env.options.concurrency: expected an integer ≥ 1, got {options.concurrency!r}")
    return options


def env_from_config(cfg: Config, for_demos: bool = False) -> Any:
    """The configured environment, its options validated; with `for_demos`, the one the SFT
    demonstrations are played in (sft.env_options merged over env.options)."""
    from turncredit.envs import make_env

    return make_env(cfg.env.name, validate_env_options(cfg, for_demos))


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


def _check_keywords(fn: Any, options: dict[str, Any], where: str, name: str,
                    exclude: tuple[str, ...] = (), kind: str = "") -> None:
    unknown, accepted = unknown_options(fn, options, exclude=exclude)
    if unknown:
        raise ConfigError(f"{where}.{unknown[0]}: unknown option of {kind}{name!r} "
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
    from turncredit.policy.backends import BACKENDS

    try:
        cls = BACKENDS.get(cfg.rollout.backend)
    except KeyError as e:
        raise ConfigError(f"rollout.backend: {e.args[0]}") from None
    _check_keywords(cls.__init__, cfg.rollout.backend_options, "rollout.backend_options",
                    cfg.rollout.backend, exclude=("dtype",), kind="backend ")


def _check_ranges(cfg: Config) -> None:
    checks = [
        ("rollout.group_size", cfg.rollout.group_size >= 1, "≥ 1"),
        ("rollout.tasks_per_step", cfg.rollout.tasks_per_step >= 1, "≥ 1"),
        ("rollout.temperature", cfg.rollout.temperature > 0, "> 0"),
        ("rollout.top_p", 0 < cfg.rollout.top_p <= 1, "in (0, 1]"),
        ("rollout.top_k", cfg.rollout.top_k >= 0, "≥ 0 (0 = no top-k cut)"),
        ("eval.top_k", cfg.eval.top_k >= 0, "≥ 0 (0 = no top-k cut)"),
        ("algo.keep_group_fraction", 0 < cfg.algo.keep_group_fraction <= 1, "in (0, 1]"),
        ("algo.expert_guidance", 0 <= cfg.algo.expert_guidance <= cfg.rollout.group_size,
         "in [0, rollout.group_size] (0 = on-policy groups only)"),
        ("algo.expert_sft_coef", cfg.algo.expert_sft_coef >= 0 and (cfg.algo.expert_sft_coef == 0 or cfg.algo.expert_guidance > 0),
         "≥ 0, and 0 unless algo.expert_guidance > 0 (the expert's turns it trains on come from the guided members)"),
        ("algo.guidance_expert_options", not cfg.algo.guidance_expert_options or cfg.algo.expert_guidance > 0,
         "empty unless algo.expert_guidance > 0 (they configure the expert that takes over)"),
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
        ("sft.epochs", cfg.sft.epochs >= 1 or (cfg.sft.epochs == 0 and cfg.sft.dagger_rounds >= 1),
         "≥ 1 (0 only with sft.dagger_rounds ≥ 1: DAgger straight from model.name)"),
        ("sft.batch_size", cfg.sft.batch_size >= 1, "≥ 1"),
        ("sft.num_demos", cfg.sft.num_demos >= 1, "≥ 1"),
        ("sft.dagger_rounds", cfg.sft.dagger_rounds >= 0, "≥ 0 (0 = no DAgger)"),
        ("sft.dagger_games", cfg.sft.dagger_games >= 1, "≥ 1"),
        ("sft.dagger_epochs", cfg.sft.dagger_epochs >= 1, "≥ 1"),
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
