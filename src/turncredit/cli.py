"""The `turncredit` command: train | eval | sft | demos | pipeline | bench | oracle-check | play | report | study | check.

Every command but report and study takes a YAML config and dotted overrides (`train.lr=1e-5 env.options.max_turns=10`);
`turncredit COMMAND --help` lists the options; the keys, commented and with their defaults, are the
dataclasses of turncredit/config.py (configs/*.yaml for examples).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

OVERRIDES_HELP = (
    "dotted config overrides KEY.PATH=VALUE, the value read as YAML, e.g. train.lr=1e-5 "
    "rollout.group_size=4 model.lora.enabled=true; unknown keys and wrong types are errors"
)


def _add_common(p: argparse.ArgumentParser) -> None:
    p.add_argument("config", help="YAML experiment config, e.g. configs/20q-starpo.yaml")
    p.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help=OVERRIDES_HELP)


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="turncredit", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("train", help="RL training (StarPO/GRPO, RLOO, ...) of a multi-turn agent",
                       description="Roll out groups, assign credit with algo.estimator, update with "
                       "PPO-clip; writes config.yaml, metrics.jsonl, episodes/ and checkpoint/ "
                       "under run.out_dir/run.name.")
    _add_common(p)
    p.add_argument("--run-dir", help="write the run here instead of run.out_dir/run.name")
    p.add_argument("--resume", metavar="RUN_DIR", help="continue that run from its newest complete checkpoint, "
                   "exactly (give the run's own RUN_DIR/config.yaml as CONFIG; train.steps may grow)")
    p.add_argument("--overwrite", action="store_true", help="start again in a run directory that already holds checkpoints (deletes them)")

    p = sub.add_parser("eval", help="Mean@k / Pass@k evaluation of a model or checkpoint",
                       description="Play eval.k games on each task of eval.split and report "
                       "Mean@k ± std, Pass@k, average questions, repeated and invalid rates.")
    _add_common(p)
    p.add_argument("--model", help="model to evaluate (checkpoint dir, local path, hub id or "
                   "'smollm2'); default: model.name from the config")
    p.add_argument("--expert", action="store_true",
                   help="also evaluate the scripted expert questioner (the ceiling)")
    p.add_argument("--out", help="write the results as JSON to this file")
    p.add_argument("--episodes", help="write the model's games as JSONL Episodes to this file "
                   "(what `benchmarks/turn_kinds.py` and `turncredit report` read)")

    p = sub.add_parser("sft", help="supervised warm start on dialogues (assistant tokens only)",
                       description="Fine-tune model.name on sft.data (JSONL of Episodes or "
                       "{'messages': [...]}); with no data, first generate sft.num_demos expert "
                       "demonstrations. Writes a checkpoint that train and eval accept.")
    _add_common(p)
    p.add_argument("--out", help="output directory (default run.out_dir/run.name-sft)")

    p = sub.add_parser("demos", help="write expert demonstration dialogues as Episode JSONL")
    _add_common(p)
    p.add_argument("--out", required=True, help="JSONL file to write")
    p.add_argument("--n", type=int, default=None, help="number of games (default sft.num_demos)")
    p.add_argument("--split", default="train", choices=["train", "val", "test"],
                   help="word split to play on (default train)")

    p = sub.add_parser("pipeline", help="the whole job: eval base → SFT → eval → StarPO → eval",
                       description="Warm-start by SFT on expert demonstrations, train with RL, and "
                       "evaluate after each stage (plus the expert's ceiling); prints the success "
                       "rate after each stage and writes summary.json under the run directory.")
    _add_common(p)
    p.add_argument("--skip-base-eval", action="store_true", help="do not evaluate the untrained model")
    p = sub.add_parser("bench", help="rollout and update throughput on a fixed workload",
                       description="Time whole rollout groups (episodes/s, generated tok/s, prompt "
                       "tokens prefilled) and one update per group (tok/s), after a one-turn "
                       "warm-up; configs/bench-peer-workload.yaml is the peer harness's workload.")
    _add_common(p)
    p.add_argument("--groups", type=int, default=3, help="timed groups (median reported; default 3)")
    p.add_argument("--no-train", action="store_true", help="time rollouts only")
    p.add_argument("--out", help="append the result as one JSON line to this file")
    p = sub.add_parser("oracle-check", help="agreement of the configured 20 Questions oracle with another",
                       description="Ask the config's oracle (env.options.oracle, e.g. an LLM judge) and a "
                       "reference oracle the same questions; report agreement, Cohen's kappa and the "
                       "label confusion table.")
    _add_common(p)
    p.add_argument("--against", default="wordnet", help="the reference oracle (default wordnet)")
    p.add_argument("--questions", help="JSONL of {secret, synset, question}; default: the expert's questions")
    p.add_argument("--n-words", type=int, default=20, help="words the expert plays for questions (default 20)")
    p.add_argument("--split", default="test", choices=["train", "val", "test"], help="their split (default test)")
    p.add_argument("--out", help="write the report as JSON to this file")
    p = sub.add_parser("play", help="play in the terminal: against the agent, or ask the oracle yourself",
                       description="The agent asks and you answer (--answerer person), the agent asks and "
                       "the oracle answers while you watch (--answerer oracle), or you ask and the oracle "
                       "answers (--asker person). Prints the running transcript, the turn count and a "
                       "summary; type q to stop a game.")
    _add_common(p)
    p.add_argument("--asker", choices=["agent", "person"], default="agent", help="who asks (default agent)")
    p.add_argument("--answerer", choices=["person", "oracle"], default=None,
                   help="who answers the agent: person (default) or the configured oracle; a person "
                   "asking is always answered by the oracle")
    p.add_argument("--model", help="the agent (checkpoint dir, local path, hub id or 'smollm2'; default model.name)")
    p.add_argument("--secret", help="the task to play, e.g. the secret word (default: a random one of --split)")
    p.add_argument("--split", choices=["train", "val", "test"], default=None, help="where random tasks come from (default eval.split)")
    p.add_argument("--games", type=int, default=1, help="games to play in a row (default 1)")
    p.add_argument("--seed", type=int, default=None, help="seed for the task draw and sampling (default: a fresh one)")
    p.add_argument("--greedy", action="store_true", help="the agent decodes greedily instead of sampling at eval.temperature")
    p.add_argument("--delay", type=float, default=0.0, help="seconds to pause after each agent turn, for watching")
    p.add_argument("--out", help="write the games as Episode JSONL to this file")
    p = sub.add_parser("report", help="one self-contained HTML page for a training run",
                       description="Learning curves, the evaluation results and a trajectory browser (each "
                       "turn's action, reply, reward and advantage) for RUN_DIR, as one HTML file that "
                       "loads nothing from elsewhere. Takes no config.")
    p.add_argument("run_dir", metavar="RUN_DIR", help="a training run directory (holds metrics.jsonl and episodes/)")
    p.add_argument("--out", help="HTML file to write (default RUN_DIR/report.html)")
    p.add_argument("--max-episodes", type=int, default=2000,
                   help="most episodes to embed, spread evenly over the steps (default 2000)")
    p = sub.add_parser("check", help="validate a config without running it (keys, env, oracle, estimator, model path)",
                       description="Load the config and its overrides, build the environment (its options, "
                       "oracle or retriever settings, word lists and corpus paths), check that the reward "
                       "shaper applies to it, and say where the model comes from; loads no model and "
                       "contacts no server.")
    _add_common(p)
    p = sub.add_parser("compare", help="paired difference of two evaluations of the same held-out games",
                       description="Read two `turncredit eval --out` files that played the identical games "
                       "(same split, num_tasks, k, eval.seed) and print AFTER − BEFORE in Mean@k with its paired 95 % bootstrap interval over the words, and the "
                       "repeated / invalid rates side by side. Takes no config.")
    p.add_argument("before", metavar="BEFORE", help="eval JSON of the reference model")
    p.add_argument("after", metavar="AFTER", help="eval JSON of the model compared with it")
    p.add_argument("--out", help="write the comparison as JSON to this file")
    p = sub.add_parser("study", help="credit methods side by side: arms × seeds at one budget",
                       description="Train every arm of a study spec (YAML: arms, seeds, budget, common "
                       "overrides) for each seed, evaluate each on the held-out split, and write "
                       "results.json, table.md (final metric mean ± std over seeds, wall time) and "
                       "curves_*.png to --out. Finished runs are reused, so a study can be restarted.")
    p.add_argument("spec", metavar="SPEC", help="study spec, e.g. configs/study-20q-credit.yaml")
    p.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="applied to every arm last; " + OVERRIDES_HELP)
    p.add_argument("--out", required=True, help="study directory (one run directory per arm and seed)")
    return ap


def main(argv: list[str] | None = None) -> int:
    from turncredit.memory import cap_onednn_primitive_cache

    cap_onednn_primitive_cache()  # before the first oneDNN primitive: it reads the capacity once
    parser = build_parser()
    # overrides may follow options (`--expert train.lr=1`): argparse leaves those over
    args, extra = parser.parse_known_args(argv)
    takes_config = hasattr(args, "config")  # every command but report, study and compare
    takes_overrides = hasattr(args, "overrides")
    unknown = [x for x in extra if x.startswith("-") or "=" not in x or not takes_overrides]
    if unknown:
        parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    if takes_overrides:
        args.overrides = list(args.overrides) + extra
    from turncredit.config import ConfigError, load_config

    try:
        cfg = load_config(args.config, args.overrides) if takes_config else None
        return COMMANDS[args.command](cfg, args)
    except (ConfigError, FileNotFoundError, ValueError) as e:
        print(f"turncredit: error: {e}", file=sys.stderr)
        return 2


# ---------------------------------------------------------------------------- commands


def cmd_train(cfg, args) -> int:
    from turncredit.train.trainer import Trainer
    from turncredit.workflows import step_line

    if args.resume and args.overwrite:
        raise ValueError("--resume and --overwrite: choose one")
    trainer = Trainer(cfg, args.resume or args.run_dir, resume=bool(args.resume), overwrite=args.overwrite)
    say = print if trainer.dist.is_main else (lambda *a, **k: None)  # one voice for all ranks
    say(trainer.precision_note, flush=True)
    if trainer.resumed_from is not None:
        say(f"resumed from {trainer.resumed_from} (step {trainer.step_idx})", flush=True)
    for m in trainer.train_iter():
        say(step_line(m), flush=True)
    say(f"run directory: {trainer.run_dir}")
    return 0


def cmd_eval(cfg, args) -> int:
    from turncredit.episode import write_episodes
    from turncredit.evaluate import EXPERT_ROW, format_table
    from turncredit.workflows import evaluate_expert, evaluate_model

    rows = {}
    name = args.model or cfg.model.name
    rows[name], episodes = evaluate_model(cfg, name)
    if args.episodes:
        write_episodes(args.episodes, episodes)  # makes the folder
    if args.expert:
        rows[EXPERT_ROW] = evaluate_expert(cfg)
    print(format_table(rows, cfg.eval.k))
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(rows, indent=2))
    return 0


def cmd_demos(cfg, args) -> int:
    from turncredit.episode import write_episodes
    from turncredit.workflows import make_demos

    eps = make_demos(cfg, args.n or cfg.sft.num_demos, args.split)
    write_episodes(args.out, eps)
    wins = sum(ep.success for ep in eps)
    print(f"wrote {len(eps)} expert games to {args.out} ({wins} won)")
    return 0


def cmd_sft(cfg, args) -> int:
    from turncredit.workflows import run_sft_stage

    out = Path(args.out or Path(cfg.run.out_dir) / f"{cfg.run.name}-sft")
    ckpt, s = run_sft_stage(cfg, out)
    dagger = "".join(f"; DAgger round {r['round']}: {r['dialogues']} taken-over games, {r['steps']} steps"
                     for r in s.get("dagger", []))
    print(f"SFT: {s['dialogues']} dialogues{dagger}; {s['steps']} steps in all, loss {s['loss_first']:.3f} → {s['loss_last']:.3f}")
    print(f"checkpoint: {ckpt}")
    return 0


def cmd_pipeline(cfg, args) -> int:
    from turncredit.workflows import run_pipeline

    run_pipeline(cfg, skip_base_eval=args.skip_base_eval)
    return 0


def cmd_bench(cfg, args) -> int:
    from turncredit.bench import format_bench, run_bench

    if args.groups < 1:
        raise ValueError(f"--groups must be ≥ 1, got {args.groups}")
    res = run_bench(cfg, groups=args.groups, train=not args.no_train)
    flags = [f"--groups {args.groups}"] + (["--no-train"] if args.no_train else [])
    res["command"] = " ".join(["turncredit bench", args.config, *args.overrides, *flags])
    print(format_bench(res))
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        with open(args.out, "a") as f:
            f.write(json.dumps(res) + "\n")
    return 0


def cmd_oracle_check(cfg, args) -> int:
    from turncredit.config import ConfigError, env_from_config
    from turncredit.envs.twenty_questions.oracle import ORACLES
    from turncredit.oracle_check import agreement, expert_pairs, format_agreement, read_pairs

    env = env_from_config(cfg)
    if not hasattr(env, "oracle"):
        raise ConfigError(f"env.name: oracle-check needs an environment with an oracle, got {cfg.env.name!r}")
    try:
        reference = ORACLES.get(args.against)()
    except KeyError as e:
        raise ConfigError(f"--against: {e.args[0]}") from None
    pairs = read_pairs(args.questions) if args.questions else expert_pairs(env, args.split, args.n_words, cfg.run.seed)
    res = agreement(pairs, env.oracle, reference)
    print(format_agreement(res, env.options.oracle, args.against))
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(res, indent=2))
    return 0


def cmd_play(cfg, args) -> int:
    from turncredit.episode import write_episodes
    from turncredit.play import Console, play_games

    console = Console(sys.stdin, sys.stdout)
    episodes = play_games(cfg, console, asker=args.asker, answerer=args.answerer, games=args.games,
                          secret=args.secret, split=args.split, seed=args.seed, model=args.model,
                          greedy=args.greedy, delay=args.delay)
    if args.out:
        write_episodes(args.out, episodes)
        console.say(f"games written to {args.out}")
    return 0


def cmd_report(cfg, args) -> int:
    from turncredit.report import write_report

    print(f"report: {write_report(args.run_dir, args.out, args.max_episodes)}")
    return 0


def cmd_check(cfg, args) -> int:
    from turncredit.config import env_from_config
    from turncredit.policy.loading import model_source
    from turncredit.train.trainer import check_applicable
    from turncredit.workflows import env_and_expert

    env = env_from_config(cfg)
    check_applicable(cfg, env)
    if cfg.sft.expert_options and not cfg.sft.data:
        env_and_expert(cfg, cfg.sft.expert_options, for_demos=True)  # the demonstrations' expert accepts its options
    name = cfg.model.name
    where = {"smollm2": "the shipped SmolLM2", "directory": "a local directory",
             "hub": "a hub id, not contacted"}[model_source(name)]
    print(f"{args.config}: OK: env {cfg.env.name} ({env.max_turns} turns), estimator {cfg.algo.estimator}, "
          f"shaper {cfg.algo.reward_shaper}, backend {cfg.rollout.backend}, model {name} ({where})")
    return 0


def distinct_labels(a: str, b: str) -> tuple[str, str]:
    """Short names for two result files: their stems, or as many trailing path parts as it
    takes to tell them apart (runs/x/eval.json vs runs/y/eval.json → x/eval, y/eval)."""
    pa, pb = Path(a).with_suffix("").parts, Path(b).with_suffix("").parts
    n = 1
    while pa[-n:] == pb[-n:] and n < max(len(pa), len(pb)):
        n += 1
    return "/".join(pa[-n:]), "/".join(pb[-n:])


def cmd_compare(cfg, args) -> int:
    from turncredit.evaluate import compare, format_comparison, read_model_evaluation

    before, after = read_model_evaluation(args.before), read_model_evaluation(args.after)
    c = compare(before, after)
    name_before, name_after = distinct_labels(args.before, args.after)
    print(format_comparison(f"{name_after} − {name_before}", c, before["k"]))
    if args.out:
        Path(args.out).write_text(json.dumps(c, indent=2))
    return 0


def cmd_study(cfg, args) -> int:
    from turncredit.study import load_spec, run_study

    spec = load_spec(args.spec)
    try:
        run_study(spec, Path(args.out), args.overrides)
    except ImportError as e:
        raise ValueError(str(e)) from None
    print((Path(args.out) / "table.md").read_text(), end="")
    print(f"study: {args.out} (results.json, table.md, curves_*.png)")
    return 0


COMMANDS = {"compare": cmd_compare, "check": cmd_check, "study": cmd_study, "report": cmd_report, "play": cmd_play, "bench": cmd_bench, "oracle-check": cmd_oracle_check, "train": cmd_train, "eval": cmd_eval, "sft": cmd_sft, "demos": cmd_demos, "pipeline": cmd_pipeline}

if __name__ == "__main__":
    raise SystemExit(main())
