"""Seconds per SFT step of the main job's SmolLM2 with and without running the shared opening
(the system prompt) once per batch (`ActionLogits.share_prefix`), alternating on one batch of 8
expert dialogues, in the precision `bf16: auto` picks (benchmarks/memory-cpu.md). Run it once
as it is and once under `ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2`."""

import sys
import time

import torch

from turncredit.config import load_config
from turncredit.memory import StagePeak
from turncredit.policy.session import PolicySession
from turncredit.precision import choose_precision
from turncredit.policy.scoring import ActionLogits, action_logprobs, autocast, model_device
from turncredit.train.sft import _dialogue_tokens, dialogues_to_batch
from turncredit.workflows import make_demos

torch.set_num_threads(2)
cfg = load_config(sys.argv[1] if len(sys.argv) > 1 else "configs/20q-main.yaml")
session = PolicySession.from_config(cfg)
precision = choose_precision(cfg.sft.bf16, model_device(session.model))
opt = torch.optim.AdamW(session.model.parameters(), lr=1e-6)
demos = [d.chat() for d in make_demos(cfg, cfg.sft.batch_size)]
batch = dialogues_to_batch(session, demos, 2048)
lengths = [len(_dialogue_tokens(session, d, 2048)[0]) for d in demos]
print(f"batch {tuple(batch.input_ids.shape)}, tokens {sum(lengths)}, {precision.note('SFT')}", flush=True)
for share in [False, True] * 3:
    scorer = ActionLogits(session.model, share_prefix=share)
    with StagePeak() as mem:
        t0 = time.perf_counter()
        with autocast(precision.bf16):
            logp, _ = action_logprobs(scorer, batch)
        loss = -(logp * batch.targets).sum() / batch.targets.sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
        dt = time.perf_counter() - t0
    print(f"share_prefix={share}: {dt:.2f} s/step, peak RSS {mem.peak_gb} GB, loss {loss.item():.4f}", flush=True)
