"""The workflows the CLI and the study share: evaluate a model or the expert, make
demonstrations, the SFT stage, the main job (pipeline). The CLI only parses arguments and
calls these; nothing here parses a command line.
"""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path
from typing import Any

from turncredit.config import Config
from turncredit.episode import Episode


def step_line(m: dict[str, Any]) -> str:
    """One training step's metrics as the line the CLI and the study print."""
    return (f"step {m['step']:>4}  success {100 * m['success_rate']:5.1f}%  reward {m['reward_mean']:+.3f}"
            f"  group-std {m['group_reward_std']:.3f}  turns {m['turns_mean']:.1f}  kl {m['approx_kl']:.4f}"
            f"  clip {m['clip_fraction']:.3f}  rollout {m['seconds_rollout']:.0f}s  update {m['seconds_update']:.0f}s")


def evaluate_model(cfg: Config, model_name: str, session: Any = None) -> tuple[dict[str, Any], list[Episode]]:
    """The model (a name, or the loaded `session`) on the held-out games of `cfg.eval`."""
    from turncredit.config import env_from_config
    from turncredit.evaluate import eval_tasks, evaluate_policy
    from turncredit.policy.session import PolicySession
    from turncredit.rollout import SamplingParams, resolve_refill

    e = cfg.eval
    env = env_from_config(cfg)
    tasks = eval_tasks(env, e.split, e.num_tasks)  # a bad word file fails before the model loads
    if session is None:
        session = PolicySession.from_config(cfg, model_name, sampler_dtype=e.dtype)
    else:
        session = session.with_sampler(cfg, e.dtype)
    t0 = time.perf_counter()
    res, eps = evaluate_policy(session, env, tasks, e.k, SamplingParams.of(e),
                               seed=e.seed, batch_size=e.batch_size,
                               refill=resolve_refill(cfg.rollout.continuous_batching, session.device))
    res["seconds"] = time.perf_counter() - t0
    return res, eps


def _evaluate_to_file(cfg: Config, model_name: str, episodes_path: str) -> dict[str, Any]:
    """`evaluate_fresh`'s child: evaluate, write the games, report this process's own peak."""
    from turncredit.episode import write_episodes
    from turncredit.memory import peak_rss_gb

    res, eps = evaluate_model(cfg, model_name)
    write_episodes(episodes_path, eps)
    res["process_peak_rss_gb"] = round(peak_rss_gb(), 2)
    return res


def evaluate_fresh(cfg: Config, model_name: str, episodes_path: str | Path) -> dict[str, Any]:
    """`evaluate_model` in a new process, the games written to `episodes_path`.

    The pipeline's evaluations ran in the process that had just trained: after the bf16 SFT
    stage its evaluation peaked at 8.67 GB where the same kind of evaluation alone peaks at
    ~4.9 GB (benchmarks/20q-learning-diagnosis.md, O). A fresh process starts from a clean heap;
    it costs the imports and a model load, seconds against minutes of play.
    """
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(max_workers=1, mp_context=mp.get_context("spawn")) as pool:
        return pool.submit(_evaluate_to_file, cfg, model_name, str(episodes_path)).result()


def env_and_expert(cfg: Config, options: dict[str, Any] | None = None, for_demos: bool = False):
    """The environment and its scripted expert: the perfect one by default (the ceiling), or
    with `options` (sft.expert_options) for demonstrations; `for_demos` plays in the
    demonstrations' environment (sft.env_options)."""
    from turncredit.config import ConfigError, env_from_config

    env = env_from_config(cfg, for_demos)
    try:
        play = env.expert(**(options or {}))
    except (TypeError, ValueError) as e:  # an unknown or out-of-range option of the expert
        raise ConfigError(f"sft.expert_options: {e}") from None
    if play is None:
        raise ConfigError(f"env.name: {cfg.env.name!r} has no scripted expert; give sft.data instead")
    return env, play


def evaluate_expert(cfg: Config) -> dict[str, Any]:
    """The scripted expert on the held-out games: the ceiling row of every table."""
    from turncredit.evaluate import eval_tasks, evaluate_player

    env, play = env_and_expert(cfg)
    res, eps = evaluate_player(play, env, eval_tasks(env, cfg.eval.split, cfg.eval.num_tasks), cfg.eval.seed)
    res.update(env.summarize(eps))
    return res


def make_demos(cfg: Config, n: int, split: str = "train") -> list[Episode]:
    """`n` expert games on `split` (sft.expert_options, sft.env_options), each its own task instance."""
    import random

    from turncredit.rollout import task_rng

    env, play = env_and_expert(cfg, cfg.sft.expert_options, for_demos=True)
    rng = random.Random(cfg.run.seed)
    tasks = env.sample_tasks(split, n, rng)
    # each demo its own task instance (distinct candidate lists when a word repeats)
    return [play(env, t, task_rng(cfg.run.seed * 7 + i, t)) for i, t in enumerate(tasks)]


def dagger_dialogues(cfg: Config, session: Any, n: int, seed: int) -> tuple[list[list[dict[str, Any]]], dict[str, Any]]:
    """DAgger's relabelling (Ross et al. 2011), with the expert rolling out: the model plays
    `n` training games (rollout sampling, sft.env_options' environment); in a game of T ≥ 2
    turns the expert takes over after t ~ U{1, …, T−1} of the model's turns and plays on.
    Each game becomes one chat whose first t assistant messages are context (weight 0) and
    the expert's the targets: what to ask from the states the model's own mistakes reach (a
    repeat, an invalid question, a wrong guess), which the expert's own games never show.
    Returns the chats and how the model played those games."""
    import random

    from turncredit.config import ConfigError
    from turncredit.evaluate import summarize
    from turncredit.guidance import check_can_take_over, expert_takeover
    from turncredit.rollout import SamplingParams, resolve_refill, run_episodes

    env, play = env_and_expert(cfg, cfg.sft.expert_options, for_demos=True)
    try:
        check_can_take_over(play, env, "sft.dagger_rounds")
    except ValueError as e:
        raise ConfigError(str(e)) from None
    rng = random.Random(seed)
    tasks = env.sample_tasks("train", n, rng)
    # whole games of up to max_turns, as in evaluation: eval.batch_size is the row count sized for their memory
    games = run_episodes(env, session.backend, session.bridge, tasks, [f"{t.task_id}#{i}" for i, t in enumerate(tasks)],
                         SamplingParams.of(cfg.rollout), seed=seed, batch_size=cfg.eval.batch_size,
                         refill=resolve_refill(cfg.rollout.continuous_batching, session.device))
    chats = []
    for ep in games:
        if ep.aborted or ep.num_turns < 2:
            continue
        t = rng.randint(1, ep.num_turns - 1)
        taken = expert_takeover(play, env, ep, t, seed)
        if taken is None:
            continue
        chat = taken.chat()
        for m in [m for m in chat if m["role"] == "assistant"][:t]:
            m["weight"] = 0  # the model's own questions: context, not targets
        chats.append(chat)
    played = summarize(games, 1, env)
    return chats, {key: played[key] for key in ("mean_at_k", "repeated_rate", "invalid_rate", "avg_questions") if key in played}


def run_sft_stage(cfg: Config, out_dir: Path) -> tuple[Path, dict[str, Any]]:
    """Demonstrations (or sft.data) → SFT → checkpoint at out_dir/checkpoint."""
    from turncredit.episode import write_episodes
    from turncredit.policy.session import PolicySession
    from turncredit.precision import choose_precision
    from turncredit.policy.scoring import model_device
    from turncredit.train.sft import load_dialogues, run_sft

    out_dir.mkdir(parents=True, exist_ok=True)
    data = cfg.sft.data
    if not data:
        data = str(out_dir / "demos.jsonl")
        write_episodes(data, make_demos(cfg, cfg.sft.num_demos))
    dialogues = load_dialogues(data)
    session = PolicySession.from_config(cfg)
    precision = choose_precision(cfg.sft.bf16, model_device(session.model))  # what run_sft will use
    print(f"[sft] precision: {precision.note('SFT')}", flush=True)
    log = out_dir / "sft_metrics.jsonl"
    log.unlink(missing_ok=True)
    hist = run_sft(session, dialogues, cfg.sft, seed=cfg.run.seed, log_path=log)
    rounds = []
    for k in range(1, cfg.sft.dagger_rounds + 1):
        rounds.append(_dagger_round(cfg, session, dialogues, k, out_dir))
        hist += rounds[-1].pop("history")
    ckpt = out_dir / "checkpoint"
    session.save(ckpt, extra={"stage": "sft", "data": data, "steps": len(hist), "precision": precision.to_dict()})
    summary = {"dialogues": len(dialogues), "steps": len(hist),
               "loss_first": hist[0]["loss"], "loss_last": hist[-1]["loss"], "precision": precision.to_dict()}
    if rounds:
        summary["dagger"] = rounds
    return ckpt, summary


def _dagger_round(cfg: Config, session: Any, demos: list, k: int, out_dir: Path) -> dict[str, Any]:
    """One DAgger round: relabel the model's games, then SFT on them and as many demonstrations."""
    import random

    from turncredit.train.sft import run_sft

    t0 = time.perf_counter()
    seed = cfg.run.seed * 1000 + k
    chats, played = dagger_dialogues(cfg, session, cfg.sft.dagger_games, seed)
    with (out_dir / f"dagger_{k}.jsonl").open("w") as f:
        f.writelines(json.dumps({"messages": c}) + "\n" for c in chats)
    seconds_play = time.perf_counter() - t0
    print(f"[sft] DAgger round {k}: the model won {100 * played['mean_at_k']:.1f}% of {cfg.sft.dagger_games} "
          f"training games in {seconds_play:.0f} s; {len(chats)} taken over by the expert", flush=True)
    mix = chats + random.Random(seed).sample(demos, min(len(demos), len(chats)))
    log = out_dir / f"sft_metrics_dagger{k}.jsonl"
    log.unlink(missing_ok=True)
    hist = run_sft(session, mix, dataclasses.replace(cfg.sft, epochs=cfg.sft.dagger_epochs), seed=seed, log_path=log)
    return {"round": k, "model_played": played, "dialogues": len(chats), "steps": len(hist),
            "seconds_play": round(seconds_play, 1), "history": hist}


def run_pipeline(cfg: Config, skip_base_eval: bool = False) -> dict[str, Any]:
    """The main job: expert ceiling → (untrained) → SFT → eval → RL → eval on the identical
    held-out games, with the paired RL − SFT difference; prints as it goes, returns the summary
    (also written to RUN_DIR/summary.json)."""
    from turncredit.evaluate import EXPERT_ROW, compare, format_comparison, format_table
    from turncredit.memory import StagePeak, peak_rss_gb, release_freed
    from turncredit.train.trainer import Trainer

    run_dir = Path(cfg.run.out_dir) / cfg.run.name
    run_dir.mkdir(parents=True, exist_ok=True)
    summary: dict[str, Any] = {"stages": {}, "eval": {}}

    def stage(name: str, fn):
        t0 = time.perf_counter()
        with StagePeak() as mem:
            out = fn()
        # an evaluation runs in a child process: the machine held this process and the child's peak
        child = out.get("process_peak_rss_gb", 0.0) if isinstance(out, dict) else 0.0
        peak = round(mem.peak_gb + child, 2) if mem.peak_gb is not None else None
        summary["stages"][name] = {"seconds": round(time.perf_counter() - t0, 1),
                                   "peak_rss_gb": peak, "rss_after_gb": mem.after_gb}
        print(f"[{name}] {summary['stages'][name]['seconds']:.0f} s, peak RSS {peak} GB, "
              f"after {mem.after_gb} GB", flush=True)
        return out

    def evaluated(label: str, cfg_, model: str) -> dict[str, Any]:
        episodes = run_dir / "eval" / f"{label.replace(' ', '_').replace('+', 'and')}.jsonl"
        return evaluate_fresh(cfg_, model, episodes)  # write_episodes makes the folder

    def report(label: str, res: dict[str, Any]) -> None:
        summary["eval"][label] = res
        print(f"[{label}] success Mean@{res['k']} {100 * res['mean_at_k']:.1f}%  "
              f"Pass@{res['k']} {100 * res['pass_at_k']:.1f}%  turns {res['avg_questions']:.2f}"
              + (f"  F1 {res['f1']:.3f}  recall {res['recall']:.3f}" if "f1" in res else ""), flush=True)
        (run_dir / "summary.json").write_text(json.dumps(summary, indent=2))

    report(EXPERT_ROW, stage("eval expert", lambda: evaluate_expert(cfg)))
    if not skip_base_eval:
        report("untrained", stage("eval untrained", lambda: evaluated("untrained", cfg, cfg.model.name)))
    ckpt, sft_summary = stage("sft", lambda: run_sft_stage(cfg, run_dir / "sft"))
    summary["sft"] = sft_summary
    print(f"[sft] {sft_summary['steps']} steps, loss {sft_summary['loss_first']:.3f} → {sft_summary['loss_last']:.3f}", flush=True)
    report("after SFT", stage("eval SFT", lambda: evaluated("after SFT", cfg, str(ckpt))))

    rl_cfg = dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, name=str(ckpt)))

    def rl():
        trainer = Trainer(rl_cfg, run_dir / "rl", overwrite=True)  # the SFT stage above was redone too
        print("[rl] " + trainer.precision_note, flush=True)
        for m in trainer.train_iter():
            print("[rl] " + step_line(m), flush=True)
        # the evaluation loads the saved checkpoint in its own process: free the trainer here
        del trainer
        release_freed()

    stage("rl", rl)
    report("after SFT + RL", stage("eval RL", lambda: evaluated("after SFT + RL", rl_cfg, str(run_dir / "rl" / "checkpoint"))))
    # both evaluations played the identical games (same words, k, seeds): a paired comparison
    summary["rl_minus_sft"] = compare(summary["eval"]["after SFT"], summary["eval"]["after SFT + RL"])
    summary["peak_rss_gb"] = max([round(peak_rss_gb(), 2)] + [v["peak_rss_gb"] for v in summary["stages"].values()
                                                               if v["peak_rss_gb"] is not None])
    (run_dir / "summary.json").write_text(json.dumps(summary, indent=2))
    print(format_table({k: v for k, v in summary["eval"].items()}, cfg.eval.k))
    print(format_comparison("RL − SFT", summary["rl_minus_sft"], cfg.eval.k))
    print(f"stage seconds: {json.dumps({k: v['seconds'] for k, v in summary['stages'].items()})}")
    print(f"peak RSS of the job: {summary['peak_rss_gb']} GB")
    print(f"summary: {run_dir / 'summary.json'}")
    return summary
