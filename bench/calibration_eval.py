"""A new GPU type calibrated from its collected rows, measured on a real H100 and a real H200 (issue #15, part 4).

The situation `offpeak collect` is for: a cluster adds a GPU type the model never saw. A folder of measurements on
one GPU holds its real steps (`*_models.jsonl`, as `measure_models.py` writes them: 21 models, fp32 and AMP, train
and inference) and what our collector wrote on the same GPU (`*_collect.sqlite` + `collected_graphs/`). A model
that never saw that GPU predicts the steps twice, once as it is and once calibrated the way `predictor serve --db` /
`offpeak predict --db` calibrate it, from the collected rows. Prints the factor and the error before and after,
overall and per (mode, precision).

- The H100 (default folder `<data root>/runtime/offpeak-h100`, needs the full data): a model trained without any
  H100 row (`offpeak train-predictor --public-only`, trained now unless `--model` names one) and the 172 rows of an
  older collect plan (small sample CNNs, a few torchvision models).
- The H200 (`--folder reports/device/h200-2026-11-28 --model default`, runs from the repository alone): the shipped
  model, which has no row of ours on an H200, and the 74 rows of `offpeak collect --plan new-gpu` on that H200.

About a minute with the graphs cached (the first run extracts them); the H100 case adds two or three minutes to
train the public-only model unless `--model` names one.

    .venv/bin/python bench/calibration_eval.py [--folder DIR] [--model default|public_only_model.json.gz] [--json]
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

import pandas as pd

from offpeak_core.datapaths import describe, runtime_dir
from offpeak_predictor.calibration import calibrate
from offpeak_predictor.collected import collected_log_ratios
from offpeak_predictor.db import BenchmarkDB
from offpeak_predictor.graphcache import get_graph
from offpeak_predictor.loaders import graph_args_of, load_measured_steps
from offpeak_predictor.model import RuntimeModel
from offpeak_predictor.predict import PredictOptions, Predictor


def _errors(pairs: list[tuple[float, float]]) -> dict[str, float]:
    """MAPE, median APE and share within 20 % of (predicted, measured) pairs."""
    ape = [abs(p - m) / m * 100 for p, m in pairs]
    return {"n": len(ape), "mape": statistics.fmean(ape), "median_ape": statistics.median(ape),
            "within_20pct": sum(a <= 20 for a in ape) / len(ape)}  # fmt: skip


def _one(folder: Path, pattern: str) -> Path:
    found = sorted(folder.glob(pattern))
    if len(found) != 1:
        raise SystemExit(f"{folder} needs exactly one {pattern} (found {len(found)})")
    return found[0]


def _collected_rows(folder: Path) -> pd.DataFrame:
    """The collector's rows, their graph paths made absolute (the DB stores them relative to its folder)."""
    rows = BenchmarkDB(_one(folder, "*_collect.sqlite")).read("model_samples")
    return rows.assign(graph_ref=[str(folder / ref) for ref in rows["graph_ref"]])


def evaluate(model_path: Path | None, folder: Path) -> dict[str, Any]:
    """`model_path` None = the model shipped in the package."""
    model = RuntimeModel.load(model_path)
    plain = Predictor(model)
    calibration = calibrate(collected_log_ratios(predictor=plain, rows=_collected_rows(folder)))
    calibrated = Predictor(model, calibration=calibration)
    steps = load_measured_steps(_one(folder, "*_models.jsonl"), source=folder.name)
    rows: list[dict[str, Any]] = []
    for _, row in steps.iterrows():
        graph = get_graph(graph_args_of(row))
        options = PredictOptions(mode=str(row["mode"]), precision=str(row["precision"]),
                                 optimizer=str(row["optimizer"]), num_gpus=1)  # fmt: skip
        gpu = str(row["gpu"])
        before = plain.predict(graph, [gpu], options, corrected=False)[0]
        after = calibrated.predict(graph, [gpu], options)[0]
        rows.append({"model": row["model_name"], "mode": row["mode"], "precision": row["precision"],
                     "measured": float(row["time_s"]), "before": float(before["step_seconds"]),
                     "after": float(after["step_seconds"]), "before_p90": float(before["step_seconds_p90"]),
                     "after_p90": float(after["step_seconds_p90"])})  # fmt: skip
    frame = pd.DataFrame(rows)
    out: dict[str, Any] = {
        "model": str(model_path or "shipped default"), "folder": str(folder), "data": describe(),
        "calibration": {g: {"factor": c.factor, "rows": c.rows, "median_ratio": math.exp(c.median_log_ratio),
                            "held_out_gain": c.held_out_gain}
                        for g, c in calibration.items()},
        "overall": {k: _errors(list(zip(frame[k], frame["measured"]))) for k in ("before", "after")},
        "by_mode_precision": {},
        "p90_coverage": {k: float((frame["measured"] <= frame[f"{k}_p90"]).mean()) for k in ("before", "after")},
    }  # fmt: skip
    for (mode, precision), part in frame.groupby(["mode", "precision"]):
        out["by_mode_precision"][f"{mode}/{precision}"] = {
            k: _errors(list(zip(part[k], part["measured"]))) for k in ("before", "after")}
    return out


def _public_only_model(root: Path, folder: Path) -> Path:
    from offpeak_predictor.pipeline import train_from_data

    out = folder / "public_only.json.gz"
    print("training a model without any H100 row (train-predictor --public-only) ...", file=sys.stderr)
    train_from_data(root=root, out=out, modern=False)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--folder", type=Path, default=None,
                    help="one GPU's measurements (default: <data root>/runtime/offpeak-h100)")
    ap.add_argument("--model", default=None,
                    help="a model that never saw the folder's GPU; 'default' = the shipped model "
                    "(default: train one without H100 rows now)")
    ap.add_argument("--json", action="store_true", help="print the result as one JSON object")
    args = ap.parse_args(argv)
    root = runtime_dir()
    folder = args.folder or root / "offpeak-h100"
    if not folder.is_dir():
        print(f"no measurements at {folder} (data root in use: {describe()})", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        model: Path | None = None  # the shipped model
        if args.model != "default":
            model = Path(args.model) if args.model else _public_only_model(root, Path(tmp))
        result = evaluate(model, folder)
    if args.json:
        print(json.dumps(result, indent=1))
        return 0
    for gpu, c in result["calibration"].items():
        gain = "n/a" if c["held_out_gain"] is None else f"{c['held_out_gain']:+.3f}"
        print(f"calibration {gpu}: {c['rows']} collected rows, median measured/predicted x{c['median_ratio']:.3f}, "
              f"held-out gain {gain} (<= 0: the rows disagree, not used), factor x{c['factor']:.3f}")
    cover = result["p90_coverage"]
    print(f"measured step <= predicted p90: {cover['before']:.0%} -> {cover['after']:.0%}")
    print(f"{'slice':18s} {'n':>3s}  {'MAPE before -> after':>22s}  {'median APE':>16s}  {'within 20 %':>14s}")
    for label, m in [("all", result["overall"]), *result["by_mode_precision"].items()]:
        b, a = m["before"], m["after"]
        print(f"{label:18s} {b['n']:3d}  {b['mape']:9.1f} -> {a['mape']:5.1f} %  {b['median_ape']:6.1f} -> "
              f"{a['median_ape']:5.1f} %  {b['within_20pct']:5.0%} -> {a['within_20pct']:4.0%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
