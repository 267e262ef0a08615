"""Graph extraction for torchvision/hfConfig sources inside the operator's pod, as a subprocess with a timeout.

A subprocess keeps torch out of the operator's own memory and lets a hung extraction be killed.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import tempfile
from pathlib import Path

from offpeak_graph.schema import ModelGraph

from offpeak_operator.graphstore import decode_bytes
from offpeak_operator.jobspec import JobSpec
from offpeak_operator.podspecs import extract_args


class ExtractionFailed(RuntimeError):
    """Extraction did not produce a graph; the message is shown in the job's GraphReady condition."""


def extract_in_process(spec: JobSpec, *, timeout_seconds: float, python: str = sys.executable) -> ModelGraph:
    if importlib.util.find_spec("torch") is None:
        raise ExtractionFailed("the operator image lacks the [extract] extra (torch), so it cannot extract "
                               f"{spec.model_source.kind} models; use modelSource.graphConfigMap or entrypoint")
    with tempfile.TemporaryDirectory(prefix="offpeak-extract-") as tmp:
        out = Path(tmp) / "graph.json.gz"
        cmd = [python, "-m", "offpeak", *extract_args(spec, out=str(out))]
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_seconds, check=False)
        except subprocess.TimeoutExpired as e:
            raise ExtractionFailed(f"extraction of {spec.model_source.value} ran past {timeout_seconds:.0f}s") from e
        if done.returncode != 0 or not out.exists():
            tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
            raise ExtractionFailed(f"extraction of {spec.model_source.value} failed (exit {done.returncode}): "
                                   + " | ".join(tail))
        return decode_bytes(out.read_bytes())
