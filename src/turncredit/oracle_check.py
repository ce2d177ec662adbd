"""How far to trust a judge: one oracle's answers against another's on the same questions.

Questions come from a JSONL file (`{"secret": ..., "synset": ..., "question": ...}` per line) or
from the scripted expert's games on a word split, which ask the category questions a
questioner really asks. The report: raw agreement, Cohen's κ, and the label confusion table.

    κ = (p_o − p_e) / (1 − p_e),   p_o = share of equal labels,
                                   p_e = Σ_label p_A(label) · p_B(label)
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Sequence

from turncredit.errors import EnvFailure
from turncredit.envs.twenty_questions.words import SecretWord
from turncredit.jsonl import iter_jsonl

Pair = tuple[SecretWord, str]


def cohen_kappa(a: Sequence[str], b: Sequence[str]) -> float:
    """κ of two label sequences; 1.0 when both are constant and equal (no chance to correct)."""
    n = len(a)
    if n == 0 or n != len(b):
        raise ValueError(f"cohen_kappa: expected two equally long non-empty label lists, got {len(a)} and {len(b)}")
    p_o = sum(x == y for x, y in zip(a, b)) / n
    ca, cb = Counter(a), Counter(b)
    p_e = sum(ca[k] * cb[k] for k in ca) / (n * n)
    return 1.0 if p_e == 1.0 else (p_o - p_e) / (1 - p_e)


def read_pairs(path: str) -> list[Pair]:
    out = []
    for where, row in iter_jsonl(path, "question"):
        try:
            out.append((SecretWord(row["secret"], row["synset"], row.get("category", "")), str(row["question"])))
        except (KeyError, TypeError):
            raise ValueError(f"{where}: expected {{'secret', 'synset', 'question'}}") from None
    return out


def expert_pairs(env: Any, split: str, n_words: int, seed: int) -> list[Pair]:
    """The questions the scripted expert asks on `n_words` words of `split` (each once)."""
    from turncredit.rollout import task_rng

    play = env.expert()
    out: list[Pair] = []
    for t in env.tasks(split)[:n_words]:
        ep = play(env, t, task_rng(seed, t))
        secret = SecretWord(t.data["secret"], t.data["synset"], t.data.get("category", ""))
        out += [(secret, turn.action_text) for turn in ep.turns]
    return out


def agreement(pairs: Sequence[Pair], judge: Any, reference: Any) -> dict[str, Any]:
    """Ask both oracles every question (no history); a judge failure is counted, not scored."""
    a, b, failed = [], [], 0
    for secret, q in pairs:
        try:
            la = judge.answer(q, secret).label
        except EnvFailure:
            failed += 1
            continue
        a.append(la)
        b.append(reference.answer(q, secret).label)
    confusion: dict[str, dict[str, int]] = {}
    for x, y in zip(a, b):
        confusion.setdefault(x, {}).setdefault(y, 0)
        confusion[x][y] += 1
    return {"questions": len(pairs), "judged": len(a), "judge_failures": failed,
            "agreement": sum(x == y for x, y in zip(a, b)) / len(a) if a else 0.0,
            "kappa": cohen_kappa(a, b) if a else 0.0, "confusion": confusion}


def format_agreement(res: dict[str, Any], judge: str, reference: str) -> str:
    labels = sorted({k for row in res["confusion"].values() for k in row} | set(res["confusion"]))
    corner = f"{judge} / {reference}"
    lines = [f"{judge} vs {reference}: {res['judged']} of {res['questions']} questions judged "
             f"({res['judge_failures']} judge failures); agreement {100 * res['agreement']:.1f} %, "
             f"Cohen's kappa {res['kappa']:.3f}", "",
             f"{corner:<22}" + "".join(f"{label:>10}" for label in labels)]
    for x in labels:
        lines.append(f"{x:<22}" + "".join(f"{res['confusion'].get(x, {}).get(y, 0):>10}" for y in labels))
    return "\n".join(lines)

