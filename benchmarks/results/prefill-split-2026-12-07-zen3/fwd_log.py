import sys, time, json, torch
from turncredit.config import load_config
from turncredit.workflows import evaluate_model
from turncredit.policy import backends
orig = backends._Rows.forward
log = []
def fwd(self, b, ids, new_mask):
    t = time.perf_counter(); out = orig(self, b, ids, new_mask)
    log.append((tuple(ids.shape), int(new_mask.sum()), self.mask.shape[1], time.perf_counter() - t))
    return out
backends._Rows.forward = fwd
cfg = load_config("configs/20q-main.yaml", ["eval.num_tasks=10"] + sys.argv[2:])
t = time.perf_counter()
res, eps = evaluate_model(cfg, sys.argv[1])
print("wall", time.perf_counter() - t, res["tokens_generated"], res["seconds_generate"], res["mean_at_k"])
json.dump(log, open("/tmp/prof/fwd_log.json", "w"))
pre = [l for l in log if l[0][1] > 1]; dec = [l for l in log if l[0][1] == 1]
for name, g in (("prefill", pre), ("decode", dec)):
    print(name, len(g), "rows*width", sum(a[0][0]*a[0][1] for a in g), "real tokens", sum(a[1] for a in g), "s", sum(a[3] for a in g))
