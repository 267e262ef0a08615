"""The shipped model trains on our own steps and single ops of every GPU we measured; the evaluation's tables keep
every row of those GPUs out."""

import json
import shutil

from offpeak_predictor import loaders as L
from offpeak_predictor.pipeline import load_tables, modern_model_rows, modern_op_rows

SAMPLE = L.runtime_dir()


def _row(model: str, precision: str, device: str = "NVIDIA H100 80GB HBM3") -> dict[str, object]:
    return {"kind": "vision", "model": model, "batch_size": 16, "seq_len": None, "mode": "train",
            "precision": precision, "optimizer": "sgd", "torch": "2.11.0+cu130", "device": device,
            "step_s": 0.011}  # fmt: skip


def _root_with_h100_steps(tmp_path):
    """Two folders of the data root in use, plus three H100 steps (one of a held-out family)."""
    root = tmp_path / "runtime"
    for folder in ("deepbench", "ryujaehun_pytorch_gpu_benchmark"):
        shutil.copytree(SAMPLE / folder, root / folder, ignore=shutil.ignore_patterns("*.gz"))
    (root / "offpeak-h100").mkdir()
    rows = [_row("resnet34", "fp32"), _row("resnet34", "bf16"), _row("mnasnet1_0", "fp16")]
    (root / "offpeak-h100" / "h100_models.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (root / "offpeak-h100" / "h100_ops.csv").write_text(
        "op,precision,bytes,c,flops,head_dim,heads,hw,k,m,n,numel,r,seq,stride,time_s\n"
        "gemm,bf16,,,2147483648,,,,1024,1024,1024,,,,,1.1e-05\n"
        "conv2d_fwd,tf32,,64,7398752256,,,56,64,,32,,3,,1,0.000128\n"
        "layernorm_fwd,fp32,524288,,,,,,,,,65536,,,,2.7e-05\n")
    (root / "offpeak-h200").mkdir()
    (root / "offpeak-h200" / "h200_models.jsonl").write_text(json.dumps(_row("resnet34", "fp16", "NVIDIA H200")) + "\n")
    (root / "offpeak-h200" / "h200_ops.csv").write_text(
        "op,precision,bytes,c,flops,head_dim,heads,hw,k,m,n,numel,r,seq,stride,time_s\n"
        "gemm,bf16,,,2147483648,,,,1024,1024,1024,,,,,1.0e-05\n")
    return root


def _h200_under(root_of_test):
    """Our H200 rows read from the test's data root instead of the checkout."""
    return L.OwnGpu(gpu="H200", folder=lambda root: root_of_test / "offpeak-h200", stem="h200")


def test_modern_rows_train_the_shipped_model_but_not_the_evaluation(tmp_path, monkeypatch):
    root = _root_with_h100_steps(tmp_path)
    monkeypatch.setitem(L.OWN_GPUS, "H200", _h200_under(root))
    monkeypatch.setattr(L, "OP_LOADERS", {"deepbench": L.load_deepbench})
    monkeypatch.setattr(L, "MODEL_LOADERS", {"ryujaehun": L.load_ryujaehun})
    import offpeak_predictor.pipeline as pipeline

    monkeypatch.setattr(pipeline, "OP_LOADERS", L.OP_LOADERS)
    monkeypatch.setattr(pipeline, "MODEL_LOADERS", L.MODEL_LOADERS)
    shipped_ops, shipped = load_tables(root, modern=True)
    evaluated_ops, evaluated = load_tables(root)
    h100 = shipped[shipped["gpu"].astype(str).str.startswith("H100")]
    assert sorted(h100["precision"]) == ["bf16", "fp32"]  # the held-out family (mnasnet) stays out even here
    assert set(h100["source"]) == {"offpeak-h100"}
    h200 = shipped[shipped["gpu"].astype(str).str.startswith("H200")]
    assert list(h200["source"]) == ["offpeak-h200"] and list(h200["precision"]) == ["fp16"]
    ours = ("H100", "H200")
    assert not evaluated["gpu"].astype(str).str.startswith(ours).any()
    assert len(shipped) == len(evaluated) + 3
    h100_ops = shipped_ops[shipped_ops["source"] == "offpeak-h100-ops"]
    assert sorted(h100_ops["op_class"]) == ["conv", "gemm", "norm"]  # our single ops teach the shipped op models
    assert set(h100_ops["gpu"]) == set(h100["gpu"])
    assert set(shipped_ops.loc[shipped_ops["source"] == "offpeak-h200-ops", "gpu"]) == set(h200["gpu"])
    assert not evaluated_ops["gpu"].astype(str).str.startswith(ours).any()
    assert len(shipped_ops) == len(evaluated_ops) + 4


def test_without_our_folders_there_are_no_modern_rows(tmp_path, monkeypatch):
    root = tmp_path / "runtime"
    root.mkdir()
    monkeypatch.setitem(L.OWN_GPUS, "H200", _h200_under(root))
    assert modern_model_rows(root).empty
    assert modern_op_rows(root).empty
