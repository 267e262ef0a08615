"""measure_models.py's configs with fewer steps (device time is short), train configs first, a start deadline."""
import json, os, sys, time
import torch
sys.argv = [sys.argv[0], sys.argv[1]]
import measure_models as mm

OUT = sys.argv[1]
DEADLINE = time.time() + float(os.environ.get("MEASURE_BUDGET_S", "240"))
order = {("train", "fp32"): 0, ("train", "bf16"): 0, ("train", "fp16"): 1, ("inference", "fp16"): 2,
         ("inference", "bf16"): 2}
cfgs = sorted(mm.configs(), key=lambda c: order[(c["mode"], c["precision"])])
if os.environ.get("SKIP_DONE"):
    key = lambda c: (c["model"], c["batch_size"], c["mode"], c["precision"])
    done = {key(json.loads(l)) for l in open(os.environ["SKIP_DONE"])}
    cfgs = [c for c in cfgs if key(c) not in done]
if os.environ.get("DRY"):
    print(len(cfgs), cfgs[:3]); sys.exit(0)
dev = torch.device("cuda")
meta = {"torch": torch.__version__, "cuda": torch.version.cuda, "device": torch.cuda.get_device_name(dev),
        "cudnn": torch.backends.cudnn.version(), "allow_tf32_matmul": torch.backends.cuda.matmul.allow_tf32,
        "allow_tf32_cudnn": torch.backends.cudnn.allow_tf32, "cudnn_benchmark": torch.backends.cudnn.benchmark,
        "warmup": 2, "steps": 10}
start = time.time()
with open(OUT, "a") as f:
    for cfg in cfgs:
        if time.time() > DEADLINE:
            print("deadline: stopped before", cfg["model"], cfg["mode"], cfg["precision"], flush=True)
            break
        rec = dict(cfg, **meta)
        try:
            rec.update(mm.run(dict(cfg, warmup=2, steps=10), dev))
        except Exception as e:
            rec["error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"
        torch.cuda.empty_cache()
        f.write(json.dumps(rec) + "\n"); f.flush()
        print(f"[{time.time()-start:6.1f}s] {cfg['model']} bs{cfg['batch_size']} {cfg['mode']} {cfg['precision']}: "
              f"{rec.get('step_s', rec.get('error'))}", flush=True)
