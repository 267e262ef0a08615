"""The shipped model trains on our own H100 steps and single ops; the evaluation's tables keep every H100 row out."""

import json
import shutil

from offpeak_predictor import loaders as L
from offpeak_predictor.pipeline import load_tables, modern_model_rows, modern_op_rows

SAMPLE = L.runtime_dir()


def _row(model: str, precision: str) -> dict[str, object]:
    return {"kind": "vision", "model": model, "batch_size": 16, "seq_len": None, "mode": "train",
            "precision": precision, "optimizer": "sgd", "torch": "2.11.0+cu130", "device": "NVIDIA H100 80GB HBM3",
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
    return root


def test_modern_rows_train_the_shipped_model_but_not_the_evaluation(tmp_path, monkeypatch):
    root = _root_with_h100_steps(tmp_path)
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
    assert not evaluated["gpu"].astype(str).str.startswith("H100").any()
    assert len(shipped) == len(evaluated) + 2
    h100_ops = shipped_ops[shipped_ops["source"] == "offpeak-h100-ops"]
    assert sorted(h100_ops["op_class"]) == ["conv", "gemm", "norm"]  # our single ops teach the shipped op models
    assert set(h100_ops["gpu"]) == set(h100["gpu"])
    assert not evaluated_ops["gpu"].astype(str).str.startswith("H100").any()
    assert len(shipped_ops) == len(evaluated_ops) + 3


def test_without_our_h100_folder_there_are_no_modern_rows(tmp_path):
    root = tmp_path / "runtime"
    root.mkdir()
    assert modern_model_rows(root).empty
    assert modern_op_rows(root).empty
