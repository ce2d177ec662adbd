"""Where the peer bench's update peak comes from: RSS (and the sampler's peak) at each point of one update.

    PYTHONPATH=src python probe.py [--trim] [KEY=VALUE ...]   (from the repository root)

--trim: hand freed heap back (`release_freed`) after every backward (probe-mb8-trim.txt)."""
import json, sys, threading, time, psutil, torch
from turncredit.config import load_config
from turncredit.train.trainer import Trainer
from turncredit.memory import release_freed
import turncredit.train.update as upd

proc = psutil.Process(); peak = [0]; stop = threading.Event()
def sampler():
    while not stop.is_set():
        peak[0] = max(peak[0], proc.memory_info().rss); time.sleep(0.005)
threading.Thread(target=sampler, daemon=True).start()
def mark(what):
    r = proc.memory_info().rss >> 20
    print(json.dumps({"at": what, "rss_mib": r, "peak_since_mib": peak[0] >> 20}), flush=True); peak[0] = 0

orig_backward = torch.Tensor.backward
def backward(self, *a, **k):
    mark("before backward (forward's activations held)")
    out = orig_backward(self, *a, **k)
    if TRIM:
        release_freed()
    mark("after backward")
    return out
torch.Tensor.backward = backward
orig_step = upd.PPOUpdate._optimizer_step
def step(self, loss):
    mark("before optimizer step")
    out = orig_step(self, loss)
    mark("after optimizer step")
    return out
upd.PPOUpdate._optimizer_step = step

TRIM = "--trim" in sys.argv
cfg = load_config("configs/bench-peer-workload.yaml", [a for a in sys.argv[1:] if a != "--trim"])
import tempfile
with tempfile.TemporaryDirectory() as d:
    t = Trainer(cfg, d); mark("loaded")
    from turncredit.bench import _fixed_tasks
    p = t.play(1, _fixed_tasks(t.env, 1), t.env); mark("after rollout (released)")
    lens = sorted(len(ep.token_ids()) for ep in p.episodes); print("tokens", sum(lens), "longest", lens[-1])
    t.learn(1, p.episodes); mark("after learn (released)")
    p = t.play(2, _fixed_tasks(t.env, 2), t.env); mark("after rollout 2")
    t.learn(2, p.episodes); mark("after learn 2")
stop.set()
