"""`offpeak extract` end to end through the dispatcher: output files, summary, and one-line errors (exit 2)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from offpeak.cli import main
from offpeak_graph.schema import load_graph

REPO = Path(__file__).resolve().parents[2]


def _fail(capsys, argv: list[str]) -> str:
    code = main(["extract", *argv, "--summary"])
    err = capsys.readouterr().err
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("offpeak extract: error: ")
    assert "Traceback" not in err
    return lines[0]


def test_extract_writes_a_gzipped_graph_and_prints_a_summary(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(REPO)
    out = tmp_path / "cnn.json.gz"
    code = main(["extract", "--entrypoint", "examples.models.tiny_cnn:build", "--batch-size", "8",
                 "--input-shape", "3,32,32", "--mode", "inference", "--optimizer", "sgd", "--out", str(out),
                 "--summary"])  # fmt: skip
    captured = capsys.readouterr()
    assert code == 0, captured.err
    summary = json.loads(captured.out)
    graph = load_graph(out)
    assert summary["ops"] == len(graph.ops) and summary["params"] == graph.total_params == 5514
    assert summary["flops_forward"] == graph.total_flops_forward > 0
    assert summary["content_hash"] == graph.content_hash()
    assert (graph.mode, graph.optimizer, graph.batch_size) == ("inference", "sgd", 8)


def test_extract_by_torchvision_and_hf_name(tmp_path, capsys):
    assert main(["extract", "--torchvision", "resnet18", "--batch-size", "2", "--summary"]) == 0
    assert json.loads(capsys.readouterr().out)["params"] == 11_689_512
    out = tmp_path / "bert.json"
    argv = ["extract", "--hf-config", "bert_large", "--batch-size", "1", "--seq-len", "64", "--out", str(out)]
    assert main(argv) == 0
    assert load_graph(out).model_family == "bert"


def test_entry_point_errors(capsys, entrypoint_dir):
    path = ["--python-path", str(entrypoint_dir), "--batch-size", "1", "--input-shape", "4"]
    assert "cannot import entry point module 'no_such_pkg.models'" in _fail(
        capsys, ["--entrypoint", "no_such_pkg.models:build", "--batch-size", "1", "--input-shape", "4"])
    assert "has no attribute 'missing'" in _fail(capsys, ["--entrypoint", "offpeak_test_models:missing", *path])
    assert "raised ValueError: cannot build: missing weights" in _fail(
        capsys, ["--entrypoint", "offpeak_test_models:raises", *path])
    assert "returned dict, expected a torch.nn.Module" in _fail(
        capsys, ["--entrypoint", "offpeak_test_models:not_a_module", *path])
    assert "must look like package.module:function" in _fail(capsys, ["--entrypoint", "nocolon", *path])
    line = _fail(capsys, ["--entrypoint", "offpeak_test_models:linear", "--python-path", str(entrypoint_dir),
                          "--batch-size", "1"])  # fmt: skip
    assert "--input-shape" in line


def test_impossible_input_shapes(capsys, entrypoint_dir):
    line = _fail(capsys, ["--entrypoint", "offpeak_test_models:linear", "--python-path", str(entrypoint_dir),
                          "--batch-size", "1", "--input-shape", "5"])  # fmt: skip
    assert "failed on batch 1, input shape [5]" in line and "check --input-shape" in line
    assert "input shape [3, 4, 4]" in _fail(capsys, ["--torchvision", "vgg11", "--batch-size", "1", "--input-shape",
                                                     "3,4,4"])  # fmt: skip
    assert "comma-separated integers" in _fail(capsys, ["--torchvision", "vgg11", "--batch-size", "1",
                                                        "--input-shape", "3,x,y"])  # fmt: skip
    assert "exceeds this model's 1024 positions" in _fail(capsys, ["--hf-config", "gpt2", "--batch-size", "1",
                                                                   "--seq-len", "4096"])  # fmt: skip
    assert "batch size must be a positive integer" in _fail(capsys, ["--torchvision", "vgg11", "--batch-size", "0"])


def test_unknown_torchvision_name_suggests_close_matches(capsys):
    line = _fail(capsys, ["--torchvision", "resnet5", "--batch-size", "1"])
    assert "unknown torchvision model 'resnet5'" in line and "resnet50" in line


def test_bad_hf_configs(tmp_path, capsys):
    no_type = tmp_path / "no_type.json"
    no_type.write_text('{"n_embd": 64}')
    assert "has no model_type" in _fail(capsys, ["--hf-config", str(no_type), "--batch-size", "1"])
    bad_type = tmp_path / "bad_type.json"
    bad_type.write_text('{"model_type": "not-a-model"}')
    assert "unknown model_type 'not-a-model'" in _fail(capsys, ["--hf-config", str(bad_type), "--batch-size", "1"])
    broken = tmp_path / "broken.json"
    broken.write_text('{"model_type": "gpt2", ')
    assert "cannot read HuggingFace config" in _fail(capsys, ["--hf-config", str(broken), "--batch-size", "1"])
    inconsistent = tmp_path / "heads.json"
    inconsistent.write_text('{"model_type": "gpt2", "n_embd": 100, "n_head": 7, "n_layer": 1}')
    assert "gpt2" in _fail(capsys, ["--hf-config", str(inconsistent), "--batch-size", "1", "--seq-len", "8"])
    line = _fail(capsys, ["--hf-config", "no-such-model", "--batch-size", "1"])
    assert "gpt2-large" in line and "bert-large-uncased" in line
    assert "not found" in _fail(capsys, ["--hf-config", str(tmp_path / "missing.json"), "--batch-size", "1"])


def test_corrupt_onnx(tmp_path, capsys):
    corrupt = tmp_path / "corrupt.onnx"
    corrupt.write_bytes(b"\x08\x07garbage-that-is-not-protobuf" * 10)
    assert "is not a valid ONNX model" in _fail(capsys, ["--onnx", str(corrupt), "--batch-size", "1"])
    assert "not found" in _fail(capsys, ["--onnx", str(tmp_path / "missing.onnx"), "--batch-size", "1"])


def test_nothing_to_do_is_an_error(capsys):
    assert main(["extract", "--torchvision", "resnet18", "--batch-size", "1"]) == 2
    assert "pass --out FILE and/or --summary" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [["--batch-size", "1"], ["--torchvision", "a", "--onnx", "b", "--batch-size", "1"]])
def test_source_is_required_and_exclusive(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["extract", *argv])
    assert exc.value.code == 2


def test_a_real_process_prints_one_line_and_no_traceback(tmp_path, entrypoint_dir):
    """The same contract through `python -m offpeak` (library warnings and logging must not leak to stderr)."""
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-m", "offpeak", "extract", "--entrypoint", "offpeak_test_models:raises", "--python-path",
         str(entrypoint_dir), "--batch-size", "1", "--input-shape", "4", "--out", str(tmp_path / "g.json")],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 2
    message = "entry point 'offpeak_test_models:raises' raised ValueError: cannot build: missing weights"
    assert done.stderr.splitlines() == [f"offpeak extract: error: {message}"]
    assert done.stdout == "" and not (tmp_path / "g.json").exists()


def test_a_missing_extractor_library_is_a_clear_error(capsys, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "torchvision", None)  # import torchvision now raises ImportError
    line = _fail(capsys, ["--torchvision", "resnet18", "--batch-size", "1"])
    assert "torchvision is not importable in this Python" in line and "offpeak[extract]" in line
