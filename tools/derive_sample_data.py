"""Derive the small data sample shipped in ``core/offpeak_core/sample_data`` from the full public data.

The sample mirrors the full layout (same folders, file names and columns) with slices of the files, so every
loader reads it unchanged: a fresh clone runs the tests, the demo and a quick predictor training without the
full data. Each slice rule is deterministic and written into the sample's README and MANIFEST.json, so
``python tools/derive_sample_data.py --check`` (run by the tests whenever the full data is present) proves the
committed sample is exactly what these rules give.

Run: ``python tools/derive_sample_data.py [--data ../shared/data] [--out core/offpeak_core/sample_data] [--check]``
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

REPO = Path(__file__).resolve().parents[1]
DEFAULT_OUT = REPO / "core" / "offpeak_core" / "sample_data"

# The first pods by id (hashed, so a random sample). The e2e cluster and the demo give node i pods 8i..8i+7 in id
# order, so with 32 pods their 4 nodes replay exactly the demand they replay from the full trace.
ALIBABA_PODS = 32
TRACE_DAYS = 7  # Helios and Philly: the first week, minute by minute
ITP_CLUSTERS = ("01", "03", "06", "10")  # the four smallest ITP clusters (raw/ layout)
OP_ROWS = 300  # NeuSight / Justus op files: the first rows of each file
EVERY_NTH = 4  # DeepBench kernels, Lambda TF runs: every n-th row


@dataclass(frozen=True)
class Slice:
    """One sample file: where it comes from and the rule that cuts it."""

    path: str  # relative to the data root, the same in the sample
    rule: str  # one line, for the README
    cut: Callable[[Path], bytes]


def _csv(df: pd.DataFrame, *, gz: bool = False) -> bytes:
    text = df.to_csv(index=False, lineterminator="\n").encode()
    if not gz:
        return text
    import gzip

    return gzip.compress(text, mtime=0)


def _copy(src: Path) -> bytes:
    return src.read_bytes()


def _head(rows: int) -> Callable[[Path], bytes]:
    return lambda src: _csv(pd.read_csv(src, nrows=rows), gz=src.name.endswith(".gz"))


def _every_nth(n: int) -> Callable[[Path], bytes]:
    return lambda src: _csv(pd.read_csv(src, low_memory=False).iloc[::n])


def _first_days(days: int) -> Callable[[Path], bytes]:
    def cut(src: Path) -> bytes:
        df = pd.read_csv(src)
        t = pd.to_datetime(df["time"])
        return _csv(df[t < t.iloc[0] + pd.Timedelta(days=days)])

    return cut


def _alibaba_pods(src: Path) -> bytes:
    df = pd.read_csv(src)
    keep = sorted(df["container_ip"].astype(str).unique())[:ALIBABA_PODS]
    return _csv(df[df["container_ip"].astype(str).isin(set(keep))])


def _ryujaehun_single_gpu(src: Path) -> bytes:
    df = pd.read_csv(src)
    return _csv(df[df["num_gpus"] == 1])


def slices(data: Path) -> list[Slice]:
    """Every file of the sample, in a fixed order."""
    rt, tr = data / "runtime", data / "traces"
    out: list[Slice] = []
    for folder in ("op_train_nvidia", "op_test_nvidia", "op_amd"):
        for f in sorted((rt / "neusight" / folder).glob("*.csv.gz")):
            out.append(Slice(f"runtime/neusight/{folder}/{f.name}", f"first {OP_ROWS} rows", _head(OP_ROWS)))
    out.append(Slice("runtime/neusight/model_level/model_latency_labels.csv", "whole file", _copy))
    for f in sorted((rt / "neusight" / "model_configs").glob("*.json")):
        out.append(Slice(f"runtime/neusight/model_configs/{f.name}", "whole file", _copy))
    for name in ("convolution_layer_benchmarks.csv.gz", "dense_layer_benchmarks.csv.gz"):
        out.append(Slice(f"runtime/justus2018/{name}", f"first {OP_ROWS * 10} rows", _head(OP_ROWS * 10)))
    for f in sorted((rt / "justus2018" / "vgg16_v100").glob("*.csv")):
        out.append(Slice(f"runtime/justus2018/vgg16_v100/{f.name}", "whole file", _copy))
    for name in ("gemm.csv", "conv.csv"):
        out.append(Slice(f"runtime/deepbench/{name}", f"every {EVERY_NTH}th row", _every_nth(EVERY_NTH)))
    out.append(Slice("runtime/ryujaehun_pytorch_gpu_benchmark/summary_by_config.csv", "rows with num_gpus == 1",
                     _ryujaehun_single_gpu))
    out.append(Slice("runtime/lambda_tf_cnn_benchmarks/tf_cnn_benchmarks_runs.csv", f"every {EVERY_NTH}th row",
                     _every_nth(EVERY_NTH)))
    for f in sorted((rt / "lambda_pytorch_benchmark").rglob("*.csv")):
        out.append(Slice(str(f.relative_to(data)), "whole file", _copy))
    out.append(Slice("runtime/jcjohnson_cnn_benchmarks/torch7_cnn_fwd_bwd_times.csv", "whole file", _copy))
    out.append(Slice("traces/alibaba-genai-serving-v2026/pod_gpu_duty_cycle_anon.csv",
                     f"the first {ALIBABA_PODS} pods by (hashed, so random) id, every sample: the e2e cluster's and "
                     "the demo's 4 nodes replay exactly the full trace's demand", _alibaba_pods))
    for name in ("earth_vc_running_gpu_num.csv", "earth_vc_total_gpu_num.csv"):
        out.append(Slice(f"traces/helios-earth-vc-2020-05/{name}", f"first {TRACE_DAYS} days, every VC",
                         _first_days(TRACE_DAYS)))
    out.append(Slice("traces/philly-node-sequence/philly_node_sequence.csv", f"first {TRACE_DAYS} days",
                     _first_days(TRACE_DAYS)))
    for c in ITP_CLUSTERS:
        out.append(Slice(f"traces/ms-itp-elasticflow/raw/cluster{c}.csv", "whole file", _copy))
    return out


def derive(data: Path) -> dict[str, bytes]:
    """Every sample file's bytes by relative path, plus the READMEs."""
    files: dict[str, bytes] = {}
    rules: dict[str, list[tuple[str, str]]] = {}
    for s in slices(data):
        files[s.path] = s.cut(data / s.path)
        top = "/".join(s.path.split("/")[:2])
        rules.setdefault(top, []).append((s.path.removeprefix(top + "/"), s.rule))
    for top, items in rules.items():
        source_readme = data / top / "README.md"
        head = source_readme.read_text() if source_readme.is_file() else f"# {top}\n"
        lines = ["", "---", "", "## This sample (offpeak)", "",
                 "Derived by `tools/derive_sample_data.py` from the full folder of the same name; the text above is",
                 "the full data set's own README (source, licence, columns). Files and how each was cut:", ""]
        lines += [f"- `{p}`: {rule}" for p, rule in items]
        files[f"{top}/README.md"] = (head.rstrip() + "\n" + "\n".join(lines) + "\n").encode()
    return files


def manifest(files: dict[str, bytes]) -> bytes:
    entries = {p: {"bytes": len(b), "sha256": hashlib.sha256(b).hexdigest()} for p, b in sorted(files.items())}
    return (json.dumps(entries, indent=1, sort_keys=True) + "\n").encode()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=REPO.parent / "shared" / "data", help="the full data root")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--check", action="store_true", help="compare with the committed sample instead of writing")
    args = ap.parse_args(argv)
    if not (args.data / "runtime").is_dir():
        print(f"error: no full data at {args.data} (pass --data)", file=sys.stderr)
        return 2
    files = derive(args.data)
    files["MANIFEST.json"] = manifest(files)
    if args.check:
        bad = [p for p, b in files.items() if not (args.out / p).is_file() or (args.out / p).read_bytes() != b]
        extra = {str(p.relative_to(args.out)) for p in args.out.rglob("*") if p.is_file()} - set(files) - {"README.md"}
        for p in bad:
            print(f"differs: {p}")
        for p in sorted(extra):
            print(f"not derived: {p}")
        return 1 if bad or extra else 0
    readme = args.out / "README.md"
    keep = readme.read_bytes() if readme.is_file() else None
    shutil.rmtree(args.out, ignore_errors=True)
    for p, b in files.items():
        (args.out / p).parent.mkdir(parents=True, exist_ok=True)
        (args.out / p).write_bytes(b)
    if keep is not None:
        readme.write_bytes(keep)
    total = sum(len(b) for b in files.values())
    print(f"wrote {len(files)} files, {total / 1e6:.2f} MB, to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
