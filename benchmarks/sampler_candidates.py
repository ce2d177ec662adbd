"""Sampler candidates for a CPU, measured apart from the rollout (not a unit test: run it alone).

    python benchmarks/sampler_candidates.py matmul   # SmolLM2-135M's decode matmuls at batch 32
    python benchmarks/sampler_candidates.py ct2      # CTranslate2 as a sampler (pip install ctranslate2)
    python benchmarks/sampler_candidates.py gap      # log-prob gap of the int8 copies to fp32

`matmul` times one decode step's linear shapes (batch 32 × in → out) in fp32, bf16, weight-only
int8 (`_weight_int8pack_mm`) and fbgemm's dynamic int8 (`quantize_dynamic`, what
`rollout.dtype: int8` uses). `ct2` converts the model in memory, then samples 24 tokens for 32
rows of one prompt, and for 32 prompts of different lengths (CTranslate2 has no KV cache kept
across calls: every turn re-reads each row's history, and rows longer than the shortest are fed
one token per step). `gap` is the mean / max |log p_int8 − log p_fp32| over the tokens of
sampled 20 Questions dialogues, per-tensor and per-channel weight scales.
"""

import argparse
import copy
import json
import random
import tempfile
import time
import warnings

import torch

from turncredit.policy.loading import load_model, load_tokenizer

warnings.filterwarnings("ignore")
SHAPES = [(576, 576, "q/o"), (576, 192, "k/v"), (576, 1536, "gate/up"), (1536, 576, "down"), (576, 49152, "lm_head")]
SYSTEM = "You are the questioner in a game of 20 Questions. Ask one yes/no question per turn."


def _time(fn, n: int = 100) -> float:
    for _ in range(5):
        fn()
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - t0) / n * 1e6


def matmul() -> dict:
    out = {}
    for k, n, name in SHAPES:
        x, w = torch.randn(32, k), torch.randn(n, k)
        scales = w.abs().amax(1) / 127
        wq = (w / scales[:, None]).round().clamp(-127, 127).to(torch.int8)
        lin = torch.nn.Sequential(torch.nn.Linear(k, n, bias=False))
        lin[0].weight.data = w
        dyn = torch.ao.quantization.quantize_dynamic(lin, {torch.nn.Linear: torch.ao.quantization.per_channel_dynamic_qconfig},
                                                     dtype=torch.qint8)
        xb, wb = x.bfloat16(), w.bfloat16()
        us = {"fp32": _time(lambda: x @ w.t()), "bf16": _time(lambda: xb @ wb.t()),
              "int8_weight_only": _time(lambda: torch._weight_int8pack_mm(x, wq, scales), n=10),
              "int8_dynamic": _time(lambda: dyn(x))}
        out[f"{name} {k}x{n}"] = {key: round(v, 1) for key, v in us.items()}
    return out


def _chat_ids(tok, extra: str = "") -> list[int]:
    msgs = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Ask your first question." + extra}]
    return tok.encode(tok.apply_chat_template(msgs, add_generation_prompt=True, tokenize=False))


def ct2() -> dict:
    import ctranslate2
    from ctranslate2.converters.converter import Converter
    from ctranslate2.converters.transformers import _MODEL_LOADERS

    tok, model = load_tokenizer("smollm2"), load_model("smollm2")

    class InMemory(Converter):  # the trainer's model as it is, no files read
        def _load(self):
            return _MODEL_LOADERS[type(model.config).__name__](model, tok)

    out: dict = {"version": ctranslate2.__version__}
    with tempfile.TemporaryDirectory() as d:
        t0 = time.perf_counter()
        InMemory().convert(d, force=True)
        out["convert_s"] = round(time.perf_counter() - t0, 2)
        same = tok.convert_ids_to_tokens(_chat_ids(tok))
        rng = random.Random(0)
        ragged = [tok.convert_ids_to_tokens(_chat_ids(tok, " word" * rng.randint(0, 60))) for _ in range(32)]
        for compute in ("float32", "int8"):
            t0 = time.perf_counter()
            gen = ctranslate2.Generator(d, device="cpu", compute_type=compute, intra_threads=torch.get_num_threads())
            row = {"load_s": round(time.perf_counter() - t0, 2)}
            opts = dict(max_length=24, sampling_topk=0, sampling_temperature=1.0, include_prompt_in_result=False,
                        end_token="<|im_end|>", return_end_token=True)
            gen.generate_batch([same] * 32, **opts)  # warm-up
            for label, prompts in (("same_prompt", [same] * 32), ("ragged_prompts", ragged)):
                t0 = time.perf_counter()
                res = gen.generate_batch(prompts, **opts)
                dt = time.perf_counter() - t0
                n = sum(len(r.sequences_ids[0]) for r in res)
                row[label] = {"seconds": round(dt, 3), "generated": n, "tok_per_s": round(n / dt, 1)}
            out[compute] = row
    return out


def gap() -> dict:
    from turncredit.chat import ChatBridge
    from turncredit.policy.backends import KVCacheBackend, SamplingParams

    tok, model = load_tokenizer("smollm2"), load_model("smollm2").eval()
    bridge = ChatBridge(tok)
    state = KVCacheBackend(model, bridge.end_of_turn_id, tok.pad_token_id).start(16, seed=0)
    seqs = [bridge.opening_ids([{"role": "system", "content": SYSTEM},
                                {"role": "user", "content": "Ask your first question."}]) for _ in range(16)]
    gens = state.generate(range(16), seqs, SamplingParams(max_new_tokens=24))
    ids = [s + g.ids for s, g in zip(seqs, gens)]
    width = max(map(len, ids))
    batch = torch.tensor([s + [tok.pad_token_id] * (width - len(s)) for s in ids])
    mask = torch.tensor([[1] * len(s) + [0] * (width - len(s)) for s in ids])
    act = torch.zeros_like(mask, dtype=torch.bool)
    for i, (s, g) in enumerate(zip(seqs, gens)):
        act[i, len(s) - 1:len(s) - 1 + len(g.ids)] = True  # positions that predict the sampled tokens

    def logps(m):
        with torch.no_grad():
            lp = torch.log_softmax(m(input_ids=batch, attention_mask=mask).logits.float(), -1)
        return lp[:, :-1].gather(-1, batch[:, 1:, None]).squeeze(-1)[act[:, :-1]]

    ref = logps(model)
    out = {"tokens": int(act.sum())}
    for name, qc in (("per_tensor", torch.ao.quantization.default_dynamic_qconfig),
                     ("per_channel", torch.ao.quantization.per_channel_dynamic_qconfig)):
        q = torch.ao.quantization.quantize_dynamic(copy.deepcopy(model), {torch.nn.Linear: qc}, dtype=torch.qint8)
        d = (logps(q) - ref).abs()
        out[name] = {"mean": round(d.mean().item(), 4), "max": round(d.max().item(), 4)}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("mode", choices=["matmul", "ct2", "gap"])
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    print(json.dumps({"mode": args.mode, "result": globals()[args.mode]()}, indent=1))


if __name__ == "__main__":
    main()
