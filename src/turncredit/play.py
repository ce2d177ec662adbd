"""`turncredit play`: a person takes one seat of an environment's game in the terminal.

* the agent asks, a person answers (`--answerer person`): the person's y/n is the oracle's label;
* the agent asks, the oracle answers (`--answerer oracle`): the person watches the game unfold;
* the person asks, the oracle answers (`--asker person`): to inspect an oracle, a judge or a tool.

The agent's games go through the ordinary rollout (`run_episodes`), so what is shown is exactly
what training and evaluation would see, and a game can be saved as an `Episode`.
"""

from __future__ import annotations

import random
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any, Sequence, TextIO

from turncredit.envs.base import EnvFailure, MultiTurnEnv, StepResult, Task
from turncredit.envs.twenty_questions.oracle import Oracle, OracleAnswer
from turncredit.episode import Episode
from turncredit.rollout import SamplingParams, run_episodes, task_rng

#: what a person may type for each oracle label (first match wins; case and final '.' ignored)
PERSON_LABELS = {
    "y": "Yes", "yes": "Yes", "n": "No", "no": "No",
    "w": "Finished", "win": "Finished", "correct": "Finished", "got it": "Finished",
    "i": "Invalid", "invalid": "Invalid", "r": "Repeated", "repeated": "Repeated",
}
QUIT_WORDS = {"q", "quit", "exit", "stop"}
STOPPED = "the person stopped the game"  # the abort reason of a game the person quit
ANSWER_PROMPT = "        your answer: [y]es / [n]o / [w] that's my word / [i]nvalid / [r]epeated / [q]uit > "


class Console:
    """Line-based terminal I/O; a piped (non-terminal) input is echoed so a log reads as a transcript."""

    def __init__(self, stdin: TextIO, stdout: TextIO) -> None:
        self.stdin, self.stdout = stdin, stdout
        self.echo = not (hasattr(stdin, "isatty") and stdin.isatty())

    def say(self, text: str = "") -> None:
        self.stdout.write(text + "\n")
        self.stdout.flush()

    def ask(self, prompt: str) -> str | None:
        """One line from the person, stripped; None at end of input."""
        self.stdout.write(prompt)
        self.stdout.flush()
        line = self.stdin.readline()
        if not line:
            self.say()
            return None
        if self.echo:
            self.stdout.write(line if line.endswith("\n") else line + "\n")
        return line.strip()


class PersonStopped(EnvFailure):
    """The person quit mid-game: the episode ends as aborted, like any failed oracle call."""


def is_quit(line: str | None) -> bool:
    return line is None or line.strip().lower() in QUIT_WORDS


class PersonOracle(Oracle):
    """The oracle seat taken by a person: the label they type is the answer (rules still apply)."""

    def __init__(self, console: Console) -> None:
        self.console = console

    def answer(self, question: str, secret: Any, history: Sequence[tuple[str, str]] = ()) -> OracleAnswer:
        while True:
            line = self.console.ask(ANSWER_PROMPT)
            if is_quit(line):
                raise PersonStopped(STOPPED)
            label = PERSON_LABELS.get(line.lower().rstrip(".!"))
            if label is not None:
                return OracleAnswer(label, hint="The person answering found it invalid." if label == "Invalid" else "")
            self.console.say("        please type y, n, w, i, r or q")


@dataclass
class _Seat:
    state: Any
    turns: int = 0


class Narrated(MultiTurnEnv):
    """Wraps an environment and prints every turn as it is played: question, reply, reward."""

    def __init__(self, env: MultiTurnEnv, console: Console, delay: float = 0.0) -> None:
        super().__init__(env.options)
        self.env, self.console, self.delay = env, console, delay

    def tasks(self, split: str) -> list[Task]:
        return self.env.tasks(split)

    def reset(self, task: Task, rng: random.Random) -> tuple[list[dict[str, str]], _Seat]:
        messages, state = self.env.reset(task, rng)
        self.console.say(f"game: {messages[-1]['content']}")
        return messages, _Seat(state)

    def step(self, seat: _Seat, action_text: str) -> StepResult:
        seat.turns += 1
        self.console.say(f"[{seat.turns:>2}/{self.env.max_turns}] agent:  {action_text.strip()}")
        res = self.env.step(seat.state, action_text)
        self.console.say(turn_line(res))
        if self.delay:
            time.sleep(self.delay)
        return res

    @property
    def max_turns(self) -> int:
        return self.env.max_turns


def turn_line(res: StepResult) -> str:
    return f"        reply:  {res.reply}   (reward {res.reward:+.2f})"


def play_agent(env: MultiTurnEnv, session: Any, task: Task, params: SamplingParams, seed: int,
               console: Console, delay: float = 0.0) -> Episode:
    """One game of the policy against `env` (whose oracle may be a `PersonOracle`), narrated."""
    [ep] = run_episodes(Narrated(env, console, delay), session.backend, session.bridge, [task], ["play"], params, seed)
    return ep


def play_person(env: MultiTurnEnv, task: Task, seed: int, console: Console) -> Episode:
    """One game in which the person types each action and the environment answers it."""
    messages, state = env.reset(task, task_rng(seed, task))
    console.say(f"game: {messages[-1]['content']}")
    ep = Episode(task=task, group_id="play", messages=messages)
    for turn in range(1, env.max_turns + 1):
        line = console.ask(f"[{turn:>2}/{env.max_turns}] you:    ")
        if is_quit(line):
            ep.aborted, ep.abort_reason = True, STOPPED
            return ep
        [res] = env.step_batch([state], [line])
        if isinstance(res, EnvFailure):
            console.say(f"        the environment failed: {res}")
            ep.aborted, ep.abort_reason = True, str(res)
            return ep
        ep.turns.append(res.to_turn(line))
        console.say(turn_line(res))
        if res.done:
            ep.success, ep.outcome = res.success, float(res.success)
            return ep
    ep.truncated = True
    return ep


def summary(ep: Episode, player: str, env: MultiTurnEnv) -> str:
    """The end-of-game lines: outcome, turns, reward, the answers' labels, the env's own metrics."""
    n = ep.num_turns
    if ep.success:
        outcome = f"won in {n} turn{'s' * (n != 1)}"
    elif ep.aborted:
        outcome = f"stopped after {n} turn{'s' * (n != 1)} ({ep.abort_reason or 'aborted'})"
    else:
        outcome = f"did not win in {n} turn{'s' * (n != 1)}"
    lines = [f"== {player} {outcome}; the secret was {ep.task.task_id!r}; total reward {ep.total_reward:+.2f}"]
    labels = Counter(t.label for t in ep.turns if t.label)
    if labels:
        order = ["Yes", "No", "Repeated", "Invalid", "Finished"]
        lines.append("   answers: " + " · ".join(f"{k} {labels[k]}" for k in order if labels[k]))
    metrics = env.summarize([ep]) if ep.turns else {}
    if metrics:
        lines.append("   " + "  ".join(f"{k} {v:.3g}" for k, v in metrics.items()))
    return "\n".join(lines)


def pick_tasks(env: MultiTurnEnv, task_id: str | None, split: str, games: int, rng: random.Random) -> list[Task]:
    if task_id:
        return [env.find_task(task_id)] * games
    return env.sample_tasks(split, games, rng)


def play_games(cfg: Any, console: Console, *, asker: str = "agent", answerer: str | None = None, games: int = 1,
               secret: str | None = None, split: str | None = None, seed: int | None = None,
               model: str | None = None, greedy: bool = False, delay: float = 0.0) -> list[Episode]:
    """`turncredit play`: `games` games with the given seats, each narrated and summed up; stops
    early when the person quits. The answerer defaults to the seat the asker leaves free."""
    from turncredit.config import ConfigError, env_from_config

    answerer = answerer or ("oracle" if asker == "person" else "person")
    if asker == "person" and answerer == "person":
        raise ConfigError("--answerer: a person asking is answered by the oracle; use --answerer oracle")
    if games < 1:
        raise ValueError(f"--games must be ≥ 1, got {games}")
    env = env_from_config(cfg)
    if answerer == "person":
        if not hasattr(env, "oracle"):
            raise ConfigError(f"--answerer person: environment {cfg.env.name!r} has no oracle seat; use --answerer oracle")
        env.oracle = PersonOracle(console)
    seed = seed if seed is not None else random.SystemRandom().randrange(2**31)
    tasks = pick_tasks(env, secret, split or cfg.eval.split, games, random.Random(seed))
    if asker == "agent":
        from turncredit.policy.session import PolicySession

        session = PolicySession.from_config(cfg, model)
        params = SamplingParams.of(cfg.eval, greedy=greedy)
    console.say(f"seed {seed}; {asker} asks, {answerer} answers; type q to stop")
    episodes = []
    for g, task in enumerate(tasks, 1):
        console.say(f"\n-- game {g} of {len(tasks)}")
        if asker == "person":
            ep = play_person(env, task, seed + g, console)
        else:
            if answerer == "person":
                console.say(f"your secret word: {task.task_id!r} (answer the agent's questions about it)")
            else:
                console.say(f"the secret: {task.task_id!r}")
            ep = play_agent(env, session, task, params, seed + g, console, delay)
        episodes.append(ep)
        console.say(summary(ep, "you" if asker == "person" else "the agent", env))
        if ep.abort_reason == STOPPED:
            break
    if len(episodes) > 1:
        won = sum(ep.success for ep in episodes)
        console.say(f"\n== {won} of {len(episodes)} games won")
    return episodes
