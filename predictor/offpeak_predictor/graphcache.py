"""Model graphs for benchmark rows and CLI requests, cached on disk (extraction costs seconds).

Prefers the real extractor `offpeak_graph.extract.extract_graph`; falls back to the predictor's stop-gap
recorder while that module is absent. The cache key includes which extractor produced the graph.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

from offpeak_graph.schema import ModelGraph, load_graph, save_graph


_STOPGAP_ARGS = {"torchvision", "hf_config", "batch_size", "input_shape", "seq_len", "precision", "mode", "optimizer"}


def cache_dir() -> Path:
    """`$OFFPEAK_GRAPH_CACHE`, else `~/.cache/offpeak/graphs`."""
    return Path(os.environ.get("OFFPEAK_GRAPH_CACHE") or Path.home() / ".cache" / "offpeak" / "graphs")


def extractor_name() -> str:
    try:
        from offpeak_graph import extract  # noqa: F401
    except ImportError:
        return "stopgap"
    return "offpeak_graph"


def cache_key(args: dict[str, Any]) -> str:
    body = json.dumps({"extractor": extractor_name(), **args}, sort_keys=True, default=str)
    return hashlib.sha256(body.encode()).hexdigest()[:24]


def extract(**args: Any) -> ModelGraph:
    """Extract a graph with whichever extractor is installed (no cache)."""
    try:
        from offpeak_graph.extract import extract_graph
    except ImportError:
        from offpeak_predictor.stopgap_graphs import record_graph

        unsupported = set(args) - _STOPGAP_ARGS
        if unsupported:
            raise ValueError(f"graph extraction of {sorted(unsupported)} needs offpeak_graph.extract")
        return record_graph(**args)
    try:
        return extract_graph(**args)
    except Exception as first:
        # The extractor refuses some models (e.g. data-dependent ops on the meta device); the meta recorder
        # often still manages. Keep the extractor's error when both fail.
        if not (args.keys() <= _STOPGAP_ARGS and ("torchvision" in args or "hf_config" in args)):
            raise
        from offpeak_predictor.stopgap_graphs import record_graph

        try:
            return record_graph(**args)
        except Exception:
            raise first from None


def get_graph(args: dict[str, Any], *, directory: Path | None = None) -> ModelGraph:
    """Graph for `extract_graph(**args)`, from the disk cache when present."""
    if "graph_file" in args:  # rows collected locally keep their graph in a file
        return load_graph(str(args["graph_file"]))
    directory = directory or cache_dir()
    path = directory / f"{cache_key(args)}.json.gz"
    if path.exists():
        try:
            return load_graph(path)
        except (OSError, ValueError, KeyError):
            path.unlink(missing_ok=True)
    graph = extract(**args)
    directory.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp.gz")
    save_graph(graph, tmp)
    tmp.replace(path)
    return graph
