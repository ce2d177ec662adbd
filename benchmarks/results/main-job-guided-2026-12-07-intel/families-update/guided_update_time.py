"""Run at commit a4c5440 (which has `turncredit.train.update.families`), from the repo root:
    python guided_update_time.py SFT_CHECKPOINT runs/20q-main/rl/episodes/step_00001.jsonl 2
and again under ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 (native.txt, avx2.txt).
Seconds of one Trainer.update on a recorded guided step, each guided episode in a micro-batch
with its peer (families) against every episode dealt out by length alone, alternating."""

import copy
import json
import sys
import tempfile
import time

import torch

import turncredit.train.update as update
from turncredit.config import load_config
from turncredit.episode import Episode
from turncredit.memory import StagePeak
from turncredit.policy.session import PolicySession
from turncredit.train.trainer import Trainer

checkpoint, episodes_file = sys.argv[1], sys.argv[2]
repeats = int(sys.argv[3]) if len(sys.argv) > 3 else 2
cfg = load_config("configs/20q-main.yaml", [f"model.name={checkpoint}", "run.progress=never", "train.save_every=0"])
episodes = [Episode.from_dict(json.loads(line)) for line in open(episodes_file)]
session = PolicySession.from_config(cfg)
families = update.families
alone = lambda eps: [[ep] for ep in eps]  # noqa: E731  (the scheme before families)
print(f"{len(episodes)} episodes ({sum(ep.expert_from is not None for ep in episodes)} guided), "
      f"{sum(len(ep.token_ids()) for ep in episodes)} tokens", flush=True)
for shared in [False, True] * repeats:
    update.families = families if shared else alone
    model = copy.deepcopy(session.model)
    with tempfile.TemporaryDirectory() as run_dir:
        trainer = Trainer(cfg, run_dir, session=PolicySession.from_model(model, session.tokenizer))
        with StagePeak() as mem:
            t0 = time.perf_counter()
            stats = trainer.update([copy.deepcopy(ep) for ep in episodes])
            dt = time.perf_counter() - t0
    n = len(update.micro_batches(episodes, cfg.train))
    print(f"families={shared}: {dt:.1f} s, {n} micro-batches, loss {stats.loss:.4f}, bf16 {trainer.bf16}, "
          f"peak RSS {mem.peak_gb} GB", flush=True)
    torch.manual_seed(0)
