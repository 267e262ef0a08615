"""The analysis pod's two offpeak steps: the emit command and the zipapp bundle, run for real."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from offpeak_graph.schema import ModelGraph, save_graph
from optestkit import small_graph

from offpeak_operator import emit
from offpeak_operator.bundle import build_bundle
from offpeak_operator.graphstore import decode_bytes, from_log


def test_emit_prints_a_block_the_operator_reads_back(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                      graph: ModelGraph) -> None:
    path = tmp_path / "graph.json.gz"
    save_graph(graph, path)
    assert emit.main([str(path)]) == 0
    data, header = from_log(capsys.readouterr().out)
    assert decode_bytes(data).content_hash() == graph.content_hash() == header["hash"]


def test_emit_reduces_to_the_limit(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    big = small_graph(blocks=3000)
    for i, op in enumerate(big.ops):
        op.name = f"block.{i}"
    save_graph(big, tmp_path / "g.json")
    assert emit.main([str(tmp_path / "g.json"), "--limit-bytes", "20000"]) == 0
    data, header = from_log(capsys.readouterr().out)
    assert header["reduced"] == "aggregate" and header["original_ops"] == len(big.ops)
    assert decode_bytes(data).total_flops_forward == big.total_flops_forward


def test_emit_fails_clearly_on_a_missing_graph(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert emit.main([str(tmp_path / "nope.json.gz")]) == 1
    assert "offpeak emit: error" in capsys.readouterr().err


def test_bundle_runs_the_offpeak_cli_from_a_zipapp(tmp_path: Path) -> None:
    pyz = build_bundle(tmp_path / "offpeak.pyz")
    # -I -S: no site-packages, so only the zipapp (not the editable install) provides offpeak
    done = subprocess.run([sys.executable, "-I", "-S", str(pyz), "--help"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "usage: offpeak" in done.stdout


@pytest.mark.slow
@pytest.mark.torch
def test_analysis_pod_steps_end_to_end_with_a_user_entrypoint(tmp_path: Path) -> None:
    """What the analysis pod does, as processes: bundle -> extract in the "user image" -> emit -> operator reads."""
    from offpeak_operator.jobspec import parse_spec
    from offpeak_operator.podspecs import extract_args
    from optestkit import job_body

    user = tmp_path / "user"
    user.mkdir()
    (user / "mymodel.py").write_text("import torch.nn as nn\n"
                                     "def build():\n"
                                     "    return nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))\n")
    pyz = build_bundle(tmp_path / "offpeak" / "offpeak.pyz")
    out = tmp_path / "graph" / "graph.json.gz"
    out.parent.mkdir()
    spec = parse_spec(job_body(modelSource={"entrypoint": "mymodel:build"}, inputShape=[16], batchSize=4)["spec"])
    env = {"PYTHONPATH": str(user), "CUDA_VISIBLE_DEVICES": "", "PATH": "/usr/bin:/bin"}
    done = subprocess.run([sys.executable, str(pyz), *extract_args(spec, out=str(out))], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    emitted = subprocess.run([sys.executable, "-m", "offpeak_operator.emit", str(out)], capture_output=True,
                             text=True, timeout=120)
    assert emitted.returncode == 0, emitted.stderr
    data, header = from_log("some noise\n" + emitted.stdout)
    graph = decode_bytes(data)
    assert graph.batch_size == 4 and header["hash"] == graph.content_hash()
    assert sum(op.type == "linear" for op in graph.ops) == 2


def _fake_python(tmp_path: Path, code: int) -> str:
    """A stand-in interpreter that writes noise then the CLI's one-line error and exits `code`."""
    script = tmp_path / f"python{code}"
    script.write_text("#!/bin/sh\necho 'UserWarning: noise' >&2\n"
                      f"echo \"offpeak extract: error: unknown torchvision model 'zz'\" >&2\nexit {code}\n")
    script.chmod(0o755)
    return str(script)


def test_in_process_extraction_keeps_the_exit_status_and_one_line(tmp_path: Path) -> None:
    from offpeak_operator.extraction import ExtractionFailed, extract_in_process
    from offpeak_operator.jobspec import parse_spec
    from optestkit import job_body

    spec = parse_spec(job_body(modelSource={"torchvision": "zz"})["spec"])
    with pytest.raises(ExtractionFailed) as bad:
        extract_in_process(spec, timeout_seconds=30, python=_fake_python(tmp_path, 2))
    assert bad.value.exit_code == 2 and str(bad.value) == "offpeak extract: error: unknown torchvision model 'zz'"
    with pytest.raises(ExtractionFailed) as crash:
        extract_in_process(spec, timeout_seconds=30, python=_fake_python(tmp_path, 1))
    assert crash.value.exit_code == 1 and "exit 1" in str(crash.value)


@pytest.mark.slow
@pytest.mark.torch
def test_bundled_extractor_exits_2_with_one_line_on_a_bad_entrypoint(tmp_path: Path) -> None:
    """The analysis pod's extract step, as a process: a missing entry point module is a UserError -> exit 2."""
    from offpeak_operator.jobspec import parse_spec
    from offpeak_operator.podspecs import extract_args
    from optestkit import job_body

    pyz = build_bundle(tmp_path / "offpeak.pyz")
    spec = parse_spec(job_body(modelSource={"entrypoint": "no_such_pkg_xyz.model:build"}, inputShape=[16])["spec"])
    done = subprocess.run([sys.executable, str(pyz), *extract_args(spec, out=str(tmp_path / "g.json.gz"))],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300,
                          env={"CUDA_VISIBLE_DEVICES": "", "PATH": "/usr/bin:/bin"})
    assert done.returncode == 2, done.stderr[-2000:]
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert lines[-1].startswith("offpeak extract: error:") and "no_such_pkg_xyz" in lines[-1]
    assert "Traceback" not in done.stderr


@pytest.mark.slow
@pytest.mark.torch
def test_extract_image_pod_steps_end_to_end_name_the_model_as_the_operator_does(tmp_path: Path) -> None:
    """The extract-image analysis pod's commands as processes (its mounts made folders): an hfConfigMap's graph is
    named after the ConfigMap, as the operator's own extraction names it (the folder of its config.json)."""
    from offpeak_operator.jobspec import parse_spec
    from offpeak_operator.podspecs import HF_CONFIG_DIR, analysis_pod
    from offpeak_operator.settings import AnalysisSettings
    from optestkit import job_body

    config = '{"model_type": "gpt2", "n_layer": 1, "n_head": 2, "n_embd": 32, "vocab_size": 100, "n_positions": 64}'
    body = job_body(modelSource={"hfConfigMap": {"name": "tiny-gpt"}}, seqLen=16, batchSize=2)
    pod = analysis_pod(body, parse_spec(body["spec"]), AnalysisSettings(extract_image="offpeak:1-extract"))
    ((extract,), (emit_step,)) = pod["spec"]["initContainers"], pod["spec"]["containers"]
    item = pod["spec"]["volumes"][-1]["configMap"]["items"][0]
    mounted = tmp_path / "hf" / item["path"]  # what the kubelet makes of the ConfigMap volume
    mounted.parent.mkdir(parents=True)
    mounted.write_text(config)
    graph_dir = tmp_path / "graph"
    graph_dir.mkdir()

    def local(arg: str) -> str:
        return arg.replace(HF_CONFIG_DIR + "/", f"{tmp_path}/hf/").replace("/graph/", f"{graph_dir}/")

    assert extract["command"][0] == "offpeak"  # the image's own CLI, no bundle
    done = subprocess.run([sys.executable, "-m", "offpeak", *map(local, extract["command"][1:])], cwd=tmp_path,
                          env={"CUDA_VISIBLE_DEVICES": "", "HOME": str(tmp_path), "PATH": "/usr/bin:/bin"},
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    emitted = subprocess.run([sys.executable, *map(local, emit_step["command"][1:])], capture_output=True, text=True,
                             timeout=120)
    assert emitted.returncode == 0, emitted.stderr
    graph = decode_bytes(from_log(emitted.stdout)[0])
    assert graph.model_name == "tiny-gpt" and graph.batch_size == 2
    assert any(op.type == "linear" for op in graph.ops)
