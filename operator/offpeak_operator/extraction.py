"""Graph extraction for torchvision/hfConfig sources inside the operator's pod, as a subprocess with a timeout.

A subprocess keeps torch out of the operator's own memory and lets a hung extraction be killed.
"""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from offpeak_graph.hf_presets import preset
from offpeak_graph.schema import ModelGraph

from offpeak_operator.graphstore import decode_bytes
from offpeak_operator.jobspec import JobSpec
from offpeak_operator.podspecs import extract_args
from offpeak_operator.jobstate import USER_ERROR_EXIT


class ExtractionFailed(RuntimeError):
    """Extraction did not produce a graph; the message is shown in the job's GraphReady condition.

    `exit_code` is the extractor's exit status (None: it never finished); 2 means the model source is invalid.
    """

    def __init__(self, message: str, *, exit_code: int | None = None) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def extract_in_process(spec: JobSpec, *, timeout_seconds: float, python: str = sys.executable) -> ModelGraph:
    if importlib.util.find_spec("torch") is None:
        raise ExtractionFailed("the operator image lacks the [extract] extra (torch), so it cannot extract "
                               f"{spec.model_source.kind} models; use modelSource.graphConfigMap or entrypoint")
    with tempfile.TemporaryDirectory(prefix="offpeak-extract-") as tmp:
        out = Path(tmp) / "graph.json.gz"
        hf_file = _write_hf_config(spec, Path(tmp))
        cmd = [python, "-m", "offpeak", *extract_args(spec, out=str(out), hf_config_file=hf_file)]
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_seconds, check=False)
        except subprocess.TimeoutExpired as e:
            raise ExtractionFailed(f"extraction of {spec.model_source.value} ran past {timeout_seconds:.0f}s") from e
        if done.returncode != 0 or not out.exists():
            lines = [line.strip() for line in (done.stderr or done.stdout).splitlines() if line.strip()]
            if done.returncode == USER_ERROR_EXIT and lines:
                raise ExtractionFailed(lines[-1], exit_code=done.returncode)  # the CLI's one-line UserError
            raise ExtractionFailed(f"extraction of {spec.model_source.value} failed (exit {done.returncode}): "
                                   + " | ".join(lines[-3:]), exit_code=done.returncode)
        return decode_bytes(out.read_bytes())


def hf_config_text(spec: JobSpec) -> str | None:
    """The HF config JSON to extract from: a built-in preset's, or the ConfigMap's text the reconciler read;
    None for other sources. Never the contents of a path."""
    source = spec.model_source
    if source.kind == "hfConfigMap":
        return source.config_json
    if source.kind == "hfConfig":
        found = preset(source.value)
        if found is None:
            raise ExtractionFailed(f"unknown built-in HF config {source.value!r}", exit_code=USER_ERROR_EXIT)
        return json.dumps(found)
    return None


def _write_hf_config(spec: JobSpec, directory: Path) -> str:
    text = hf_config_text(spec)
    if text is None:
        return ""
    folder = directory / (re.sub(r"[^A-Za-z0-9._-]", "-", spec.model_source.value) or "model")
    folder.mkdir()
    path = folder / "config.json"
    path.write_text(text)
    return str(path)
