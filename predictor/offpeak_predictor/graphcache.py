"""Model graphs for benchmark rows and CLI requests, cached on disk (extraction costs seconds).

Graphs come from the one extractor, `offpeak_graph.extract.extract_graph`; when it refuses a model its error is
the answer (no second recorder). The cache key holds the extraction arguments and a fingerprint of the extractor's
source, so a changed extractor never serves graphs an older one cached (re-extracting the whole training set
takes about a minute).
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
from pathlib import Path
from typing import Any

import offpeak_graph
from offpeak_core.datapaths import cache_dir as offpeak_cache_dir
from offpeak_graph.schema import ModelGraph, load_graph, save_graph


def cache_dir() -> Path:
    """`$OFFPEAK_GRAPH_CACHE`, else `graphs/` in offpeak's cache (`$OFFPEAK_CACHE` or `~/.cache/offpeak`)."""
    return Path(os.environ.get("OFFPEAK_GRAPH_CACHE") or offpeak_cache_dir() / "graphs")


def source_fingerprint(package_dir: Path) -> str:
    """Hash of the Python files of one package folder (names and contents)."""
    digest = hashlib.sha256()
    for path in sorted(package_dir.glob("*.py")):
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


@functools.cache
def extractor_fingerprint() -> str:
    """Fingerprint of the installed `offpeak_graph`: changes whenever the extractor's code does."""
    return source_fingerprint(Path(offpeak_graph.__file__).parent)


def cache_key(args: dict[str, Any]) -> str:
    body = json.dumps({"extractor": f"offpeak_graph:{extractor_fingerprint()}", **args}, sort_keys=True, default=str)
    return hashlib.sha256(body.encode()).hexdigest()[:24]


def extract(**args: Any) -> ModelGraph:
    """Extract a graph (no cache); `extract_graph`'s UserError when it cannot."""
    from offpeak_graph.extract import extract_graph

    return extract_graph(**args)


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
