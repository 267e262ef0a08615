"""Peak GPU memory: predicted (`offpeak_predictor.memory.peak_memory_bytes`) vs measured on a real H100.

Reads the 96 whole-step rows of `<data root>/runtime/offpeak-h100/h100_models.jsonl` (`peak_mem_gib` is
`torch.cuda.max_memory_allocated` over a train or inference step), extracts each model's graph with the project's
extractor (torchvision names; HF configs from that folder's `hf_configs/`; cached in the graph cache), predicts
every row, and prints per-row and mean |error|. The one fitted constant (`MemorySettings.slack`) is also re-fitted
leaving each model out in turn, to show what it is worth on a model it never saw.

Writes `reports/predictor/memory/memory_eval.json` and `predicted_vs_measured.png` (log-log).
`--write-test-data DIR` also writes the small derived fixtures the unit tests use (the measured rows as CSV and a
few graphs, with provenance), e.g. `--write-test-data tests/predictor/data`.

Run: `.venv/bin/python bench/memory_eval.py` (about a minute cold: graph extraction; seconds when cached).
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import sys
from pathlib import Path
from typing import Any

from offpeak_core.datapaths import describe, runtime_dir
from offpeak_graph.schema import ModelGraph, save_graph
from offpeak_predictor.graphcache import get_graph
from offpeak_predictor.memory import GIB, MemorySettings, peak_memory_bytes

REPO = Path(__file__).resolve().parents[1]
SLACK_GRID = [i / 1000 for i in range(0, 51)]  # 0 .. 5 %
# Graphs shipped with the unit tests: each exercises something the estimate must get right.
TEST_GRAPHS = [
    ("mobilenet_v2", 128, None, "train"),  # in-place ReLU6 keeps a copy of its input
    ("vit_b_32", 32, None, "train"),  # attention traced as its math decomposition runs fused
    ("gpt2_large_lm", 1, 1024, "train"),  # Python tanh-GELU, tied LM head, peak in AdamW's update
    ("bloom_560m_lm", 4, 1024, "train"),  # 250k-token vocabulary: the loss dominates; bf16 above fp32
    ("bloom_560m_lm", 4, 1024, "inference"),
    ("mistral_small_lm", 2, 2048, "train"),  # grouped-query attention: fp32 takes the math path
    ("resnet34", 16, None, "inference"),
]


def h100_dir() -> Path:
    return runtime_dir() / "offpeak-h100"


def load_rows(path: Path) -> list[dict[str, Any]]:
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [r for r in rows if "peak_mem_gib" in r and "error" not in r]


def graph_for(row: dict[str, Any], *, mode: str | None = None) -> ModelGraph:
    """The row's model at its batch (and sequence) size, extracted in fp32: the estimate re-derives dtypes."""
    args: dict[str, Any] = {"batch_size": row["batch_size"], "precision": "fp32", "mode": mode or row["mode"],
                            "optimizer": "none"}  # fmt: skip
    if row["kind"] == "vision":
        args["torchvision"] = row["model"]
    else:
        args["hf_config"] = str(h100_dir() / "hf_configs" / f"{row['model']}.json")
        args["seq_len"] = row["seq_len"]
    return get_graph(args)


def tensor_peaks(rows: list[dict[str, Any]], settings: MemorySettings) -> list[tuple[int, dict[str, Any]]]:
    """Per row: the peak of live tensor bytes (no workspace) and the full estimate as a dict."""
    out = []
    for r in rows:
        est = peak_memory_bytes(graph_for(r), precision=r["precision"], optimizer=r["optimizer"], mode=r["mode"],
                                settings=settings)  # fmt: skip
        out.append((est.peak_bytes - est.workspace_bytes, est.to_dict()))
    return out


def predict(tensors: int, slack: float, fixed: int) -> float:
    return tensors * (1 + slack) + fixed


def mean_abs_error(idx: list[int], tensors: list[int], measured: list[float], slack: float, fixed: int) -> float:
    return statistics.fmean(abs(predict(tensors[i], slack, fixed) / measured[i] - 1) for i in idx)


def fit_slack(idx: list[int], tensors: list[int], measured: list[float], fixed: int) -> float:
    """The slack (fraction of live tensor bytes) that minimises mean |error| over rows `idx`."""
    return min(SLACK_GRID, key=lambda s: mean_abs_error(idx, tensors, measured, s, fixed))


def plot(path: Path, rows: list[dict[str, Any]], preds: list[float]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.2, 6))
    styles = {("vision", "train"): ("tab:blue", "o"), ("vision", "inference"): ("tab:cyan", "s"),
              ("text", "train"): ("tab:red", "^"), ("text", "inference"): ("tab:orange", "v")}  # fmt: skip
    for (kind, mode), (color, marker) in styles.items():
        pts = [(r["peak_mem_gib"], p) for r, p in zip(rows, preds, strict=True) if (r["kind"], r["mode"]) == (kind, mode)]
        if pts:
            ax.scatter(*zip(*pts, strict=True), c=color, marker=marker, s=26, label=f"{kind} {mode} ({len(pts)})",
                       zorder=3)
    lo, hi = 0.15, 100.0
    ax.plot([lo, hi], [lo, hi], "k-", lw=0.8, zorder=2)
    ax.fill_between([lo, hi], [lo * 0.9, hi * 0.9], [lo * 1.1, hi * 1.1], color="0.88", label="±10 %", zorder=1)
    ax.set(xscale="log", yscale="log", xlim=(lo, hi), ylim=(lo, hi), xlabel="measured peak (GiB, max_memory_allocated)",
           ylabel="predicted peak (GiB)", title="Peak GPU memory per step, H100 (96 rows)")  # fmt: skip
    ax.legend(loc="upper left", fontsize=8)
    ax.grid(True, which="both", lw=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _compact_json(summary: dict[str, Any]) -> str:
    """Indented JSON with one line per row, so the report stays small and diffs stay readable."""
    head = {k: v for k, v in summary.items() if k != "per_row"}
    text = json.dumps(head, indent=1)[:-2]
    rows = ",\n  ".join(json.dumps(r, separators=(",", ":")) for r in summary["per_row"])
    return f'{text},\n "per_row": [\n  {rows}\n ]\n}}\n'


def write_test_data(directory: Path, rows: list[dict[str, Any]]) -> None:
    """The measured rows (CSV) and the graphs in TEST_GRAPHS, for tests/predictor/test_memory.py."""
    directory.mkdir(parents=True, exist_ok=True)
    fields = ["kind", "model", "batch_size", "seq_len", "mode", "precision", "optimizer", "peak_mem_gib"]
    with (directory / "h100_peak_memory.csv").open("w", newline="") as f:
        f.write("# derived by bench/memory_eval.py --write-test-data from runtime/offpeak-h100/h100_models.jsonl\n")
        writer = csv.DictWriter(f, fieldnames=fields, lineterminator="\n")
        writer.writeheader()
        for r in rows:
            writer.writerow({k: ("" if r[k] is None else r[k]) for k in fields})
    for model, batch, seq, mode in TEST_GRAPHS:
        kind = "vision" if seq is None else "text"
        graph = graph_for({"kind": kind, "model": model, "batch_size": batch, "seq_len": seq, "mode": mode})
        save_graph(graph, directory / f"{model}_b{batch}_{mode}.json.gz")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out-dir", type=Path, default=REPO / "reports" / "predictor" / "memory")
    parser.add_argument("--write-test-data", type=Path, default=None, metavar="DIR")
    args = parser.parse_args(argv)
    source = h100_dir() / "h100_models.jsonl"
    if not source.is_file():
        print(f"needs {source} (the full data, not the shipped sample); {describe()}", file=sys.stderr)
        return 2
    rows = load_rows(source)
    settings = MemorySettings()
    peaks = tensor_peaks(rows, settings)
    tensors = [t for t, _ in peaks]
    measured = [r["peak_mem_gib"] * GIB for r in rows]
    preds = [predict(t, settings.slack, settings.fixed_bytes) / GIB for t in tensors]
    errors = [p / r["peak_mem_gib"] - 1 for p, r in zip(preds, rows, strict=True)]
    everything = list(range(len(rows)))
    fitted = fit_slack(everything, tensors, measured, settings.fixed_bytes)

    models = sorted({r["model"] for r in rows})
    loo_errors: list[float] = [0.0] * len(rows)
    loo_slack: dict[str, float] = {}
    for model in models:
        train = [i for i in everything if rows[i]["model"] != model]
        slack = loo_slack[model] = fit_slack(train, tensors, measured, settings.fixed_bytes)
        for i in everything:
            if rows[i]["model"] == model:
                loo_errors[i] = predict(tensors[i], slack, settings.fixed_bytes) / measured[i] - 1
    no_slack = [predict(t, 0.0, settings.fixed_bytes) / m - 1 for t, m in zip(tensors, measured, strict=True)]

    def mae(values: list[float], keep: list[int] | None = None) -> float:
        picked = [abs(values[i]) for i in (keep if keep is not None else everything)]
        return round(100 * statistics.fmean(picked), 2)

    groups = {f"{k} {m}": [i for i in everything if (rows[i]["kind"], rows[i]["mode"]) == (k, m)]
              for k in ("vision", "text") for m in ("train", "inference")}  # fmt: skip
    print(f"{'model':20s} {'batch':>5s} {'seq':>5s} {'mode':9s} {'prec':5s} {'measured':>9s} {'predicted':>9s}"
          f" {'error':>7s} {'loo':>7s}  peak in")  # fmt: skip
    per_row = []
    for i, r in enumerate(rows):
        est = peaks[i][1]
        print(f"{r['model']:20s} {r['batch_size']:5d} {r['seq_len'] or '':>5} {r['mode']:9s} {r['precision']:5s}"
              f" {r['peak_mem_gib']:9.3f} {preds[i]:9.3f} {100 * errors[i]:+6.1f}% {100 * loo_errors[i]:+6.1f}%"
              f"  {est['phase']} {est['peak_op']}")  # fmt: skip
        per_row.append({k: r[k] for k in ("kind", "model", "batch_size", "seq_len", "mode", "precision", "optimizer")}
                       | {"measured_gib": round(r["peak_mem_gib"], 4), "predicted_gib": round(preds[i], 4),
                          "error_pct": round(100 * errors[i], 2), "loo_error_pct": round(100 * loo_errors[i], 2),
                          "breakdown_gib": {k: round(v / GIB, 4) for k, v in est.items() if k.endswith("_bytes")},
                          "phase": est["phase"], "peak_op": est["peak_op"]})  # fmt: skip
    summary = {
        "rows": len(rows),
        "source": str(source.relative_to(runtime_dir().parent)) if source.is_relative_to(runtime_dir().parent)
        else str(source),
        "mean_abs_error_pct": mae(errors),
        "median_abs_error_pct": round(100 * statistics.median(abs(e) for e in errors), 2),
        "max_abs_error_pct": round(100 * max(abs(e) for e in errors), 2),
        "within_10pct": sum(abs(e) <= 0.10 for e in errors),
        "by_group_mean_abs_error_pct": {g: mae(errors, idx) for g, idx in groups.items() if idx},
        "leave_one_model_out_mean_abs_error_pct": mae(loo_errors),
        "leave_one_model_out_slack": loo_slack,
        "without_fitted_constant_mean_abs_error_pct": mae(no_slack),
        "constants": {"slack": settings.slack, "slack_fitted_on_all_rows": fitted,
                      "fixed_bytes": settings.fixed_bytes},  # fmt: skip
        "per_row": per_row,
    }  # fmt: skip
    print(f"\nmean |error| {summary['mean_abs_error_pct']} % (median {summary['median_abs_error_pct']} %, max "
          f"{summary['max_abs_error_pct']} %, {summary['within_10pct']}/{len(rows)} within 10 %); by group "
          f"{summary['by_group_mean_abs_error_pct']}\nleave-one-model-out (slack re-fitted without the model): "
          f"{summary['leave_one_model_out_mean_abs_error_pct']} %; with no fitted constant (slack 0): "
          f"{summary['without_fitted_constant_mean_abs_error_pct']} %; slack {settings.slack} (fit on all rows: "
          f"{fitted})")  # fmt: skip
    args.out_dir.mkdir(parents=True, exist_ok=True)
    (args.out_dir / "memory_eval.json").write_text(_compact_json(summary))
    plot(args.out_dir / "predicted_vs_measured.png", rows, preds)
    print(f"wrote {args.out_dir / 'memory_eval.json'} and predicted_vs_measured.png")
    if args.write_test_data is not None:
        write_test_data(args.write_test_data, rows)
        print(f"wrote test fixtures to {args.write_test_data}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
