"""Model-graph sizes and extraction times for models the benchmarks name (ops, .json / .json.gz bytes).

Tells the operator what fits in a ConfigMap (1 MiB) and the predictor how large its inputs are. Prints one JSON
line per model, then a 100,000-op synthetic graph (the schema's size target: a few MB).
"""

from __future__ import annotations

import gzip
import json
import sys
import time
from pathlib import Path

MODELS: tuple[dict[str, object], ...] = (
    {"torchvision": "resnet50", "batch_size": 64},
    {"torchvision": "vgg16", "batch_size": 64},
    {"torchvision": "efficientnet_b7", "batch_size": 16},
    {"hf_config": "bert-large-uncased", "batch_size": 8, "seq_len": 512},
    {"hf_config": "gpt2-large", "batch_size": 4, "seq_len": 1024},
    {"hf_config": "opt_13", "batch_size": 4, "seq_len": 2048},
    {"hf_config": "gpt3_13", "batch_size": 1, "seq_len": 2048},
)


def sizes(data: dict[str, object]) -> tuple[int, int]:
    text = json.dumps(data, separators=(",", ":")).encode()
    return len(text), len(gzip.compress(text, mtime=0))


def main() -> int:
    from offpeak_graph.extract import extract_graph

    for kwargs in MODELS:
        start = time.perf_counter()
        graph = extract_graph(**kwargs)  # type: ignore[arg-type]
        seconds = time.perf_counter() - start
        plain, packed = sizes(graph.to_dict())
        print(json.dumps({"model": graph.model_name, "ops": len(graph.ops), "seconds": round(seconds, 2),
                          "json_bytes": plain, "json_gz_bytes": packed, "params": graph.total_params,
                          "gflops": round(graph.total_flops_forward / 1e9, 1)}), flush=True)  # fmt: skip
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "graph"))
    from test_graph_schema import synthetic_graph

    graph = synthetic_graph(100_000)
    plain, packed = sizes(graph.to_dict())
    print(json.dumps({"model": "synthetic", "ops": len(graph.ops), "json_bytes": plain, "json_gz_bytes": packed}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
