"""One-shot experiment: whole steps of the plan's own models at real-job sizes (tens to hundreds of ms), to see
whether such rows calibrate a GPU type where the plan's small steps did not. Rows as `offpeak collect` writes them."""
import json, os, sys, time
import pandas as pd
from pathlib import Path
from offpeak_predictor.collectplan import ModelWorkload
from offpeak_predictor.collectrun import make_target, run_plan
from offpeak_predictor.db import BenchmarkDB

out = Path(sys.argv[1])
small = bool(os.environ.get("SMALL"))
target, amp = make_target(device="cuda" if not small else "cpu", gpu_type=None)
cnn = [(224, 64, 4, 32), (224, 64, 4, 96), (112, 96, 4, 128)]  # input, width, stages, batch
gpt = [(1024, 768, 6, 16384, 4), (1024, 768, 6, 16384, 16), (512, 1024, 8, 32768, 8)]  # seq, width, blocks, vocab, batch
if small:
    cnn, gpt = [(32, 8, 2, 2)], [(32, 64, 1, 128, 2)]
ws = []
for prec in ("fp32", amp or "bf16"):
    ws += [ModelWorkload("cnn", prec, b, 10 if not small else 2, input_size=s, width=w, depth=d) for s, w, d, b in cnn]
    ws += [ModelWorkload("transformer", prec, b, 10 if not small else 2, seq_len=q, width=w, depth=d, vocab=v)
           for q, w, d, v, b in gpt]
t0 = time.time()
res = run_plan(ws, target=target, graph_dir=out.parent / "bigsteps_graphs",
               on_done=lambda w: print(f"[{time.time()-t0:6.1f}s] {w.label}", flush=True))
db = BenchmarkDB(out)
db.append("model_samples", pd.DataFrame(res.model_rows))
print(json.dumps({"rows": len(res.model_rows), "timing_seconds": round(res.wall_seconds, 1)}))
