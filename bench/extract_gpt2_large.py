"""Time and peak memory of extracting GPT-2 large at sequence 1024 (target: < 30 s and < 2 GB on 2 CPU cores).

Runs the extraction in a fresh child process so the peak RSS is the extraction's own (imports included).
Prints one JSON line: `seconds` (first extraction: includes transformers' lazy imports), `seconds_with_imports`
(from a bare interpreter), `seconds_again` (a second extraction in the same process), `peak_rss_mb`, `ops`, ...
"""

from __future__ import annotations

import json
import subprocess
import sys

CHILD = r"""
import json, resource, time
t0 = time.perf_counter()
from offpeak_graph.extract import extract_graph
import torch, transformers  # noqa: F401  (imported by extract_graph anyway; timed separately)
t1 = time.perf_counter()
graph = extract_graph(hf_config="gpt2-large", batch_size=1, seq_len=1024, precision="fp32", mode="train")
t2 = time.perf_counter()
extract_graph(hf_config="gpt2-large", batch_size=1, seq_len=1024, precision="fp32", mode="train")
t3 = time.perf_counter()
print(json.dumps({
    "model": "gpt2-large", "seq_len": 1024, "batch_size": 1, "extraction": graph.extraction,
    "seconds": round(t2 - t1, 2), "seconds_with_imports": round(t2 - t0, 2), "seconds_again": round(t3 - t2, 2),
    "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    "ops": len(graph.ops), "params": graph.total_params, "gflops": round(graph.total_flops_forward / 1e9, 1),
}))
"""


def main() -> int:
    result = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, check=False)
    if result.returncode != 0:
        print(result.stderr, file=sys.stderr)
        return result.returncode
    figures = json.loads(result.stdout.strip().splitlines()[-1])
    figures["within_target"] = figures["seconds_with_imports"] < 30 and figures["peak_rss_mb"] < 2048
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
