"""Multi-answer QA with a search tool (SPADER's protocol).

Each turn the agent searches (several queries in one call) or answers with a list of entities;
the answer ends the episode with its set F1 as the reward. Tool replies are the top-k passages
of each query, each capped in characters, and the whole reply of one call optionally capped too (SPADER's
retriever fills a per-call character budget passage by passage, in rank order across the
call's queries). The instruction goes in a system message or, as SPADER's reference places it,
before the question in the user message. A malformed action gets a format reply and
`invalid_reward`, never a crash. One turn's searches, across all active episodes, go to the
retriever in one call (`step_batch`).

Each turn's label is Search, Answer or Invalid, and its `QARecord` carries what the diversity
reward and the metrics need: `queries` (how many were issued), `retrieved_gold` (canonical
names of gold entities first or again seen in the passages) and, on the answer turn, the
answers with their precision / recall / f1 / exact_match.
"""

from __future__ import annotations

import random
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from turncredit.envs.base import ENVS, EnvFailure, MultiTurnEnv, StepResult, Task, TurnRecord
from turncredit.envs.templates import resolve_template
from turncredit.envs.multi_answer_qa.data import SPLITS, Question, default_data_dir, load_questions
from turncredit.envs.multi_answer_qa.matching import RECALL_AT, mentioned_entities, reference_score, set_score
from turncredit.envs.multi_answer_qa.parse import Action, parse_action
from turncredit.search.base import RETRIEVERS, Passage

SYSTEM_PROMPT = (
    "Answer the question with every correct entity you can find. You have a search tool over "
    "an encyclopedia. Each turn, first think briefly inside <think>...</think>, then either "
    "search with a JSON list of queries, e.g. <tool_call>[\"query one\", \"query two\"]</tool_call>, "
    "or give your final answer as a JSON list of entities, e.g. <answer>[\"A\", \"B\"]</answer>. "
    "Search results come back inside <tool_response>...</tool_response>. Answer once; the answer "
    "ends the task."
)


@dataclass
class MultiAnswerQAOptions:
    max_turns: int = 16
    data_dir: str = ""  # folder with train/val/test.jsonl (+ corpus.jsonl); empty = data/qa
    questions_train: str = ""  # explicit question files override data_dir
    questions_val: str = ""
    questions_test: str = ""
    retriever: str = "bm25"  # a name in turncredit.search.RETRIEVERS
    #: options of the retriever; bm25 defaults `corpus` to <data_dir>/corpus.jsonl, http needs `url`
    retriever_options: dict[str, Any] = field(default_factory=dict)
    top_k: int = 5  # passages per query
    max_passage_chars: int = 300  # each passage's text is cut to this many characters (0 = whole)
    #: characters of passages one call may return (0 = no cap): passages go in by rank, the
    #: call's queries taking turns (1st of each, then 2nd, …), until the next would not fit
    max_reply_chars: int = 0
    max_queries: int = 5  # per tool call (0 = no cap)
    invalid_reward: float = -0.1  # a malformed turn
    end_on_invalid: bool = False  # a malformed turn ends the episode (GRPO baseline: −1 and stop)
    no_answer_reward: float = 0.0  # the turn limit reached without an answer
    concurrency: int = 1
    system_prompt: str = SYSTEM_PROMPT  # the instruction (no placeholders), or from a file:
    system_prompt_file: str = ""
    #: "system": the instruction as the system message; "user": no system message, the
    #: instruction right before the question in the user message (SPADER's reference)
    instruction_in: str = "system"
    question_prompt: str = "Question: {question}"  # the user message's question part; or from a file:
    question_prompt_file: str = ""


@dataclass
class QAState:
    question: Question
    turns: int = 0
    seen_gold: set[str] = field(default_factory=set)  # gold entities seen in any tool reply
    done: bool = False


@dataclass
class QARecord(TurnRecord):
    """What the QA environment records per turn (`Turn.record`): the diversity reward and the
    query cost read `queries` and `retrieved_gold`, `summarize` the answer turn's scores."""

    queries: int = 0  # queries issued this turn
    retrieved_gold: list[str] = field(default_factory=list)  # gold entities first or again seen in its passages
    error: str = ""  # a format error: what was wrong
    # the answer turn: the entities given and their scores (ours, and the SPADER reference's `reference_score`)
    answers: list[str] = field(default_factory=list)
    precision: float = 0.0
    recall: float = 0.0
    f1: float = 0.0
    exact_match: float = 0.0
    precision_ref: float = 0.0
    f1_ref: float = 0.0
    recall_at: dict[int, float] = field(default_factory=dict)  # the reference's recall@k, k in RECALL_AT
    evidence_recall: float = 0.0  # share of the gold entities seen in any tool reply

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "QARecord":
        rec = super().from_dict(d)
        rec.recall_at = {int(k): float(v) for k, v in rec.recall_at.items()}  # JSON keys are strings
        return rec


@ENVS.register("multi_answer_qa")
class MultiAnswerQAEnv(MultiTurnEnv):
    Options = MultiAnswerQAOptions
    LABEL_RATES = {"invalid_rate": "Invalid"}  # format errors; the QA env has no Repeated label

    def __init__(self, options: MultiAnswerQAOptions | None = None, retriever: Any = None) -> None:
        super().__init__(options if options is not None else MultiAnswerQAOptions())
        o = self.options
        for name, ok, want in (("max_turns", o.max_turns >= 1, ">= 1"), ("top_k", o.top_k >= 1, ">= 1"),
                               ("max_passage_chars", o.max_passage_chars >= 0, ">= 0 (0 = whole passages)"),
                               ("max_reply_chars", o.max_reply_chars >= 0, ">= 0 (0 = no cap)"),
                               ("max_queries", o.max_queries >= 0, ">= 0 (0 = no cap)")):
            if not ok:
                raise ValueError(f"multi_answer_qa.{name}: expected {want}, got {getattr(o, name)}")
        if o.instruction_in not in ("system", "user"):
            raise ValueError(f"multi_answer_qa.instruction_in: expected 'system' or 'user', got {o.instruction_in!r}")
        self.instruction = resolve_template(o.system_prompt, o.system_prompt_file, "multi_answer_qa.system_prompt",
                                            allowed=None)  # sent as written: a JSON example's braces stay
        self.question_text = resolve_template(o.question_prompt, o.question_prompt_file,
                                              "multi_answer_qa.question_prompt", allowed=("question",),
                                              required=("question",))
        self._retriever = retriever
        self._questions: dict[str, list[Question]] = {}
        corpus = self.corpus_path
        if retriever is None and corpus is not None and not corpus.is_file():
            # the index is built at the first search; a wrong path should fail before any rollout
            raise FileNotFoundError(f"corpus not found: {corpus}")

    @property
    def corpus_path(self) -> Path | None:
        """The bm25 corpus file (None for a retriever that is a server)."""
        if self.options.retriever != "bm25":
            return None
        return Path(self.options.retriever_options.get("corpus") or self.data_dir / "corpus.jsonl").expanduser()

    # -- data ----------------------------------------------------------------------------------
    @property
    def data_dir(self) -> Path:
        return Path(self.options.data_dir).expanduser() if self.options.data_dir else default_data_dir()

    def questions(self, split: str) -> list[Question]:
        if split not in SPLITS:
            raise ValueError(f"unknown split {split!r}; expected one of {', '.join(SPLITS)}")
        if split not in self._questions:
            custom = getattr(self.options, f"questions_{split}")
            self._questions[split] = load_questions(Path(custom).expanduser() if custom else self.data_dir / f"{split}.jsonl")
        return self._questions[split]

    def tasks(self, split: str) -> list[Task]:
        return [Task(q.qid, q.to_task_data()) for q in self.questions(split)]

    @property
    def retriever(self) -> Any:
        if self._retriever is None:
            import turncredit.search  # noqa: F401  (registers bm25 and http)

            opts = dict(self.options.retriever_options)
            cls = RETRIEVERS.get(self.options.retriever)
            if self.corpus_path is not None:
                opts["corpus"] = str(self.corpus_path)
            try:
                self._retriever = cls(**opts)
            except TypeError as e:
                raise ValueError(f"env.options.retriever_options: {e}") from None
        return self._retriever

    # -- episode -------------------------------------------------------------------------------
    def reset(self, task: Task, rng: random.Random) -> tuple[list[dict[str, str]], QAState]:
        q = Question.from_task_data(task.task_id, task.data)
        question = self.question_text.format(question=q.question)
        if self.options.instruction_in == "user":  # the instruction as a prefix: it ends in its own separator
            messages = [{"role": "user", "content": self.instruction + question}]
        else:
            messages = [{"role": "system", "content": self.instruction}, {"role": "user", "content": question}]
        return messages, QAState(question=q)

    def step(self, state: QAState, action_text: str) -> StepResult:
        return self.step_batch([state], [action_text])[0]  # type: ignore[return-value]

    def step_batch(self, states: Sequence[QAState], actions: Sequence[str]) -> list[StepResult | EnvFailure]:
        if len(states) != len(actions):
            raise ValueError(f"step_batch: {len(states)} states but {len(actions)} actions")
        parsed = [parse_action(a, self.options.max_queries or None) for a in actions]
        queries = list(dict.fromkeys(q for p in parsed if p.kind == "search" for q in p.items))
        hits: dict[str, list[Passage]] | EnvFailure = {}
        if queries:
            try:
                hits = dict(zip(queries, self.retriever.search(queries, self.options.top_k), strict=True))
            except EnvFailure as e:
                hits = e
        out: list[StepResult | EnvFailure] = []
        for state, act in zip(states, parsed):
            state.turns += 1
            if act.kind == "search" and isinstance(hits, EnvFailure):
                out.append(hits)
                continue
            res = self._answer(state, act, hits if isinstance(hits, dict) else {})
            state.done = res.done
            out.append(res)
        return out

    def _answer(self, state: QAState, act: Action, hits: dict[str, list[Passage]]) -> StepResult:
        o = self.options
        last = state.turns >= o.max_turns
        gold = state.question.answers
        if act.kind == "invalid":
            done = o.end_on_invalid or last
            reward = o.invalid_reward + (o.no_answer_reward if last and not o.end_on_invalid else 0.0)
            return StepResult(f"Format error: {act.error}.", reward, done, label="Invalid",
                              record=QARecord(error=act.error))
        if act.kind == "search":
            shown, cut = self._fit_reply(act.items, hits)
            blocks, found = [], []
            for q, lines in shown.items():
                blocks.append(f"Query: {q}\n" + ("\n".join(text for _, text in lines) if lines else "No results."))
                for p, _ in lines:
                    found += mentioned_entities(f"{p.title} {self._passage_text(p)}", gold)
            retrieved = list(dict.fromkeys(found))
            state.seen_gold.update(retrieved)
            note = f"\n(Results truncated at {o.max_reply_chars} characters.)" if cut else ""
            reply = "<tool_response>\n" + "\n\n".join(blocks) + note + "\n</tool_response>"
            return StepResult(reply, o.no_answer_reward if last else 0.0, last, label="Search",
                              record=QARecord(queries=len(act.items), retrieved_gold=retrieved))
        score, ref = set_score(act.items, gold), reference_score(act.items, gold)
        record = QARecord(answers=act.items, precision=score.precision, recall=score.recall, f1=score.f1,
                          exact_match=score.exact_match, precision_ref=ref.precision, f1_ref=ref.f1,
                          recall_at=dict(ref.recall_at), evidence_recall=len(state.seen_gold) / max(1, len(gold)))
        return StepResult("Answer recorded.", score.f1, True, success=score.exact_match == 1.0, label="Answer",
                          record=record)

    def _passage_text(self, p: Passage) -> str:
        cap = self.options.max_passage_chars
        return p.text[:cap] if cap else p.text

    def _fit_reply(self, queries: Sequence[str], hits: dict[str, list[Passage]]
                   ) -> tuple[dict[str, list[tuple[Passage, str]]], bool]:
        """Each query's (passage, line) pairs that fit the call's `max_reply_chars`, and whether
        any was left out. Passages go in by rank with the queries taking turns (every query's
        first, then every second, …), so one query cannot use up the budget of the others."""
        budget = self.options.max_reply_chars
        shown: dict[str, list[tuple[Passage, str]]] = {q: [] for q in queries}
        used, depth = 0, max((len(hits.get(q, [])) for q in queries), default=0)
        for rank in range(depth):
            for q in queries:
                passages = hits.get(q, [])
                if rank >= len(passages):
                    continue
                p = passages[rank]
                line = f"Doc {rank + 1} (Title: {p.title}) {self._passage_text(p)}"
                if budget and used + len(line) > budget:
                    return shown, True
                used += len(line)
                shown[q].append((p, line))
        return shown, False

    def expert(self, **options: Any):
        from turncredit.envs.multi_answer_qa.expert import GoldSearcher

        return GoldSearcher(**options).play

    # -- metrics -------------------------------------------------------------------------------
    def summarize(self, episodes: Sequence[Any]) -> dict[str, float]:
        """Answer-set precision / recall / F1 / exact match (0 for no answer; ours, and the SPADER
        reference's precision_ref / f1_ref / recall@k: `reference_score`), evidence recall
        (gold entities seen in tool replies), tool calls and queries per episode, format errors."""
        if not episodes:
            return {}
        records = [[QARecord.of(t) for t in ep.turns] for ep in episodes]
        answered = [_answer_record(ep, recs) for ep, recs in zip(episodes, records)]
        final = [f or QARecord() for f in answered]  # no answer scores 0
        turns = [t for ep in episodes for t in ep.turns]
        gold_n = [max(1, len(ep.task.data.get("answers", []))) for ep in episodes]
        seen = [len({e for r in recs for e in r.retrieved_gold}) / g for recs, g in zip(records, gold_n)]
        mean = statistics.fmean
        return {
            "f1": mean(f.f1 for f in final),
            "precision": mean(f.precision for f in final),
            "recall": mean(f.recall for f in final),
            "exact_match": mean(f.exact_match for f in final),
            "precision_ref": mean(f.precision_ref for f in final),
            "f1_ref": mean(f.f1_ref for f in final),
            **{f"recall@{k}": mean(f.recall_at.get(k, 0.0) for f in final) for k in RECALL_AT},
            "answered": mean(float(f is not None) for f in answered),
            "evidence_recall": mean(seen),
            "tool_calls": mean(sum(t.label == "Search" for t in ep.turns) for ep in episodes),
            "queries": mean(sum(r.queries for r in recs) for recs in records),
            "format_error_rate": (sum(t.label == "Invalid" for t in turns) / len(turns)) if turns else 0.0,
        }


def _answer_record(ep: Any, records: list[QARecord]) -> QARecord | None:
    """The record of the episode's answer turn (its last), None when it never answered."""
    for t, rec in zip(reversed(ep.turns), reversed(records)):
        if t.label == "Answer":
            return rec
    return None
