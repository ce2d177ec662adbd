"""Multi-answer QA: matching, the action format, the environment, BM25 and the /retrieve client."""

from __future__ import annotations

import json
import random
import time

import pytest
from loopback import JSONHandler, serve

from turncredit.envs.base import EnvFailure, Task
from turncredit.envs.multi_answer_qa import (
    Entity, MultiAnswerQAEnv, MultiAnswerQAOptions, QARecord, load_questions, match_entities, normalize,
    parse_action, reference_score, set_score,
)
from turncredit.envs.multi_answer_qa.matching import mentioned_entities
from turncredit.search import Passage, read_corpus
from turncredit.search.http import HTTPRetriever

NL = Entity("Netherlands", ("Holland", "The Netherlands", "Kingdom of the Netherlands"))
DE = Entity("Germany", ("Deutschland", "Federal Republic of Germany"))
BE = Entity("Belgium")
GOLD = (NL, DE, BE)


# -- matching ----------------------------------------------------------------------------------

def test_normalize_folds_case_accents_punctuation_and_articles():
    assert normalize("  The Netherlands. ") == "netherlands"
    assert normalize("Côte d’Ivoire") == "cote d ivoire"
    assert normalize("A  Bridge—Too far!") == "bridge too far"


def test_aliases_match_and_each_entity_counts_once():
    assert match_entities(["holland", "deutschland", "France"], GOLD) == ["Netherlands", "Germany"]
    s = set_score(["Holland", "the netherlands", "Germany", "France"], GOLD)
    # distinct predictions: holland, netherlands, germany, france → 2 correct (NL once), 4 predicted
    assert (s.correct, s.predicted, s.gold) == (2, 4, 3)
    assert s.precision == pytest.approx(0.5) and s.recall == pytest.approx(2 / 3)
    assert s.f1 == pytest.approx(2 * 0.5 * (2 / 3) / (0.5 + 2 / 3)) and s.exact_match == 0.0
    assert set_score(["Belgium", "Holland", "Germany"], GOLD).exact_match == 1.0
    assert set_score([], GOLD).f1 == 0.0


def test_mentions_need_whole_words():
    text = "Its neighbours are Germany and Belgium; Hollandaise sauce is unrelated."
    assert mentioned_entities(text, GOLD) == ["Germany", "Belgium"]


def test_reference_scores_count_every_alias_hit_for_precision_and_cap_recall_at_k():
    # distinct predictions: holland, netherlands, germany, france → 3 are aliases of gold entities
    r = reference_score(["Holland", "the netherlands", "Germany", "France"], GOLD, ks=(1, 2, 5))
    assert r.precision == pytest.approx(3 / 4)  # ours (set_score) says 2/4: the second NL alias is wasted
    assert r.recall == pytest.approx(2 / 3) and r.f1 == pytest.approx(2 * 0.75 * (2 / 3) / (0.75 + 2 / 3))
    # m = 2 matched of |G| = 3: min(2 / min(k, 3), 1) → k=1: 1 (capped), k=2: 1, k=5: 2/3
    assert r.recall_at == pytest.approx({1: 1.0, 2: 1.0, 5: 2 / 3})
    empty = reference_score([], GOLD)
    assert (empty.precision, empty.recall, empty.f1) == (0.0, 0.0, 0.0) and set(empty.recall_at) == {5, 10, 20, 50}
    assert reference_score(["x"], ()).recall_at[5] == 0.0


# -- the action format -------------------------------------------------------------------------

@pytest.mark.parametrize("text, kind, items", [
    ('<think>hmm</think><tool_call>["a", "b", "a"]</tool_call>', "search", ["a", "b"]),
    ('<answer>["X", " ", "Y"]</answer>', "answer", ["X", "Y"]),
    ("<think>ok</think>\n<answer>[]</answer>", "answer", []),
])
def test_valid_actions(text, kind, items):
    act = parse_action(text)
    assert (act.kind, act.items, act.error) == (kind, items, "")


@pytest.mark.parametrize("text, why", [
    ("I think it is Germany.", "end your turn with"),
    ('<tool_call>["a"]</tool_call><answer>["b"]</answer>', "exactly one"),
    ("<tool_call>a, b</tool_call>", "JSON list of strings"),
    ('<answer>{"a": 1}</answer>', "JSON list of strings"),
    ("<tool_call>[]</tool_call>", "at least one query"),
    ('<tool_call>["1","2","3","4","5","6"]</tool_call>', "at most 5 queries"),
    ('<think>a</think><think>b</think><answer>["x"]</answer>', "at most one <think>"),
])
def test_malformed_actions_get_a_reason_not_an_exception(text, why):
    act = parse_action(text)
    assert act.kind == "invalid" and why in act.error


# -- the environment ---------------------------------------------------------------------------

class ListRetriever:
    """Returns fixed passages and records each call's queries."""

    def __init__(self, passages, fail=False):
        self.passages, self.fail, self.calls = passages, fail, []

    def search(self, queries, k):
        self.calls.append(list(queries))
        if self.fail:
            raise EnvFailure("retriever down")
        return [[p for p in self.passages if any(w in p.text.lower() for w in q.lower().split())][:k]
                for q in queries]


CORPUS = [Passage("1", "Netherlands", "The Netherlands borders Germany and Belgium."),
          Passage("2", "Luxembourg", "Luxembourg borders Belgium, France and Germany."),
          Passage("3", "Cheese", "Gouda is a cheese. " * 40)]


def _env(retriever, **opts):
    return MultiAnswerQAEnv(MultiAnswerQAOptions(max_passage_chars=60, **opts), retriever=retriever)


def _task():
    return Task("q1", {"question": "Which countries border the Netherlands?",
                       "answers": [{"name": "Germany", "aliases": ["Deutschland"]}, {"name": "Belgium"}]})


def test_one_turn_of_searches_goes_to_the_retriever_in_one_call():
    r = ListRetriever(CORPUS)
    env = _env(r)
    states = [env.reset(_task(), random.Random(0))[1] for _ in range(3)]
    out = env.step_batch(states, ['<tool_call>["borders", "gouda"]</tool_call>',
                                  '<tool_call>["borders"]</tool_call>', "no tags here"])
    assert r.calls == [["borders", "gouda"]]  # deduplicated across episodes
    assert out[0].record.retrieved_gold == ["Germany", "Belgium"] and out[0].record.queries == 2
    assert "<tool_response>" in out[0].reply and "Doc 1 (Title: Netherlands)" in out[0].reply
    # every passage text is capped
    assert max(len(line) for line in out[0].reply.splitlines()) <= len("Doc 1 (Title: Cheese) ") + 60
    assert out[2].label == "Invalid" and out[2].reward == pytest.approx(-0.1) and not out[2].done


def test_reply_budget_per_call_fills_by_rank_across_queries_and_says_it_cut():
    """SPADER's retriever: one character budget per call, passages in rank order with the queries
    taking turns; whole passages (max_passage_chars 0) and no query cap (max_queries 0)."""
    docs = [Passage(str(i), f"T{i}", f"alpha beta {'x' * 20} {i}") for i in range(4)]  # 35-36 chars of text
    env = MultiAnswerQAEnv(MultiAnswerQAOptions(max_passage_chars=0, max_queries=0, max_reply_chars=150),
                           retriever=ListRetriever(docs))
    _, st = env.reset(_task(), random.Random(0))
    line = len("Doc 1 (Title: T0) ") + len(docs[0].text)  # 52 characters a line
    res = env.step(st, '<tool_call>["alpha", "beta", "x", "y", "z", "w"]</tool_call>')  # 6 queries: no cap
    assert res.label == "Search" and res.record.queries == 6
    body = res.reply.splitlines()
    docs_shown = [ln for ln in body if ln.startswith("Doc ")]
    # 150 // 52 = 2 lines fit: rank 1 of "alpha", then rank 1 of "beta"; rank 2 of "alpha" would not
    assert len(docs_shown) == 2 and all(ln.startswith("Doc 1 ") for ln in docs_shown)
    assert sum(len(ln) for ln in docs_shown) == 2 * line <= 150
    assert "(Results truncated at 150 characters.)" in res.reply
    assert res.reply.count("No results.") == 4  # the queries whose turn never came
    whole = MultiAnswerQAEnv(MultiAnswerQAOptions(max_passage_chars=0), retriever=ListRetriever(docs))
    _, st = whole.reset(_task(), random.Random(0))
    res = whole.step(st, '<tool_call>["alpha"]</tool_call>')
    assert "truncated" not in res.reply and docs[3].text in res.reply  # whole passages, no budget


def test_instruction_in_the_user_message_from_a_file(tmp_path):
    f = tmp_path / "instruction.txt"
    f.write_text('Find every answer. Search with <tool_call>[...]</tool_call>, answer {"a": 1}.\n\nQuestion: \n')
    env = _env(ListRetriever(CORPUS), system_prompt_file=str(f), instruction_in="user", question_prompt="{question}")
    messages, _ = env.reset(_task(), random.Random(0))
    # the file's trailing newline is dropped; the rest of it is the prefix, as the reference's constant
    # an instruction is never formatted: its braces (a JSON example) reach the model as written
    assert messages == [{"role": "user", "content": 'Find every answer. Search with <tool_call>[...]</tool_call>, '
                                                    'answer {"a": 1}.\n\nQuestion: Which countries border the Netherlands?'}]
    messages, _ = _env(ListRetriever(CORPUS)).reset(_task(), random.Random(0))
    assert [m["role"] for m in messages] == ["system", "user"]
    assert messages[1]["content"] == "Question: Which countries border the Netherlands?"
    with pytest.raises(ValueError, match="instruction_in"):
        _env(ListRetriever(CORPUS), instruction_in="assistant")
    with pytest.raises(ValueError, match=r"question_prompt: missing placeholder \{question\}"):
        _env(ListRetriever(CORPUS), question_prompt="Question:")


def test_answer_scores_f1_and_ends_the_episode():
    env = _env(ListRetriever(CORPUS))
    _, st = env.reset(_task(), random.Random(0))
    res = env.step(st, '<think>known</think><answer>["deutschland", "France"]</answer>')
    assert res.done and res.reward == pytest.approx(0.5) and not res.success
    assert res.label == "Answer" and res.record.precision == 0.5 and res.record.recall == 0.5
    # the reference's scores beside ours: 1 of 2 gold entities matched → recall@k = 1/2 for every k ≥ 2
    assert res.record.precision_ref == 0.5 and res.record.f1_ref == pytest.approx(0.5)
    assert [res.record.recall_at[k] for k in (5, 10, 20, 50)] == [0.5] * 4


def test_retriever_failure_aborts_searching_episodes_only():
    env = _env(ListRetriever(CORPUS, fail=True))
    s1, s2 = (env.reset(_task(), random.Random(0))[1] for _ in range(2))
    out = env.step_batch([s1, s2], ['<tool_call>["x"]</tool_call>', '<answer>["Belgium"]</answer>'])
    assert isinstance(out[0], EnvFailure) and out[1].reward == pytest.approx(2 / 3)


def test_grpo_baseline_format_error_ends_with_minus_one_and_turn_limit():
    env = _env(ListRetriever(CORPUS), invalid_reward=-1.0, end_on_invalid=True)
    _, st = env.reset(_task(), random.Random(0))
    res = env.step(st, "Germany")
    assert res.done and res.reward == -1.0
    env = _env(ListRetriever(CORPUS), max_turns=2)
    _, st = env.reset(_task(), random.Random(0))
    assert not env.step(st, '<tool_call>["borders"]</tool_call>').done
    assert env.step(st, '<tool_call>["borders"]</tool_call>').done


def test_summary_metrics():
    from turncredit.episode import Episode, Turn

    def ep(steps):
        return Episode(task=_task(), group_id="g", messages=[],
                       turns=[Turn([], [1], [0.0], "a", label=label, record=r.to_dict()) for label, r in steps])

    eps = [ep([("Search", QARecord(queries=2, retrieved_gold=["Germany"])),
               ("Answer", QARecord(f1=1.0, precision=1.0, recall=1.0, exact_match=1.0, recall_at={5: 1.0}))]),
           ep([("Invalid", QARecord()), ("Search", QARecord(queries=1, retrieved_gold=[]))])]
    s = _env(None).summarize(eps)
    assert s["f1"] == 0.5 and s["answered"] == 0.5 and s["evidence_recall"] == 0.25
    assert s["recall@5"] == 0.5 and s["recall@50"] == 0.0  # an episode without an answer scores 0
    assert s["tool_calls"] == 1.0 and s["queries"] == 1.5 and s["format_error_rate"] == 0.25


# -- data files --------------------------------------------------------------------------------

def test_questions_load_ours_and_qampari_and_bad_lines_name_the_line(tmp_path):
    p = tmp_path / "q.jsonl"
    p.write_text(json.dumps({"id": "a", "question": "Q?", "answers": [{"name": "X", "aliases": ["x1"]}]}) + "\n"
                 + json.dumps({"qid": "b", "question_text": "Q2?", "answer_list": [
                     {"answer_text": "Y", "aliases": ["Why"], "proof": []}]}) + "\n")
    qs = load_questions(p)
    assert [(q.qid, q.question, q.answers) for q in qs] == [
        ("a", "Q?", (Entity("X", ("x1",)),)), ("b", "Q2?", (Entity("Y", ("Why",)),))]
    p.write_text('{"id": "a", "question": "Q?", "answers": []}\n')
    with pytest.raises(ValueError, match=r"q.jsonl:1: expected a non-empty list of answers"):
        load_questions(p)


@pytest.mark.parametrize("source, row, expected", [
    ("qampari", {"question_text": "Which rivers flow through Vienna?", "ground_truth": [["Danube", "Donau"], ["Wien"]],
                 "data_source": "qampari"},
     (Entity("Danube", ("Donau",)), Entity("Wien"))),
    ("quest", {"question_text": "Novels set in Lisbon", "ground_truth": [["Night Train to Lisbon"], ["The Year of the Death of Ricardo Reis", "O Ano da Morte de Ricardo Reis"]],
               "data_source": "quest"},
     (Entity("Night Train to Lisbon"), Entity("The Year of the Death of Ricardo Reis", ("O Ano da Morte de Ricardo Reis",)))),
    ("mintaka", {"question": "Who were the Beatles' drummers?", "ground_truth": [["Ringo Starr", "Richard Starkey"], ["Pete Best"]]},
     (Entity("Ringo Starr", ("Richard Starkey",)), Entity("Pete Best"))),
    # WebQSP: duplicated and blank aliases; an entity whose aliases normalise like another's is the same one
    ("webqsp", {"question_text": "what languages are spoken in belgium?",
                "ground_truth": [["Dutch", " "], ["French"], ["the French"], ["German", "Deutsch"], [""]]},
     (Entity("Dutch"), Entity("French"), Entity("German", ("Deutsch",)))),
])
def test_spader_evaluation_files_load(tmp_path, source, row, expected):
    p = tmp_path / f"{source}_test.jsonl"
    p.write_text(json.dumps(row) + "\n")
    [q] = load_questions(p)
    assert q.question == row.get("question_text", row.get("question")) and q.answers == expected
    assert q.qid == f"{p}:1"  # the reference's files carry no id: the line stands in


def test_spader_ground_truth_errors_name_the_line(tmp_path):
    p = tmp_path / "bad.jsonl"
    p.write_text(json.dumps({"question_text": "Q?", "ground_truth": [["Alpha"]]}) + "\n"
                 + json.dumps({"question_text": "Q?", "ground_truth": ["Alpha", "Beta"]}) + "\n")
    with pytest.raises(ValueError, match=r"bad.jsonl:2: ground_truth\[0\] must be a list of strings"):
        load_questions(p)
    p.write_text(json.dumps({"question_text": "Q?", "ground_truth": [[""], [" "]]}) + "\n")
    with pytest.raises(ValueError, match=r"bad.jsonl:1: ground_truth names no entity"):
        load_questions(p)


def test_corpus_reads_both_layouts_and_names_the_bad_line(tmp_path):
    p = tmp_path / "c.jsonl"
    p.write_text(json.dumps({"id": 1, "contents": '"Title A"\nBody a.'}) + "\n"
                 + json.dumps({"id": "2", "title": "B", "text": "Body b."}) + "\n")
    assert read_corpus(p) == [Passage("1", "Title A", "Body a."), Passage("2", "B", "Body b.")]
    p.write_text('{"id": 1}\n')
    with pytest.raises(ValueError, match=r"c.jsonl:1: expected a 'text'"):
        read_corpus(p)


# -- BM25 --------------------------------------------------------------------------------------

def test_bm25_ranks_the_relevant_passage_first_and_caches_the_index(tmp_path):
    pytest.importorskip("bm25s")
    from turncredit.search.bm25 import BM25Retriever

    corpus = tmp_path / "corpus.jsonl"
    rows = [{"id": str(i), "title": t, "text": x} for i, (t, x) in enumerate([
        ("Neon", "Neon is a noble gas, colourless and inert."),
        ("Sodium", "Sodium is an alkali metal that reacts with water."),
        ("Argon", "Argon is the third most abundant gas in the atmosphere."),
        ("Gouda", "Gouda is a Dutch cheese named after the city."),
    ])]
    corpus.write_text("".join(json.dumps(r) + "\n" for r in rows))
    r = BM25Retriever(corpus, cache_dir=tmp_path / "cache")
    hits = r.search(["which alkali metal reacts with water", "dutch cheese", "zzzz qqqq"], k=2)
    assert hits[0][0].title == "Sodium" and hits[1][0].title == "Gouda" and hits[2] == []
    assert (r.index_dir / "done").is_file()
    again = BM25Retriever(corpus, cache_dir=tmp_path / "cache")  # loads the saved index
    assert again.index_dir == r.index_dir
    assert [p.title for p in again.search(["noble gas"], k=1)[0]] == ["Neon"]


# -- the /retrieve client ----------------------------------------------------------------------

class RetrieveHandler(JSONHandler):
    script: list[str] = []  # what to do for each request, in order: ok / slow / 500 / garbage / drop
    seen: list[dict] = []

    def do_POST(self):
        body = self.read_json()
        RetrieveHandler.seen.append(body)
        mode = RetrieveHandler.script.pop(0) if RetrieveHandler.script else "ok"
        if mode == "drop":
            self.connection.close()
            return
        if mode == "slow":
            time.sleep(1.0)
        if mode == "500":
            self.send_json({}, status=500)
        elif mode == "garbage":
            self.send_json(b"<html>not json</html>")
        else:
            result = [[{"document": {"id": f"{q}-{j}", "contents": f'"{q} title"\nabout {q} {j}'}, "score": 1.0 - j}
                       for j in range(body["topk"])] for q in body["queries"]]
            self.send_json({"result": result})


@pytest.fixture
def server():
    RetrieveHandler.script, RetrieveHandler.seen = [], []
    with serve(RetrieveHandler) as base:
        yield base + "/retrieve"


def test_http_retriever_speaks_the_protocol(server):
    hits = HTTPRetriever(server).search(["alpha", "beta"], k=2)
    assert RetrieveHandler.seen == [{"queries": ["alpha", "beta"], "topk": 2, "return_scores": True}]
    assert hits[1][0] == Passage("beta-0", "beta title", "about beta 0") and len(hits[0]) == 2


def test_http_retriever_retries_500_garbage_drop_and_timeouts(server):
    RetrieveHandler.script = ["500", "garbage", "drop", "slow"]
    r = HTTPRetriever(server, timeout=0.3, retries=4, backoff=0.01)
    hits = r.search(["alpha"], k=1)
    assert hits[0][0].id == "alpha-0" and len(RetrieveHandler.seen) == 5


def test_http_retriever_gives_up_with_an_env_failure(server):
    RetrieveHandler.script = ["500"] * 3
    with pytest.raises(EnvFailure, match="failed after 3 attempt"):
        HTTPRetriever(server, retries=2, backoff=0.01).search(["alpha"], k=1)
    with pytest.raises(ValueError, match="http"):
        HTTPRetriever("localhost:8000/retrieve")


# -- end to end: data folder, expert, a SPADER training step -----------------------------------

def _data_dir(tmp_path):
    d = tmp_path / "qa"
    d.mkdir()
    q = {"id": "nl", "question": "Which countries border the Netherlands?",
         "answers": [{"name": "Germany", "aliases": ["Deutschland"]}, {"name": "Belgium"}]}
    for split in ("train", "val", "test"):
        (d / f"{split}.jsonl").write_text(json.dumps(q) + "\n")
    rows = [{"id": "0", "title": "Borders of Netherlands", "text": "The Netherlands shares land borders with Belgium."},
            {"id": "1", "title": "Currency of Germany", "text": "The currency used in Germany is the Euro."},
            {"id": "2", "title": "Germany", "text": "Germany borders the Netherlands."},
            {"id": "3", "title": "Gouda", "text": "Gouda is a Dutch cheese."}]
    (d / "corpus.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return d


def test_gold_searcher_answers_only_what_it_found(tmp_path):
    pytest.importorskip("bm25s")
    env = MultiAnswerQAEnv(MultiAnswerQAOptions(data_dir=str(_data_dir(tmp_path)), top_k=1,
                                                retriever_options={"cache_dir": str(tmp_path / "c")}))
    task = env.tasks("train")[0]
    ep = env.expert()(env, task, random.Random(0))
    assert ep.turns[0].action_text.endswith('<tool_call>["Which countries border the Netherlands"]</tool_call>')
    assert all(parse_action(t.action_text).kind in ("search", "answer") for t in ep.turns)
    final = ep.turns[-1]
    assert final.label == "Answer"
    seen = {e for t in ep.turns for e in QARecord.of(t).retrieved_gold}
    assert set(json.loads(final.action_text.split("<answer>")[1].split("</answer>")[0])) == seen
    assert final.reward == pytest.approx(set_score(sorted(seen), (DE, BE)).f1)


def test_a_spader_training_step_shapes_rewards_and_logs_answer_metrics(tmp_path, tiny_policy, smol_tokenizer):
    pytest.importorskip("bm25s")
    import copy

    from turncredit.config import load_config
    from turncredit.episode import read_episodes
    from turncredit.policy.session import PolicySession
    from turncredit.train.trainer import Trainer

    cfg = load_config("configs/qa-spader.yaml", [
        f"env.options.data_dir={_data_dir(tmp_path)}", f"env.options.retriever_options.cache_dir={tmp_path / 'c'}",
        "env.options.max_turns=2", "rollout.tasks_per_step=1", "rollout.group_size=3", "rollout.max_new_tokens=8",
        "train.steps=1", "train.bf16=false", "algo.shaper_options.cost_warmup=0", "algo.shaper_options.cost_ramp=0"])
    session = PolicySession.from_model(copy.deepcopy(tiny_policy), smol_tokenizer)
    history = Trainer(cfg, tmp_path / "run", session=session).train()
    m = history[0]
    for key in ("f1", "recall", "evidence_recall", "tool_calls", "format_error_rate"):
        assert key in m, key
    eps = read_episodes(tmp_path / "run" / "episodes" / "step_00001.jsonl")
    # the random tiny model never writes the format: every turn is a format error, shaped by
    # the query cost (no queries → 0 exploration reward) and credited by SPA
    for ep in eps:
        for t in ep.turns:
            assert t.label == "Invalid" and t.info["exploration_reward"] == 0.0
            assert t.reward == pytest.approx(t.env_reward) and t.advantage is not None


def test_the_eval_recipe_path_runs_a_local_model_against_a_retrieve_server(server, tmp_path, tiny_policy, smol_tokenizer):
    """configs/qa-spader-qwen3-8b-eval.yaml with the hub model swapped for the tiny local one."""
    from turncredit.workflows import evaluate_model
    from turncredit.config import load_config
    from turncredit.policy.session import PolicySession

    d = tmp_path / "qa"
    d.mkdir()
    q = {"id": "q", "question": "Which gases are noble?", "answers": [{"name": "Neon"}, {"name": "Argon"}]}
    (d / "test.jsonl").write_text(json.dumps(q) + "\n")
    cfg = load_config("configs/qa-spader-qwen3-8b-eval.yaml", [
        f"env.options.questions_test={d / 'test.jsonl'}", f"env.options.retriever_options.url={server}",
        "env.options.max_turns=3", "rollout.backend=kv", "rollout.backend_options={}", "eval.k=2",
        "eval.max_new_tokens=8"])
    session = PolicySession.from_model(tiny_policy, smol_tokenizer)
    res, eps = evaluate_model(cfg, "tiny", session)
    assert len(eps) == 2 and res["episodes"] == 2
    for key in ("f1", "recall", "exact_match", "tool_calls", "format_error_rate"):
        assert key in res, key
    # the random tiny model never writes a valid action: every turn is a format error
    assert res["format_error_rate"] == 1.0 and res["f1"] == 0.0
    # the same recipe with the scripted searcher: its queries reach the server and score
    from turncredit.workflows import evaluate_expert

    expert = evaluate_expert(cfg)
    assert [b["queries"] for b in RetrieveHandler.seen] == [
        ["Which gases are noble"], ["Neon gases noble", "Argon gases noble"]]
    assert all(b["topk"] == 5 for b in RetrieveHandler.seen) and expert["f1"] == 1.0


@pytest.mark.parametrize("recipe, shaper_key", [("qa-spader-qwen3-8b", "exploration_reward"),
                                                ("qa-grpo-qwen3-8b", "query_cost")])
def test_the_gpu_training_recipes_run_a_step_against_a_retrieve_server(recipe, shaper_key, server, tmp_path,
                                                                        tiny_policy, smol_tokenizer):
    """SPADER's and its GRPO baseline's recipes, one step on the CPU with the tiny model: the
    user-message instruction, the warm-up ratio, one minibatch and each run's shaper all take part."""
    import copy

    from turncredit.config import load_config
    from turncredit.episode import read_episodes
    from turncredit.policy.session import PolicySession
    from turncredit.train.trainer import Trainer

    d = tmp_path / "qa"
    d.mkdir()
    q = {"id": "q", "question": "Which gases are noble?", "answers": [{"name": "Neon"}, {"name": "Argon"}]}
    (d / "train.jsonl").write_text(json.dumps(q) + "\n")
    cfg = load_config(f"configs/{recipe}.yaml", [
        f"env.options.questions_train={d / 'train.jsonl'}", f"env.options.retriever_options.url={server}",
        "env.options.max_turns=2", "rollout.backend=kv", "rollout.backend_options={}", "rollout.tasks_per_step=1",
        "rollout.group_size=2", "rollout.max_new_tokens=8", "train.bf16=false"])
    trainer = Trainer(cfg, tmp_path / "run", session=PolicySession.from_model(copy.deepcopy(tiny_policy), smol_tokenizer))
    assert trainer.warmup_steps == 15  # ⌊0.05 × 300 steps × 1 minibatch⌋, from the recipe's own length
    trainer.cfg.train.steps = 1
    trainer.train()
    [ep, _] = read_episodes(tmp_path / "run" / "episodes" / "step_00001.jsonl")
    assert [m["role"] for m in ep.messages] == ["user"]  # the instruction precedes the question there
    assert ep.messages[0]["content"].endswith("Which gases are noble?")
    assert all(shaper_key in t.info and t.advantage is not None for t in ep.turns)
