"""The command line end to end with the tiny model: sft → train → eval, help and bad input."""

import json
from pathlib import Path

import pytest

from turncredit.cli import build_parser, main
from turncredit.episode import read_episodes
from turncredit.policy.loading import save_checkpoint

CONFIG = "configs/20q-starpo.yaml"
SMALL = ["env.options.max_turns=2", "env.options.num_candidates=4", "rollout.tasks_per_step=2",
         "rollout.group_size=2", "rollout.max_new_tokens=4", "eval.num_tasks=2", "eval.k=2",
         "eval.max_new_tokens=4", "train.steps=1", "sft.num_demos=4", "sft.epochs=1", "run.threads=0"]


@pytest.fixture
def tiny_dir(tmp_path, tiny_policy, smol_tokenizer):
    return str(save_checkpoint(tiny_policy, smol_tokenizer, tmp_path / "tiny"))


@pytest.fixture(autouse=True)
def repo_root(monkeypatch):
    from pathlib import Path
    monkeypatch.chdir(Path(__file__).resolve().parents[1])


def test_sft_train_eval_from_the_command_line(tmp_path, tiny_dir, capsys):
    out = tmp_path / "out"
    common = SMALL + [f"model.name={tiny_dir}", f"run.out_dir={out}", "run.name=cli"]
    assert main(["sft", CONFIG, *common]) == 0
    sft_ckpt = out / "cli-sft" / "checkpoint"
    assert (sft_ckpt / "model.safetensors").is_file()
    assert len((out / "cli-sft" / "demos.jsonl").read_text().splitlines()) == 4

    assert main(["train", CONFIG, *common, f"model.name={sft_ckpt}"]) == 0
    assert (out / "cli" / "checkpoint" / "model.safetensors").is_file()
    assert "step    1" in capsys.readouterr().out

    res, games = tmp_path / "eval.json", tmp_path / "games" / "eval.jsonl"
    assert main(["eval", CONFIG, "--model", str(out / "cli" / "checkpoint"), "--expert", "--out", str(res),
                 "--episodes", str(games), *common]) == 0
    rows = json.loads(res.read_text())
    model_row = rows[str(out / "cli" / "checkpoint")]
    assert model_row["n_tasks"] == 2 and model_row["n_samples"] == 4
    played = read_episodes(games)  # the model's games, not the expert's
    assert len(played) == 4 and sum(ep.success for ep in played) / 4 == model_row["mean_at_k"]
    assert rows["expert (ceiling)"]["mean_at_k"] == 1.0
    assert "Mean@2" in capsys.readouterr().out


@pytest.mark.parametrize("command", ["train", "eval", "sft", "demos", "pipeline", "bench", "oracle-check", "play", "report", "study", "check", "compare"])
def test_help_explains_every_option(command, capsys):
    with pytest.raises(SystemExit):
        build_parser().parse_args([command, "--help"])
    text = capsys.readouterr().out
    sub = build_parser()._subparsers._group_actions[0].choices[command]
    for action in sub._actions:
        if action.help == "==SUPPRESS==" or action.dest == "help":
            continue
        assert action.help, f"{command} {action.dest} has no help"
        for opt in action.option_strings:
            assert opt in text


@pytest.mark.parametrize("override, message", [
    ("model.name=./no/such/model", "model path not found: ./no/such/model"),
    ("env.options.words_test=/no/such/words.tsv", "word list not found: /no/such/words.tsv"),
    ("train.stepz=3", "train.stepz: unknown key"),
    ("env.options.retriever_options={corpus: /no/corpus.jsonl}", "corpus not found: /no/corpus.jsonl"),
    ("env.options.questions_test=/no/q.jsonl", "question file not found: /no/q.jsonl"),
])
def test_bad_input_is_a_one_line_error(override, message, capsys):
    config = "configs/qa-grpo.yaml" if "retriever" in override or "questions" in override else CONFIG
    assert main(["eval", config, override, "eval.num_tasks=1"]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1, err


def test_a_corrupt_model_checkpoint_is_a_one_line_error(tmp_path, tiny_dir, capsys):
    weights = next(Path(tiny_dir).glob("*.safetensors"))
    weights.write_bytes(weights.read_bytes()[:64])
    assert main(["eval", CONFIG, "--model", tiny_dir, "eval.num_tasks=1"]) == 2
    err = capsys.readouterr().err.strip()
    assert f"model {tiny_dir}: corrupt or truncated safetensors" in err and len(err.splitlines()) == 1, err


def test_overrides_may_follow_options():
    import turncredit.cli as cli

    seen = {}
    cli.COMMANDS["eval"], saved = (lambda cfg, args: seen.update(lr=cfg.train.lr, expert=args.expert) or 0), cli.COMMANDS["eval"]
    try:
        assert main(["eval", CONFIG, "--expert", "train.lr=0.5"]) == 0
    finally:
        cli.COMMANDS["eval"] = saved
    assert seen == {"lr": 0.5, "expert": True}


def test_bench_reports_the_peer_workload_in_the_peers_terms(tmp_path, tiny_dir, capsys):
    out = tmp_path / "bench.jsonl"
    assert main(["bench", "configs/bench-peer-workload.yaml", f"model.name={tiny_dir}", "run.threads=0",
                 "env.options.max_turns=2", "rollout.max_new_tokens=3", "--groups", "2", "--out", str(out)]) == 0
    res = json.loads(out.read_text())
    assert [r["step"] for r in res["runs"]] == [1, 2]
    for r in res["runs"]:
        assert r["episodes"] == 32  # 8 secrets × 4 rollouts
        assert 0 < r["gen_tokens"] <= 32 * 2 * 3 and r["turns"] <= 64
        # the 32 openings are identical, so the backend encodes the opening once
        assert r["prompt_tokens_prefilled"] < r["prompt_tokens_appended"]
        assert r["optimizer_steps"] == 1 and r["update_sequence_tokens"] > r["update_action_tokens"] > 0
    assert res["median"]["seconds"] == pytest.approx(sum(r["seconds"] for r in res["runs"]) / 2)
    assert res["peak_rss_mib"] > 0 and res["workload"]["env"] == "peer_20q"
    assert "episodes/s" in capsys.readouterr().out


def test_check_validates_every_shipped_recipe_without_loading_a_model(capsys):
    from pathlib import Path as P

    for f in sorted(P("configs").glob("*.yaml")):
        if f.name.startswith("study-"):
            continue
        assert main(["check", str(f)]) == 0, f
    out = capsys.readouterr().out
    assert "configs/20q-starpo-4b-eval.yaml: OK: env twenty_questions (20 turns)" in out
    assert "model Klingspor/StarPO-4B (a hub id, not contacted)" in out
    assert main(["check", CONFIG, "model.name=./no/such/dir"]) == 2
    assert main(["check", "configs/qa-grpo.yaml", "algo.reward_shaper=belief", "algo.shaper_options={}"]) == 2
    assert "needs tasks with 'secret'" in capsys.readouterr().err



def test_compare_prints_the_paired_difference_of_two_evaluations(tmp_path, capsys):
    from turncredit.envs.twenty_questions import TwentyQuestionsEnv
    from turncredit.episode import Episode, Task, Turn
    from turncredit.evaluate import summarize

    def ep(task, won):
        return Episode(task=Task(task), group_id=task, messages=[], success=won,
                       turns=[Turn([], [], [], "q?", label="Finished" if won else "Repeated")])

    env = TwentyQuestionsEnv()
    before = summarize([ep("a", False), ep("a", True), ep("b", False), ep("b", False)], k=2, env=env)
    after = summarize([ep("a", True), ep("a", True), ep("b", True), ep("b", False)], k=2, env=env)
    expert = summarize([ep("a", True), ep("b", True)], k=1, env=env)  # `eval --expert` adds this row; not a model
    (tmp_path / "sft.json").write_text(json.dumps({"runs/sft": before, "expert (ceiling)": expert}))
    (tmp_path / "rl.json").write_text(json.dumps({"runs/rl": after}))
    assert main(["compare", str(tmp_path / "sft.json"), str(tmp_path / "rl.json"), "--out", str(tmp_path / "c.json")]) == 0
    line = capsys.readouterr().out
    assert "[rl − sft] Mean@2 +50.0 points" in line and "[+50.0, +50.0] over 2 words" in line
    assert json.loads((tmp_path / "c.json").read_text())["difference"] == 0.5
    (tmp_path / "bad.json").write_text(json.dumps({"m": {"mean_at_k": 0.5}}))
    assert main(["compare", str(tmp_path / "bad.json"), str(tmp_path / "rl.json")]) == 2
    assert "expected one model's evaluation with per_task_success" in capsys.readouterr().err


def test_compare_names_two_files_of_one_name_by_their_folders():
    from turncredit.cli import distinct_labels

    assert distinct_labels("runs/sft/eval.json", "runs/rl/eval.json") == ("sft/eval", "rl/eval")
    assert distinct_labels("a/x/run/eval.json", "b/x/run/eval.json") == ("a/x/run/eval", "b/x/run/eval")
    assert distinct_labels("sft.json", "out/rl.json") == ("sft", "rl")


def test_evaluation_in_a_fresh_process_plays_the_same_games(tmp_path, tiny_dir):
    """The pipeline evaluates in a child process (a clean heap): same games, same result, the
    games written, and the child's own peak memory reported."""
    from turncredit.config import load_config
    from turncredit.workflows import evaluate_fresh, evaluate_model

    cfg = load_config(CONFIG, SMALL + ["run.threads=1"])
    here, eps = evaluate_model(cfg, tiny_dir)
    there = evaluate_fresh(cfg, tiny_dir, tmp_path / "games.jsonl")
    games = read_episodes(tmp_path / "games.jsonl")
    assert [[t.action_text for t in e.turns] for e in games] == [[t.action_text for t in e.turns] for e in eps]
    assert there["mean_at_k"] == here["mean_at_k"] and there["tokens_generated"] == here["tokens_generated"]
    assert there["process_peak_rss_gb"] > 0.1
