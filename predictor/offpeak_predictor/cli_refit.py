"""`offpeak predictor refit` and `offpeak predictor rollback`: argument parsing and wiring only.

`register(sub)` takes the sub-parsers of the `predictor` command group (cli.py wires it). Either command works on
a model store directory directly (`--store`), or asks a running predictor to do it (`--url` with the shared
token), which is what the chart's CronJob does: the samples DB and the store live on the predictor's volume.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
from pathlib import Path
from typing import Any

from offpeak.cliargs import env
from offpeak.errors import Unreachable, UserError
from offpeak_predictor.cli_common import check_token_file, load_model

STORE_ENV = "OFFPEAK_MODEL_STORE"


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    r = sub.add_parser("refit", help="re-fit the model from job samples, shadow-evaluate, promote if not worse")
    _target_args(r)
    r.add_argument("--db", default=env("OFFPEAK_PREDICTOR_DB"),
                   help="sample DB (default ~/.cache/offpeak/benchmarks.sqlite; env OFFPEAK_PREDICTOR_DB)")
    r.add_argument("--model", default=env("OFFPEAK_PREDICTOR_MODEL"),
                   help="base model (default: the shipped one; env OFFPEAK_PREDICTOR_MODEL); the store's current "
                        "version is re-fitted when it was re-fitted from this base")
    r.add_argument("--min-samples", type=int, default=30, help="usable accepted samples needed (default 30)")
    r.add_argument("--min-models", type=int, default=4, help="distinct models needed to hold out (default 4)")
    r.add_argument("--folds", type=int, default=5, help="grouped folds of the shadow evaluation (default 5)")
    r.add_argument("--rounds", type=int, default=40, help="trees added to the step booster (default 40)")
    r.add_argument("--replay", action="store_true",
                   help="also fit on the DB's benchmark model rows (graphs extracted or cached; slow)")
    r.add_argument("--dry-run", action="store_true", help="evaluate and decide, promote nothing")
    r.set_defaults(func=_cmd_refit)
    b = sub.add_parser("rollback", help="serve the previous model version of the store again")
    _target_args(b)
    b.set_defaults(func=_cmd_rollback)


def _target_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--store", default=env(STORE_ENV),
                   help=f"model store directory (env {STORE_ENV})")
    p.add_argument("--keep", type=int, default=5, help="model versions the store keeps (default 5)")
    p.add_argument("--url", default=None,
                   help="ask the predictor at this URL instead (POST /v1/model/refit or /v1/model/rollback)")
    p.add_argument("--token-file", default=env("OFFPEAK_PREDICTOR_TOKEN_FILE"),
                   help="with --url: the shared bearer token (env OFFPEAK_PREDICTOR_TOKEN_FILE)")
    p.add_argument("--timeout", type=float, default=900.0, help="with --url: seconds to wait (default 900)")


def _store(args: argparse.Namespace) -> Any:
    from offpeak_predictor.modelstore import ModelStore

    if not args.store:
        raise UserError(f"give --store DIR (or env {STORE_ENV}), or --url of a running predictor")
    if args.keep < 2:
        raise UserError("--keep must be at least 2 (the current and the previous version)")
    return ModelStore(Path(args.store), keep=args.keep)


def _remote(args: argparse.Namespace, path: str, payload: dict[str, Any]) -> int:
    from offpeak_predictor.client import PredictorClient, PredictorRequestError, PredictorUnavailable

    check_token_file(args.token_file)
    client = PredictorClient(args.url, timeout=args.timeout, token_file=args.token_file)
    try:
        answer = client._post(path, payload, authenticated=True)  # noqa: SLF001 - the client's one POST path
    except PredictorRequestError as e:
        raise UserError(f"the predictor refused {path}: {e}") from e
    except PredictorUnavailable as e:
        raise Unreachable(f"{e} (is --url right, and the predictor up?)") from e
    print(json.dumps(answer, indent=1))
    return 0


def _cmd_refit(args: argparse.Namespace) -> int:
    from offpeak_predictor.refit import RefitSettings

    if min(args.min_samples, args.min_models, args.folds - 1, args.rounds) < 1:
        raise UserError("--min-samples, --min-models and --rounds must be >= 1, --folds >= 2")
    settings = RefitSettings(min_samples=args.min_samples, min_groups=args.min_models, folds=args.folds,
                             rounds=args.rounds)  # fmt: skip
    if args.url:
        return _remote(args, "/v1/model/refit", {"dry_run": args.dry_run})
    from offpeak_predictor.db import BenchmarkDB, default_db_path
    from offpeak_predictor.modelstore import ModelStoreError, ModelWatcher, refit_into_store
    from offpeak_predictor.pipeline import rich_progress

    store = _store(args)
    db_path = Path(args.db) if args.db else default_db_path()
    if not db_path.is_file():
        raise UserError(f"sample DB not found: {db_path} (give --db)")
    db = BenchmarkDB(db_path)
    base = load_model(args.model)
    watcher = ModelWatcher(store, base=base)
    try:
        serving = watcher.reload_if_changed() or base
        with rich_progress() as progress:
            replay = _replay(db, progress) if args.replay else None
            result = refit_into_store(serving=serving, samples=db.job_samples(), store=store,
                                      now=dt.datetime.now(dt.UTC), settings=settings, dry_run=args.dry_run,
                                      replay=replay, progress=progress)  # fmt: skip
        current = store.current()
    except ModelStoreError as e:
        raise UserError(str(e)) from e
    print(json.dumps({**result.to_dict(), "dry_run": args.dry_run, "store": str(store.root),
                      "current": current}, indent=1))  # fmt: skip
    return 0


def _replay(db: Any, progress: Any) -> Any:
    """The DB's benchmark model rows (held-out families removed; rows of the GPUs we measured kept, as the shipped model keeps them)
    joined with their graphs."""
    from offpeak_predictor.gpus import find_gpu
    from offpeak_predictor.graphcache import get_graph
    from offpeak_predictor.train import attach_graphs, exclude_holdout

    rows = db.read("model_samples")
    rows = exclude_holdout(rows[rows["gpu"].map(lambda g: find_gpu(str(g)) is not None)], keep_own=True)
    if not len(rows):
        raise UserError(f"--replay: the DB {db.path} has no model rows (run `offpeak predictor build-db`)")
    return attach_graphs(rows, get_graph, progress)


def _cmd_rollback(args: argparse.Namespace) -> int:
    from offpeak_predictor.modelstore import ModelStoreError

    if args.url:
        return _remote(args, "/v1/model/rollback", {})
    store = _store(args)
    try:
        pointer = store.rollback(reason="offpeak predictor rollback")
    except ModelStoreError as e:
        raise UserError(str(e)) from e
    print(json.dumps({"store": str(store.root), **pointer.to_dict()}, indent=1))
    return 0
