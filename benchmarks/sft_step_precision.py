"""Seconds per SFT step of the main job's SmolLM2 in fp32 and in bf16 autocast, alternating on
one batch of 8 expert dialogues (benchmarks/precision-cpu.md). Run it once as it is and once
under `ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2` to see an AVX2-only CPU."""

import time

import torch

from turncredit.workflows import make_demos
from turncredit.config import load_config
from turncredit.policy.session import PolicySession
from turncredit.precision import probe_bf16
from turncredit.train.sft import dialogues_to_batch, sft_loss

torch.set_num_threads(2)
cfg = load_config("configs/20q-starpo.yaml")
session = PolicySession.from_config(cfg)
opt = torch.optim.AdamW(session.model.parameters(), lr=1e-6)
batch = dialogues_to_batch(session, [d.chat() for d in make_demos(cfg, 8)], 2048)
print("batch", tuple(batch.input_ids.shape), "probe:", probe_bf16().detail, flush=True)
for bf16 in [False, True] * 2:
    t0 = time.perf_counter()
    loss = sft_loss(session, batch, bf16)
    opt.zero_grad()
    loss.backward()
    opt.step()
    print(f"bf16={bf16}: {time.perf_counter() - t0:.2f} s/step", flush=True)
