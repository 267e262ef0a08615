"""`offpeak predict`, `predictor serve|build-db`, `train-predictor`, `eval-predictor`, `collect`.

Only argument parsing and wiring here; heavy modules (torch, lightgbm, pandas) are imported inside handlers.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from offpeak.cliargs import env
from offpeak.errors import Unreachable, UserError
from offpeak_graph.schema import PRECISIONS, PRECISION_HELP
from offpeak_predictor import cli_refit
from offpeak_predictor.cli_common import check_token_file, load_model
from offpeak_predictor.interconnect import DEFAULT_NETWORK_GBITS


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    _register_predict(subparsers)
    _register_predictor(subparsers)
    _register_train(subparsers)
    _register_eval(subparsers)
    _register_collect(subparsers)


# ----------------------------------------------------------------------------------------------- predict


def _register_predict(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = subparsers.add_parser("predict", help="predict training step / job time of a model on a GPU type")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--graph", help="model graph JSON (from `offpeak extract`; .gz allowed)")
    src.add_argument("--torchvision", metavar="NAME", help="torchvision model name, e.g. resnet50")
    src.add_argument("--hf-config", metavar="F", help="HuggingFace config.json path or name (gpt2-large)")
    src.add_argument("--entrypoint", metavar="E", help="module:function returning an nn.Module")
    p.add_argument("--batch-size", type=int, help="per-GPU batch size (required unless --graph)")
    p.add_argument("--seq-len", type=int)
    p.add_argument("--input-shape", help="per-sample input shape, e.g. 3,224,224")
    p.add_argument("--gpu", required=True, action="append",
                   help="GPU type (canonical name or alias, e.g. A100, H100-SXM5-80GB); repeat it to compare types: "
                        "one line each (with --json, one JSON object per line)")
    p.add_argument("--mode", choices=["train", "inference"], default=None)
    p.add_argument("--precision", choices=PRECISIONS, default=None,
                   help=f"how the step runs (default: the graph's): {PRECISION_HELP}")
    p.add_argument("--optimizer", choices=["sgd", "adam", "adamw", "none"], default=None,
                   help="none = forward+backward only")
    p.add_argument("--num-gpus", type=int, default=1, help="data-parallel GPUs (batch size is per GPU)")
    p.add_argument("--gpus-per-node", type=int, default=None,
                   help="GPUs of the job in one node (divides --num-gpus; default: all in one node); the gradients' "
                        "all-reduce across the other nodes is added, over --network-gbits")
    p.add_argument("--network-gbits", type=float, default=DEFAULT_NETWORK_GBITS,
                   help="network per node between the nodes of a multi-node job, Gbit/s (default %(default)s)")
    p.add_argument("--steps", type=int, help="steps of the job: adds job_seconds and job_seconds_p90")
    p.add_argument("--epochs", type=float, help="with --dataset-size: derive --steps")
    p.add_argument("--dataset-size", type=int, help="training samples per epoch (with --epochs)")
    p.add_argument("--startup-seconds", type=float, default=None, help="job start-up overhead (default 60)")
    p.add_argument("--model", default=env("OFFPEAK_PREDICTOR_MODEL"),
                   help="model file (default: the one shipped in the package; env OFFPEAK_PREDICTOR_MODEL)")
    p.add_argument("--db", default=None,
                   help="benchmark DB whose rows from `offpeak collect` calibrate their GPU types (docs/collect.md)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=_cmd_predict)


def _graph_from_args(args: argparse.Namespace) -> Any:
    from offpeak_graph.schema import load_graph, validate_graph

    if args.graph:
        try:
            return validate_graph(load_graph(args.graph))
        except FileNotFoundError as e:
            raise UserError(f"graph file not found: {args.graph}") from e
        except (ValueError, KeyError, TypeError, OverflowError) as e:
            raise UserError(f"bad model graph {args.graph}: {e}") from e
    if not args.batch_size or args.batch_size < 1:
        raise UserError("--batch-size (a positive integer) is required with --torchvision/--hf-config/--entrypoint")
    from offpeak_predictor.graphcache import get_graph

    extract_args: dict[str, Any] = {
        "batch_size": args.batch_size, "precision": args.precision or "fp32", "mode": args.mode or "train",
        "optimizer": args.optimizer or "adam",
    }  # fmt: skip
    if args.torchvision:
        extract_args["torchvision"] = args.torchvision
    elif args.hf_config:
        extract_args["hf_config"] = args.hf_config
    else:
        extract_args["entrypoint"] = args.entrypoint
    if args.seq_len:
        extract_args["seq_len"] = args.seq_len
    if args.input_shape:
        try:
            extract_args["input_shape"] = [int(x) for x in args.input_shape.replace("x", ",").split(",")]
        except ValueError as e:
            raise UserError(f"--input-shape must look like 3,224,224 (got {args.input_shape!r})") from e
    try:
        return get_graph(extract_args)
    except UserError:
        raise
    except (ValueError, KeyError, AttributeError, ImportError, OSError) as e:
        raise UserError(f"cannot build the model graph: {e}") from e


def _source(args: argparse.Namespace) -> str:
    """What the graph is built from, for the progress line."""
    return str(args.torchvision or args.hf_config or args.entrypoint)


def _cmd_predict(args: argparse.Namespace) -> int:
    from offpeak.terminal import steps
    from offpeak_predictor.gpus import resolve_gpu
    from offpeak_predictor.jobtime import DEFAULT_STARTUP_SECONDS, steps_for_epochs

    for gpu in args.gpu:
        resolve_gpu(gpu)  # fail fast, before a slow graph extraction
    if (args.epochs is None) != (args.dataset_size is None):
        raise UserError("--epochs and --dataset-size go together")
    first = (f"reading the model graph {args.graph}" if args.graph else
             f"building the model graph of {_source(args)} (importing torch and tracing: 10-20 s unless cached)")
    with steps(first) as step:
        graph = _graph_from_args(args)
        num_steps = args.steps
        if args.epochs is not None:
            try:
                num_steps = steps_for_epochs(epochs=args.epochs, dataset_size=args.dataset_size,
                                             batch_size=graph.batch_size, num_gpus=args.num_gpus)  # fmt: skip
            except ValueError as e:
                raise UserError(str(e)) from e
        step("loading the runtime model")
        from offpeak_predictor.predict import PredictOptions, Predictor

        predictor = Predictor(load_model(args.model), network_gbits=args.network_gbits)
        if args.db:
            from offpeak_predictor.collected import load_calibration
            from offpeak_predictor.db import BenchmarkDB

            if not Path(args.db).is_file():
                raise UserError(f"benchmark DB not found: {args.db}")
            step(f"calibrating from the collected rows in {args.db}")
            predictor.calibration = load_calibration(predictor=predictor, db=BenchmarkDB(args.db))
        startup = DEFAULT_STARTUP_SECONDS if args.startup_seconds is None else args.startup_seconds
        options = PredictOptions(
            mode=args.mode, precision=args.precision, optimizer=args.optimizer, num_gpus=args.num_gpus,
            steps=num_steps, gpus_per_node=args.gpus_per_node, startup_seconds=startup,
        )  # fmt: skip
        step("predicting")
        results = predictor.predict(graph, list(dict.fromkeys(args.gpu)), options)
    for result in results:
        result.update(model=graph.model_name, batch_size=graph.batch_size, seq_len=graph.seq_len,
                      graph_hash=graph.content_hash(), flops_forward=graph.total_flops_forward,
                      params=graph.total_params)  # fmt: skip
        if "job_seconds" in result:
            result["startup_seconds"] = startup
        print(json.dumps(result) if args.json else _predict_line(result))
    return 0


def _predict_line(result: dict[str, Any]) -> str:
    """One answer in words, with what it assumed: the GPU type an alias stands for, the mode, precision,
    optimizer, sequence length and start-up."""
    asked = result.get("gpu", result["gpu_type"])
    gpu = result["gpu_type"] if asked == result["gpu_type"] else f"{asked} = {result['gpu_type']}"
    how = [result["mode"], result["precision"]]
    if result["mode"] == "train":
        how.append("no optimizer" if result["optimizer"] == "none" else f"{result['optimizer']} optimizer")
    seq = f" seq_len={result['seq_len']}" if result.get("seq_len") else ""
    line = (f"{result['model']} bs={result['batch_size']}{seq} on {gpu} ({', '.join(how)}): "
            f"step {result['step_seconds'] * 1e3:.1f} ms (p90 {result['step_seconds_p90'] * 1e3:.1f} ms)")
    if "job_seconds" in result:
        line += (f"; job of {result['steps']} steps {result['job_seconds']:.0f} s (p90 {result['job_seconds_p90']:.0f}"
                 f" s, with {result['startup_seconds']:g} s start-up)")
    if "peak_memory_gib" in result:
        verdict = "fits" if result["fits_memory"] else "does NOT fit"
        line += (f"; needs ~{result['peak_memory_gib']:.1f} GiB of GPU memory: {verdict} "
                 f"{result['gpu_type']} ({result['gpu_memory_gib']:.0f} GiB)")
    return line


# --------------------------------------------------------------------------------------- predictor ...


def _register_predictor(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = subparsers.add_parser("predictor", help="runtime predictor service and database")
    sub = p.add_subparsers(dest="predictor_command", metavar="SUBCOMMAND")
    s = sub.add_parser("serve", help="HTTP JSON API (/v1/predict, /v1/samples, /healthz, /metrics, ...)")
    s.add_argument("--port", type=int, default=env("OFFPEAK_PREDICTOR_PORT", 8080))
    s.add_argument("--host", default=env("OFFPEAK_PREDICTOR_HOST", "0.0.0.0"))  # noqa: S104
    s.add_argument("--metrics-port", type=int,
                   default=env("OFFPEAK_PREDICTOR_METRICS_PORT"),
                   help="serve /metrics (with /healthz and /readyz, nothing else) on this port instead of --port, so "
                        "scrapers need no access to the API (env OFFPEAK_PREDICTOR_METRICS_PORT; default: /metrics "
                        "on --port)")
    s.add_argument("--metrics-host", default=env("OFFPEAK_PREDICTOR_METRICS_HOST", "0.0.0.0"),  # noqa: S104
                   help="address of --metrics-port (default 0.0.0.0: kubelet probes and Prometheus)")
    s.add_argument("--db", default=env("OFFPEAK_PREDICTOR_DB"), help="SQLite file for /v1/samples")
    s.add_argument("--model", default=env("OFFPEAK_PREDICTOR_MODEL"))
    s.add_argument("--max-body-bytes", type=int, default=8 * 1024 * 1024)
    s.add_argument("--cache-mib", type=float, default=256.0,
                   help="memory for cached graph summaries, hashes, memory estimates and per-op prices: LRUs "
                        "bounded by approximate MiB in all, filled by every distinct graph seen (default 256)")
    s.add_argument("--model-store", default=env("OFFPEAK_MODEL_STORE"),
                   help="directory of re-fitted model versions: serves its current one, enables POST "
                        "/v1/model/refit and /v1/model/rollback (env OFFPEAK_MODEL_STORE)")
    s.add_argument("--model-keep", type=int, default=5, help="model versions the store keeps (default 5)")
    s.add_argument("--refit-min-samples", type=int, default=30,
                   help="usable accepted samples a re-fit needs (default 30)")
    s.add_argument("--token-file", default=env("OFFPEAK_PREDICTOR_TOKEN_FILE"),
                   help="shared secret POST /v1/samples must present as a bearer token; without it no sample is "
                        "accepted (env OFFPEAK_PREDICTOR_TOKEN_FILE)")
    s.add_argument("--network-gbits", type=float,
                   default=env("OFFPEAK_NETWORK_GBITS", DEFAULT_NETWORK_GBITS),
                   help="network per node between the nodes of a multi-node job, Gbit/s: the all-reduce a "
                        "multi-node prediction adds (env OFFPEAK_NETWORK_GBITS, default %(default)s)")
    s.add_argument("--max-samples", type=int, default=env("OFFPEAK_PREDICTOR_MAX_SAMPLES", 10000),
                   help="job samples kept in the DB; the oldest are dropped and unlearned (default 10000)")
    s.add_argument("--max-sample-mib", type=float,
                   default=env("OFFPEAK_PREDICTOR_MAX_SAMPLE_MIB", 512.0),
                   help="what the job samples may store in all, in MiB: every stored byte of each row (its model "
                        "graph, names and figures) counts; beyond it the oldest samples are dropped and unlearned, "
                        "and a sample whose row alone is larger is refused with 413 (default 512)")
    s.add_argument("--prior-strength", type=float, default=0.5,
                   help="samples that weigh as much as the model's prediction in the online correction; one "
                        "sample's weight is 1 / (1 + k) (default 0.5)")
    s.set_defaults(func=_cmd_serve)
    b = sub.add_parser("build-db", help="load every dataset under shared/data/runtime into the benchmark DB")
    b.add_argument("--db", default=None, help="SQLite path (default ~/.cache/offpeak/benchmarks.sqlite)")
    b.add_argument("--data", default=None, help="runtime data folder (default <repo>/../shared/data/runtime)")
    b.set_defaults(func=_cmd_build_db)
    cli_refit.register(sub)
    p.set_defaults(func=lambda a: (p.print_help(), 2)[1])


def _cmd_serve(args: argparse.Namespace) -> int:
    from offpeak_predictor.correction import CorrectionSettings
    from offpeak_predictor.db import BenchmarkDB, default_db_path
    from offpeak_predictor.refit import RefitSettings
    from offpeak_predictor.samples import FeedbackSettings
    from offpeak_predictor.server import ServerSettings, run_server

    if args.max_samples < 1:
        raise UserError("--max-samples must be at least 1")
    if not args.max_sample_mib > 0:
        raise UserError("--max-sample-mib must be positive")
    if args.prior_strength <= 0:
        raise UserError("--prior-strength must be positive")
    if args.network_gbits <= 0:
        raise UserError("--network-gbits must be positive")
    if args.cache_mib <= 0:
        raise UserError("--cache-mib must be positive")
    if args.model_keep < 2 or args.refit_min_samples < 1:
        raise UserError("--model-keep must be >= 2 and --refit-min-samples >= 1")
    if args.metrics_port is not None and (not 0 < args.metrics_port < 65536 or args.metrics_port == args.port):
        raise UserError("--metrics-port must be in 1..65535 and differ from --port")
    settings = ServerSettings(host=args.host, port=args.port, max_body_bytes=args.max_body_bytes,
                              token_file=args.token_file or None, network_gbits=args.network_gbits,
                              metrics_host=args.metrics_host, metrics_port=args.metrics_port,
                              cache_bytes=int(args.cache_mib * 2**20), model_store=args.model_store or None,
                              model_keep=args.model_keep,
                              refit=RefitSettings(min_samples=args.refit_min_samples))  # fmt: skip
    feedback = FeedbackSettings(correction=CorrectionSettings(prior_strength=args.prior_strength),
                                max_samples=args.max_samples,
                                max_graph_bytes=int(args.max_sample_mib * 2**20))  # fmt: skip
    db = BenchmarkDB(args.db or default_db_path())
    run_server(model=load_model(args.model), db=db, settings=settings, feedback=feedback)
    return 0


def _cmd_build_db(args: argparse.Namespace) -> int:
    from offpeak_predictor.db import BenchmarkDB, build_db, default_db_path
    from offpeak_predictor.loaders import runtime_dir

    root = Path(args.data) if args.data else runtime_dir()
    if not root.is_dir():
        raise UserError(f"runtime data folder not found: {root} (set OFFPEAK_SHARED_DATA or --data)")
    db = BenchmarkDB(args.db or default_db_path())
    counts = build_db(db, root)
    print(json.dumps({"db": str(db.path), "rows": counts}))
    return 0


# ------------------------------------------------------------------------------------- train / eval


def _register_train(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = subparsers.add_parser("train-predictor", help="rebuild the runtime model from the benchmark data")
    p.add_argument("--out", default=None, help="model file (default: the package's default model)")
    p.add_argument("--data", default=None, help="runtime data folder (default <repo>/../shared/data/runtime)")
    p.add_argument("--db", default=None, help="also use rows collected into this benchmark DB")
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--quick", action="store_true", help="small subsample (smoke test, ~1 min)")
    p.add_argument("--public-only", action="store_true",
                   help="leave out our own steps and single ops (H100, H200), which the shipped model "
                        "trains on; the evaluation asks for the steps as held-out slices")
    p.set_defaults(func=_cmd_train)


def _register_eval(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = subparsers.add_parser("eval-predictor", help="grouped cross-validation against baselines; JSON + PNG")
    p.add_argument("--out-dir", default="reports/predictor")
    p.add_argument("--data", default=None)
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--quick", action="store_true", help="fewer folds and rows (smoke test)")
    p.set_defaults(func=_cmd_eval)


def _cmd_train(args: argparse.Namespace) -> int:
    from offpeak_predictor.pipeline import train_from_data

    root = _data_root(args.data)
    out = Path(args.out) if args.out else _default_model_path()
    model = train_from_data(root=root, out=out, seed=args.seed, quick=args.quick, db_path=args.db,
                            modern=not args.public_only)
    print(json.dumps({"model": str(out), "version": model.version, "bytes": out.stat().st_size,
                      "p90_log_margin": model.p90_log_margin,
                      "model_rows": model.training_summary.get("model_rows")}))  # fmt: skip
    return 0


def _cmd_eval(args: argparse.Namespace) -> int:
    from offpeak_predictor.evaluate import run_evaluation

    report = run_evaluation(root=_data_root(args.data), out_dir=Path(args.out_dir), seed=args.seed, quick=args.quick)
    print(json.dumps(report["headline"], indent=1))
    return 0


def _data_root(data: str | None) -> Path:
    from offpeak_predictor.loaders import runtime_dir

    root = Path(data) if data else runtime_dir()
    if not root.is_dir():
        raise UserError(f"runtime data folder not found: {root} (set OFFPEAK_SHARED_DATA or --data)")
    return root


def _default_model_path() -> Path:
    from offpeak_predictor.model import DEFAULT_MODEL_FILE

    return Path(__file__).resolve().parent / DEFAULT_MODEL_FILE


# --------------------------------------------------------------------------------------------- collect


def _register_collect(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = subparsers.add_parser("collect", help="time sample workloads on the local device into the benchmark DB")
    p.add_argument("--plan", choices=["custom", "new-gpu"], default="custom",
                   help="custom: the sample CNNs / torchvision models the flags below describe; new-gpu: what the "
                        "predictor needs to learn an unseen GPU (GEMM/conv/attention sweeps, a small CNN and "
                        "transformer, fp32 and AMP; docs/collect.md), the flags below ignored but --db/--device/"
                        "--gpu-type")
    p.add_argument("--size", choices=["auto", "quick", "full"], default="auto",
                   help="new-gpu sizes: full on CUDA, quick (small sizes, few reps) on CPU; auto picks by device")
    p.add_argument("--db", default=None, help="SQLite path (default ~/.cache/offpeak/benchmarks.sqlite)")
    p.add_argument("--predictor-url", default=None,
                   help="new-gpu: also POST the rows to this predictor (/v1/collected), which calibrates the GPU type")
    p.add_argument("--token-file", default=env("OFFPEAK_PREDICTOR_TOKEN_FILE"),
                   help="the predictor's shared secret, sent as a bearer token (env OFFPEAK_PREDICTOR_TOKEN_FILE)")
    p.add_argument("--post-attempts", type=int, default=6,
                   help="new-gpu: tries of the POST while the predictor is unreachable or answers 5xx, waiting 2 s "
                        "doubling to 30 s (~1.5 min in all); a refusal (4xx) is not retried")
    p.add_argument("--device", default="auto", help="auto | cpu | cuda | cuda:N")
    p.add_argument("--steps", type=int, default=10, help="timed steps N (step 1 is warm-up; mean of 2..N+1)")
    p.add_argument("--torchvision", action="append", default=[], metavar="NAME", help="real model (repeatable)")
    p.add_argument("--conv-layers", default="2", help="comma list of conv layer counts for sample CNNs")
    p.add_argument("--filters", default="16", help="comma list of conv filter counts")
    p.add_argument("--dense-layers", default="1", help="comma list of dense layer counts")
    p.add_argument("--nodes", default="64", help="comma list of dense layer widths")
    p.add_argument("--batch-size", default="8", help="comma list of batch sizes")
    p.add_argument("--input-size", default="32", help="comma list of square input sizes")
    p.add_argument("--precision", choices=PRECISIONS, default="fp32", help=PRECISION_HELP)
    p.add_argument("--optimizer", choices=["sgd", "adam", "adamw", "none"], default="sgd")
    p.add_argument("--gpu-type", default=None, help="catalogue name to record (default: from the device name)")
    p.set_defaults(func=_cmd_collect)


def _ints(text: str, flag: str) -> list[int]:
    try:
        values = [int(x) for x in str(text).split(",") if x.strip()]
    except ValueError as e:
        raise UserError(f"{flag} must be a comma list of integers (got {text!r})") from e
    if not values or min(values) < 1:
        raise UserError(f"{flag} values must be positive integers")
    return values


def _cmd_collect(args: argparse.Namespace) -> int:
    from offpeak_predictor.collect import CollectPlan, run_collect
    from offpeak_predictor.db import BenchmarkDB, default_db_path

    if args.plan == "new-gpu":
        return _collect_new_gpu(args)
    if args.predictor_url:
        raise UserError("--predictor-url goes with --plan new-gpu")
    if args.steps < 1:
        raise UserError("--steps must be >= 1")
    plan = CollectPlan(
        conv_layers=_ints(args.conv_layers, "--conv-layers"), filters=_ints(args.filters, "--filters"),
        dense_layers=_ints(args.dense_layers, "--dense-layers"), nodes=_ints(args.nodes, "--nodes"),
        batch_sizes=_ints(args.batch_size, "--batch-size"), input_sizes=_ints(args.input_size, "--input-size"),
        torchvision=list(args.torchvision), steps=args.steps, precision=args.precision, optimizer=args.optimizer,
    )  # fmt: skip
    db = BenchmarkDB(args.db or default_db_path())
    written = run_collect(plan=plan, db=db, device=args.device, gpu_type=args.gpu_type)
    print(json.dumps({"db": str(db.path), "rows": written}), file=sys.stdout)
    return 0


def _collect_new_gpu(args: argparse.Namespace) -> int:
    """`collect --plan new-gpu`: build the plan for the device, time it under one progress bar, store the rows."""
    import time

    import pandas as pd
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from offpeak_predictor.collectplan import new_gpu_plan, plan_summary
    from offpeak_predictor.collectrun import make_target, run_plan
    from offpeak_predictor.db import BenchmarkDB, default_db_path
    from offpeak_predictor.graphcache import cache_dir

    started = time.perf_counter()
    if args.predictor_url and not args.token_file:
        raise UserError("--predictor-url needs --token-file (the predictor's shared secret)")
    check_token_file(args.token_file)
    if args.post_attempts < 1:
        raise UserError("--post-attempts must be >= 1")
    target, amp = make_target(device=args.device, gpu_type=args.gpu_type)
    quick = args.size == "quick" or (args.size == "auto" and target.device.type == "cpu")
    workloads = new_gpu_plan(amp=amp, quick=quick)
    err = Console(stderr=True)
    err.print(f"collect --plan new-gpu on {target.device} as {target.gpu_label}: {len(workloads)} workloads "
              f"{plan_summary(workloads)}, {'quick' if quick else 'full'} sizes, fp32 + {amp or 'no'} AMP")
    if target.device.type == "cpu":
        err.print("note: on CPU the AMP rows use bf16 autocast; CPU times exercise the plan but teach the predictor "
                  "nothing about a GPU (the CUDA run is the same code)")
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=err) as progress:  # fmt: skip
        bar = progress.add_task("collect", total=len(workloads))
        result = run_plan(workloads, target=target, graph_dir=cache_dir() / "collected",
                          on_start=lambda w: progress.update(bar, description=w.label),
                          on_done=lambda w: progress.advance(bar))  # fmt: skip
    db = BenchmarkDB(args.db or default_db_path())
    models = db.append("model_samples", pd.DataFrame(result.model_rows))
    ops = db.append("op_samples", pd.DataFrame(result.op_rows))
    report: dict[str, Any] = {"db": str(db.path), "plan": "new-gpu", "gpu": target.gpu_label, "model_rows": models,
                              "op_rows": ops, "timing_seconds": round(result.wall_seconds, 1)}  # fmt: skip
    if args.predictor_url:
        report["predictor"] = _post_collected(args, result=result, gpu=target.gpu_label, software=target.software)
    report["wall_seconds"] = round(time.perf_counter() - started, 1)
    print(json.dumps(report))
    return 0


def _post_collected(args: argparse.Namespace, *, result: Any, gpu: str, software: str) -> dict[str, Any]:
    """POST the rows to the predictor's /v1/collected; UserError with the predictor's reason when refused."""
    from offpeak_predictor.client import PredictorClient, PredictorRequestError, PredictorUnavailable
    from offpeak_predictor.collected import batch_body

    body = {"gpu": gpu, **batch_body(model_rows=result.model_rows, op_rows=result.op_rows, software=software)}
    client = PredictorClient(args.predictor_url, timeout=120.0, token_file=args.token_file)

    def retrying(attempt: int, wait: float, error: Exception) -> None:
        print(f"post {attempt}/{args.post_attempts} failed ({error}); trying again in {wait:g}s", file=sys.stderr)

    try:
        return client.add_collected(body, attempts=args.post_attempts, on_retry=retrying)
    except PredictorRequestError as e:
        raise UserError(f"the predictor refused the collected rows ({e}); they are kept in the local DB") from e
    except PredictorUnavailable as e:
        raise Unreachable(f"cannot post the collected rows: {e}; they are kept in the local DB") from e
