"""The vLLM backend, against a stand-in `vllm` module everywhere and the real one on a CUDA box.

The stand-in builds its model from the config folder the backend wrote (random weights, as
`load_format="dummy"` gives), so a greedy rollout matches the HF backend only if the weight
sync delivered every trainer weight under the right name.
"""

from __future__ import annotations

import copy
import sys
import types

import pytest
import torch

from turncredit.config import ConfigError, load_config
from turncredit.envs.base import Task
from turncredit.envs.peer_workload import PeerWorkloadEnv, PeerWorkloadOptions
from turncredit.policy.backends import BACKENDS, SamplingParams
from turncredit.policy.loading import add_lora
from turncredit.policy.session import PolicySession
from turncredit.rollout import RolloutStats, run_episodes


class FakeSamplingParams:
    def __init__(self, **kw):
        self.__dict__.update(kw)


class FakeLLM:
    """Speaks the slice of `vllm.LLM` the backend uses, with an HF model inside."""

    instances: list["FakeLLM"] = []

    def __init__(self, **kw):
        from transformers import AutoConfig, AutoModelForCausalLM

        self.kwargs = kw
        cfg = AutoConfig.from_pretrained(kw["model"])  # the folder must hold a loadable config
        with torch.random.fork_rng():
            torch.manual_seed(123)
            self.model = AutoModelForCausalLM.from_config(cfg).eval()
        self.loaded: dict[str, torch.Tensor] = {}
        self.prefix_resets = 0
        self.generate_calls: list[tuple[list[list[int]], list[FakeSamplingParams]]] = []
        self.seen: list[list[int]] = []
        FakeLLM.instances.append(self)

    def apply_model(self, func):
        model = self.model

        def load_weights(pairs):
            state = model.state_dict()
            for name, t in pairs:
                assert name in state, f"unknown weight {name}"
                self.loaded[name] = t.detach().clone()
            model.load_state_dict({**state, **self.loaded})

        model.load_weights = load_weights
        return [func(model)]

    def reset_prefix_cache(self):
        self.prefix_resets += 1
        self.seen = []

    def generate(self, prompts, params, use_tqdm=True):
        ids = [p["prompt_token_ids"] for p in prompts]
        self.generate_calls.append((ids, list(params)))
        return [self._one(p, sp) for p, sp in zip(ids, params, strict=True)]

    def _one(self, prompt, sp):
        cached = max((_common_prefix(prompt, s) for s in self.seen), default=0)
        seq, lps = list(prompt), []
        g = torch.Generator().manual_seed(sp.seed)
        with torch.no_grad():
            for _ in range(sp.max_tokens):
                logits = self.model(torch.tensor([seq])).logits[0, -1].float()
                if sp.temperature == 0:
                    tok = int(logits.argmax())
                    lp = torch.log_softmax(logits, -1)[tok]
                else:
                    probs = torch.softmax(logits / sp.temperature, -1)
                    tok = int(torch.multinomial(probs, 1, generator=g))
                    lp = probs[tok].log()
                seq.append(tok)
                lps.append({tok: types.SimpleNamespace(logprob=float(lp))})
                if tok in sp.stop_token_ids:
                    break
        self.seen.append(seq)
        out = types.SimpleNamespace(token_ids=seq[len(prompt):], logprobs=lps)
        return types.SimpleNamespace(outputs=[out], num_cached_tokens=cached)


def _common_prefix(a, b):
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


@pytest.fixture
def fake_vllm(monkeypatch):
    mod = types.ModuleType("vllm")
    mod.LLM = FakeLLM
    mod.SamplingParams = FakeSamplingParams
    monkeypatch.setitem(sys.modules, "vllm", mod)
    FakeLLM.instances.clear()
    return mod


def _play(session, n=3, greedy=True, seed=0):
    env = PeerWorkloadEnv(PeerWorkloadOptions(max_turns=3))
    tasks = [Task(w, {"secret": w}) for w in ("zebra", "quartz", "violin")[:n]]
    stats = RolloutStats()
    eps = run_episodes(env, session.backend, session.bridge, tasks, ["g"] * n,
                       SamplingParams(max_new_tokens=6, greedy=greedy), seed=seed, stats=stats)
    return eps, stats


def test_vllm_is_registered_and_its_options_are_checked_without_importing_vllm():
    assert "vllm" in BACKENDS.names()
    cfg = load_config(None, ["rollout.backend=vllm", "rollout.backend_options.gpu_memory_utilization=0.5"])
    assert cfg.rollout.backend_options == {"gpu_memory_utilization": 0.5}
    with pytest.raises(ConfigError, match="rollout.backend_options.gpu_memory_fraction: unknown option"):
        load_config(None, ["rollout.backend=vllm", "rollout.backend_options.gpu_memory_fraction=0.5"])
    with pytest.raises(ConfigError, match="rollout.backend: .*'vlm'"):
        load_config(None, ["rollout.backend=vlm"])


def test_missing_vllm_names_the_setting_and_the_fix(monkeypatch, tiny_policy, smol_tokenizer):
    monkeypatch.setitem(sys.modules, "vllm", None)  # makes `import vllm` raise ImportError
    with pytest.raises(ImportError, match="rollout.backend: vllm needs the vllm package"):
        PolicySession.from_model(tiny_policy, smol_tokenizer, backend="vllm")


def test_greedy_vllm_rollout_equals_the_kv_backend(fake_vllm, tiny_policy, smol_tokenizer):
    session = PolicySession.from_model(tiny_policy, smol_tokenizer, backend="vllm", sampler_dtype="model",
                                       backend_options={"gpu_memory_utilization": 0.4})
    llm = FakeLLM.instances[-1]
    assert llm.kwargs["enable_prefix_caching"] is True and llm.kwargs["load_format"] == "dummy"
    assert llm.kwargs["gpu_memory_utilization"] == 0.4 and llm.kwargs["dtype"] == "float32"
    assert session.sampler_model is None  # the engine holds the copy

    eps, stats = _play(session)
    ref_session = PolicySession.from_model(tiny_policy, smol_tokenizer, backend="kv")
    ref, _ = _play(ref_session)
    assert [[t.action_ids for t in e.turns] for e in eps] == [[t.action_ids for t in e.turns] for e in ref]
    for e, r in zip(eps, ref):
        for t, u in zip(e.turns, r.turns):
            assert max(abs(a - b) for a, b in zip(t.sampler_logprobs, u.sampler_logprobs)) < 1e-4

    # one generate per turn; each prompt is the row's whole context so far
    assert len(llm.generate_calls) == max(e.num_turns for e in eps)
    first, second = llm.generate_calls[0][0], llm.generate_calls[1][0]
    e0 = eps[0].turns
    assert first[0] == e0[0].prompt_ids
    assert second[0] == e0[0].prompt_ids + e0[0].action_ids + e0[1].prompt_ids


def test_sampling_params_seeds_and_stops(fake_vllm, tiny_policy, smol_tokenizer):
    session = PolicySession.from_model(tiny_policy, smol_tokenizer, backend="vllm")
    eps, stats = _play(session, greedy=False)
    llm = FakeLLM.instances[-1]
    # prefix caching: the shared opening is encoded once and sampled actions never again, so
    # after turn 0 only the replies are new
    assert stats.tokens_prefilled == stats.tokens_prompt - 2 * len(eps[0].turns[0].prompt_ids)
    sps = [sp for _, turn in llm.generate_calls for sp in turn]
    eot = session.bridge.end_of_turn_id
    assert all(sp.stop_token_ids == [eot] and sp.ignore_eos and sp.logprobs == 0 for sp in sps)
    assert all(sp.temperature == 1.0 and sp.max_tokens == 6 for sp in sps)
    assert len({sp.seed for sp in sps}) == len(sps)  # every (row, turn) its own stream
    again = PolicySession.from_model(tiny_policy, smol_tokenizer, backend="vllm")
    assert [[t.action_ids for t in e.turns] for e in _play(session, greedy=False)[0]] == \
           [[t.action_ids for t in e.turns] for e in _play(again, greedy=False)[0]]


def test_after_update_syncs_weights_and_resets_the_prefix_cache(fake_vllm, tiny_policy, smol_tokenizer):
    model = copy.deepcopy(tiny_policy)
    session = PolicySession.from_model(model, smol_tokenizer, backend="vllm")
    llm = FakeLLM.instances[-1]
    assert llm.prefix_resets == 1
    assert set(llm.loaded) == set(model.state_dict())
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.01)
    session.after_update()
    assert llm.prefix_resets == 2 and session.backend.syncs == 2
    for name, t in model.state_dict().items():
        assert torch.equal(llm.loaded[name], t), name


def test_lora_weights_arrive_merged_under_plain_names(fake_vllm, tiny_policy, smol_tokenizer):
    model = add_lora(copy.deepcopy(tiny_policy), {"r": 4, "lora_alpha": 8})
    with torch.no_grad():
        for n, p in model.named_parameters():
            if "lora_B" in n:
                p.normal_(0, 0.1)  # a non-zero adapter, so merging changes the weights
    PolicySession.from_model(model, smol_tokenizer, backend="vllm")
    llm = FakeLLM.instances[-1]
    merged = copy.deepcopy(model).merge_and_unload().state_dict()
    assert set(llm.loaded) == set(merged)
    for name, t in merged.items():
        assert torch.allclose(llm.loaded[name], t, atol=1e-6), name


def test_real_vllm_greedy_matches_the_kv_backend(tiny_policy, smol_tokenizer):
    pytest.importorskip("vllm")
    if not torch.cuda.is_available():
        pytest.skip("vLLM needs a CUDA GPU")
    model = copy.deepcopy(tiny_policy).cuda()
    session = PolicySession.from_model(model, smol_tokenizer, backend="vllm",
                                       backend_options={"gpu_memory_utilization": 0.2, "enforce_eager": True})
    eps, _ = _play(session)
    ref, _ = _play(PolicySession.from_model(model, smol_tokenizer, backend="kv"))
    assert [[t.action_ids for t in e.turns] for e in eps] == [[t.action_ids for t in e.turns] for e in ref]


def test_vllm_refuses_an_int8_sampler_before_starting_an_engine(tiny_policy, smol_tokenizer):
    with pytest.raises(ValueError, match="rollout.dtype: the vllm backend .* 'int8'"):
        PolicySession.from_model(tiny_policy, smol_tokenizer, backend="vllm", sampler_dtype="int8")
