"""Scrape the running agent every 2 s: its offpeak_ metric lines and /readyz, one JSON line per scrape."""
import json, os, sys, time, urllib.request
out, stop = sys.argv[1], sys.argv[2]
with open(out, "a") as f:
    while not os.path.exists(stop):
        rec = {"t": time.time()}
        for path in ("metrics", "readyz"):
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:9400/{path}", timeout=2) as r:
                    body = r.read().decode()
                    rec[path] = [l for l in body.splitlines() if l.startswith("offpeak_")] if path == "metrics" else r.status
            except Exception as e:
                rec[path] = f"error: {e}"
        f.write(json.dumps(rec) + "\n"); f.flush()
        time.sleep(2)
