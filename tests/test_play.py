"""`turncredit play` driven through its standard input: every seat, quitting, the saved games."""

import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

from scripted import scripted_session

from turncredit.cli import main
from turncredit.policy.loading import save_checkpoint

ROOT = Path(__file__).resolve().parents[1]
CONFIG = "configs/20q-starpo.yaml"


def run_play(args, stdin: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "turncredit.cli", "play", CONFIG, *args], input=stdin,
                          capture_output=True, text=True, cwd=ROOT, timeout=300)


def read_games(path):
    return [json.loads(line) for line in Path(path).read_text().splitlines()]


def test_person_asks_and_the_wordnet_oracle_answers(tmp_path):
    out = tmp_path / "games.jsonl"
    typed = "Is it an animal?\nIs it a kind of tool?\nno question mark\nAre they animals?\nIs it a dog?\n"
    p = run_play(["--asker", "person", "--secret", "dog", "--seed", "5", "--out", str(out)], typed)
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    replies = [ln.split("reply:")[1].strip() for ln in lines if "reply:" in ln]
    assert [r.split("   (")[0] for r in replies] == [
        "Yes.", "No.", "Invalid question. Ask exactly one yes/no question: 2-500 characters, ending in a single '?'.",
        "Repeated question. You already asked that; ask something new.", "Finished! The answer was dog."]
    assert "[ 5/20] you:    Is it a dog?" in p.stdout  # the turn count and the echoed question
    assert "It is one of these 8 words:" in p.stdout and "dog" in p.stdout.split("game:")[1]
    assert "== you won in 5 turns; the secret was 'dog'" in p.stdout
    assert "answers: Yes 1 · No 1 · Repeated 1 · Invalid 1 · Finished 1" in p.stdout
    [game] = read_games(out)
    assert game["success"] and [t["label"] for t in game["turns"]] == ["Yes", "No", "Invalid", "Repeated", "Finished"]
    # −5 invalid, −1 repeated, +2 win, −0.05 × 5 turns
    assert sum(t["reward"] for t in game["turns"]) == pytest.approx(-5 - 1 + 2 - 0.25)


def test_person_quits_and_the_secret_is_revealed_at_end_of_input():
    p = run_play(["--asker", "person", "--secret", "violin", "--games", "3"], "Is it an animal?\n")
    assert p.returncode == 0, p.stderr
    assert "== you stopped after 1 turn (the person stopped the game); the secret was 'violin'" in p.stdout
    assert "game 2 of 3" not in p.stdout  # quitting ends the session, not just the game


def test_the_agent_asks_and_the_oracle_answers_while_the_person_watches(tmp_path, tiny_policy, smol_tokenizer):
    tiny = save_checkpoint(tiny_policy, smol_tokenizer, tmp_path / "tiny")
    out = tmp_path / "games.jsonl"
    p = run_play(["--answerer", "oracle", "--model", str(tiny), "--secret", "dog", "--seed", "2", "--games", "2",
                  "--out", str(out), "env.options.max_turns=2", "eval.max_new_tokens=4", "run.threads=1"], "")
    assert p.returncode == 0, p.stderr
    assert p.stdout.count("[ 1/2] agent:") == 2 and p.stdout.count("[ 2/2] agent:") == 2
    assert p.stdout.count("== the agent did not win in 2 turns; the secret was 'dog'") == 2
    assert "== 0 of 2 games won" in p.stdout
    games = read_games(out)
    # the saved games are ordinary rollout episodes: the sampled tokens and their log-probs
    assert len(games) == 2 and all(len(t["action_ids"]) == len(t["sampler_logprobs"]) > 0 for g in games for t in g["turns"])


@pytest.fixture
def scripted_agent(monkeypatch, smol_tokenizer):
    from turncredit.policy.session import PolicySession

    def install(questions):
        session = scripted_session(None, smol_tokenizer, questions)
        monkeypatch.setattr(PolicySession, "from_config", classmethod(lambda cls, cfg, name=None: session))
        return session.backend
    return install


def play_in_process(monkeypatch, capsys, args, typed):
    monkeypatch.chdir(ROOT)
    monkeypatch.setattr(sys, "stdin", io.StringIO(typed))
    code = main(["play", CONFIG, *args])
    return code, capsys.readouterr().out


def test_the_agent_asks_and_a_person_answers(monkeypatch, capsys, scripted_agent):
    backend = scripted_agent(["Is it an animal?", "Is it a bird?", "Is it a cat", "Is it a dog?"])
    code, out = play_in_process(monkeypatch, capsys, ["--secret", "dog", "--seed", "1"], "yes\nmaybe\nn\n")
    assert code == 0
    assert "your secret word: 'dog'" in out
    assert out.count("your answer:") == 3  # asked twice for question 2 ('maybe' is not an answer)
    assert "please type y, n, w, i, r or q" in out
    replies = [ln.split("reply:")[1].split("   (")[0].strip() for ln in out.splitlines() if "reply:" in ln]
    # the person's y and n; the syntax rule and the exact-mention rule answer without asking them
    assert replies[0] == "Yes." and replies[1] == "No." and replies[2].startswith("Invalid question.")
    assert replies[3] == "Finished! The answer was dog."
    assert "== the agent won in 4 turns; the secret was 'dog'" in out
    # the person's answer reached the agent as the next user turn
    assert "Yes." in backend.seen_prompts[1] and "No." in backend.seen_prompts[2]


def test_a_person_says_the_agent_found_their_word_or_stops(monkeypatch, capsys, scripted_agent):
    scripted_agent(["Is it an animal?", "Is it a pet?"])
    code, out = play_in_process(monkeypatch, capsys, ["--secret", "hamster", "--seed", "1"], "y\nw\n")
    assert code == 0 and "== the agent won in 2 turns; the secret was 'hamster'" in out

    scripted_agent(["Is it an animal?", "Is it a pet?"])
    code, out = play_in_process(monkeypatch, capsys, ["--secret", "hamster", "--seed", "1"], "y\nq\n")
    assert code == 0 and "== the agent stopped after 1 turn (the person stopped the game)" in out


def test_play_rejects_a_game_without_an_oracle_seat(monkeypatch, capsys):
    monkeypatch.chdir(ROOT)
    assert main(["play", CONFIG, "--asker", "person", "--answerer", "person"]) == 2
    assert "--answerer" in capsys.readouterr().err
    assert main(["play", "configs/qa-grpo.yaml", "--answerer", "person"]) == 2
    assert "has no oracle seat" in capsys.readouterr().err
    assert main(["play", CONFIG, "--asker", "person", "--secret", "xqzzy"]) == 2
    assert "secret 'xqzzy'" in capsys.readouterr().err
