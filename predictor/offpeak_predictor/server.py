"""HTTP JSON API of the predictor (aiohttp): thin adapter over `predict.Predictor` and `samples.Feedback`.

Handlers only parse, call and serialise. Bodies are decoded into the typed payloads of `wire.py` (the OpenAPI
document comes from the same types): bad input is a 4xx naming the JSON path of the field and the reason; any
other failure is a JSON 500 and is counted, never a crash. State-changing endpoints (PROTECTED) need the shared
bearer token (`auth.py`). Metrics use an injectable prometheus registry. With `ServerSettings.metrics_port`,
/metrics moves to a second, read-only listener (`build_metrics`), so a NetworkPolicy can admit scrapers there and
nowhere near the API.

Over 500 lines because it holds one handler per endpoint with its metrics and error mapping; the logic behind
each is in its own module.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import logging
import math
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from collections.abc import Callable
from typing import Any, TypeVar

import msgspec
from aiohttp import web
from aiohttp.log import access_logger
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from offpeak.errors import UserError
from offpeak.serving import read_body, serve_apps
from offpeak_graph.schema import GraphError, ModelGraph, parse_graph
from offpeak_predictor import wire
from offpeak_predictor.auth import SharedSecret
from offpeak_predictor.correction import Level
from offpeak_predictor.db import BenchmarkDB
from offpeak_predictor.interconnect import DEFAULT_NETWORK_GBITS
from offpeak_predictor.gpus import known_gpus, resolve_gpu
from offpeak_predictor.model import RuntimeModel
from offpeak_predictor.modelstore import ModelStore, ModelStoreError, ModelWatcher, refit_into_store
from offpeak_predictor.openapi import openapi_document
from offpeak_predictor.predict import PredictOptions, Predictor
from offpeak_predictor.refit import RefitSettings
from offpeak_predictor.samples import Feedback, FeedbackSettings, Outcome, Sample, SampleTooLarge
from offpeak_predictor.samples import measured_step_seconds
from offpeak_predictor.wire import UNSET, CollectedBatch, PredictRequest, RefitRequest, SampleReport

log = logging.getLogger(__name__)
# (method, route) that change state: bearer token required
PROTECTED = frozenset({("POST", "/v1/samples"), ("POST", "/v1/collected"), ("POST", "/v1/model/refit"),
                       ("POST", "/v1/model/rollback")})
SAMPLE_STATUS_CODES = {"accepted": 201, "unverified": 202, "quarantined": 422}
INLINE_DECODE_BYTES = 256 * 1024  # request bodies larger than this are decoded in a thread, off the event loop
# Bodies of the endpoints that carry no graph are small: their limit, below `max_body_bytes` (which bounds the rest).
SMALL_BODY_BYTES = 64 * 1024
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class ServerSettings:
    host: str = "0.0.0.0"  # noqa: S104 - a cluster service
    port: int = 8080
    max_body_bytes: int = 8 * 1024 * 1024
    predict_deadline_s: float = 4.0  # below the scheduler's 5 s extender timeout
    predict_workers: int = 1  # the Predictor serialises on its lock; more threads only queue
    token_file: str | None = None  # the shared secret state-changing requests must present (None: no writes)
    network_gbits: float = DEFAULT_NETWORK_GBITS  # per node, between the nodes of a multi-node job
    cache_bytes: int = 256 * 2**20  # graph summaries, hashes, memory estimates, op prices (approximate bytes, LRU)
    model_store: str | None = None  # directory of re-fitted model versions (None: no /v1/model/refit, rollback)
    model_keep: int = 5  # versions the store keeps
    store_poll_s: float = 60.0  # how often the store's pointer is checked (a CLI may have changed it)
    refit: RefitSettings = field(default_factory=RefitSettings)
    metrics_host: str = "0.0.0.0"  # noqa: S104 - probes and scrapes come to the pod IP
    metrics_port: int | None = None  # None: /metrics on the API port; else there only, with /healthz and /readyz


class Metrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        self.latency = Histogram(
            "offpeak_predictor_http_request_seconds", "HTTP request latency", ["endpoint"], registry=registry,
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5),
        )  # fmt: skip
        self.predictions = Counter("offpeak_predictor_predictions_total", "Step predictions served", ["gpu_type"],
                                   registry=registry)  # fmt: skip
        self.errors = Counter("offpeak_predictor_errors_total", "Requests answered with an error",
                              ["endpoint", "status"], registry=registry)  # fmt: skip
        self.samples = Counter("offpeak_predictor_samples_total", "Observed runtime samples stored", registry=registry)
        self.sample_outcomes = Counter("offpeak_predictor_sample_outcomes_total",
                                       "Stored samples by judgement (accepted: learned from)", ["status"],
                                       registry=registry)  # fmt: skip
        self.auth_failures = Counter("offpeak_predictor_auth_failures_total",
                                     "Requests refused for their identity (no token, wrong token, ...)",
                                     ["endpoint", "reason"], registry=registry)  # fmt: skip
        self.model_info = Gauge("offpeak_predictor_model_info", "The model version being served (value 1)",
                                ["model_version"], registry=registry)  # fmt: skip
        self.corrected_keys = Gauge("offpeak_predictor_corrected_keys",
                                    "Correction keys with measured samples, by level", ["level"], registry=registry)
        for status in SAMPLE_STATUS_CODES:
            self.sample_outcomes.labels(status)


class _Refused(Exception):
    """A request refused for its identity (raised inside the middleware, answered there)."""

    def __init__(self, status: int, message: str, reason: str) -> None:
        super().__init__(message)
        self.status, self.message, self.reason = status, message, reason


def _error(status: int, message: str, **extra: Any) -> web.Response:
    return web.json_response({"error": message, **extra}, status=status)


def _gpu_type(gpu: str, *, unknown: str = "") -> str | web.Response:
    """The catalogue name of a request's `gpu`, or the 400 answer (with the known GPUs) for one it does not know."""
    try:
        return resolve_gpu(gpu).name
    except UserError:
        return _error(400, f"unknown GPU {gpu[:wire.MAX_GPU_NAME_CHARS]!r}{unknown}", known_gpus=known_gpus())


def _parse_graph(raw: dict[str, Any]) -> ModelGraph:
    """A request's graph, checked by the one graph validation (`parse_graph`); UserError naming its JSON path."""
    try:
        return parse_graph(raw)
    except GraphError as e:
        raise wire.graph_error(e, "$.graph") from e


class BodyTooLarge(Exception):
    """A request body over its endpoint's limit (a 413 naming the limit)."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"request body larger than {limit} bytes")
        self.limit = limit


def finite_json(body: Any) -> str:
    """JSON text of an answer; UserError when a number in it is NaN or infinite (never invalid JSON)."""
    try:
        return json.dumps(body, allow_nan=False)
    except ValueError as e:
        raise UserError("the prediction for this graph is not a finite number; check its FLOPs and bytes") from e


def _typed(kind: type[T], body: Any) -> bytes:
    """An answer as the JSON of its wire type (a mismatch is a bug here: a 500, never a drifted contract), refused
    when a number in it is not finite."""
    finite_json(body)
    return wire.encode(msgspec.convert(body, kind))


def _sample(req: SampleReport, graph: ModelGraph | None, *, graph_hash: str, gpu_type: str,
            client: str) -> Sample:  # fmt: skip
    """A POST /v1/samples body as a Sample; options default to the graph's, as in /v1/predict."""
    if req.step_seconds is None and req.job_seconds is None:
        raise UserError("'job_seconds' is required (or 'step_seconds'): the measured run")
    options = PredictOptions(mode=req.mode, precision=req.precision, optimizer=req.optimizer,
                             num_gpus=req.num_gpus)  # fmt: skip
    options.validate()
    mode = options.mode or (graph.mode if graph else "train")
    return Sample(
        job=req.job, gpu_type=gpu_type, graph_hash=graph_hash, client=client,
        family=req.model_family if req.model_family is not None else (graph.model_family if graph else ""),
        precision=options.precision or (graph.precision if graph else "fp32"), mode=mode,
        optimizer=(options.optimizer or (graph.optimizer if graph else "adam")) if mode == "train" else "none",
        num_gpus=options.num_gpus,
        batch_size=req.batch_size if req.batch_size is not None else (graph.batch_size if graph else 0),
        step_seconds=measured_step_seconds(step_seconds=req.step_seconds, job_seconds=req.job_seconds,
                                           steps=req.steps, startup_seconds=req.startup_seconds or 0.0),
        job_seconds=req.job_seconds, steps=req.steps, replaces=req.replaces,
    )  # fmt: skip


def _outcome_body(outcome: Outcome, *, model_version: str) -> dict[str, Any]:
    judged = outcome.judgement
    body: dict[str, Any] = {"id": outcome.id, "status": judged.status, "model_version": model_version,
                            "predicted_step_seconds": judged.predicted_step_seconds}
    if judged.reason:
        body["reason"] = judged.reason
    if judged.status == "quarantined":
        body["error"] = judged.reason
    if outcome.correction is not None:
        c = outcome.correction
        body["correction"] = {"samples": c.samples, "level": c.level, "factor": round(c.factor, 6),
                              "p90_factor": round(c.p90_factor, 6)}
    return body


class PredictorApp:
    """Builds the aiohttp application; model, DB, secret and registry are injected."""

    def __init__(self, *, model: RuntimeModel, db: BenchmarkDB | None, settings: ServerSettings = ServerSettings(),
                 registry: CollectorRegistry | None = None, feedback: FeedbackSettings = FeedbackSettings(),
                 secret: SharedSecret | None = None) -> None:  # fmt: skip
        self.predictor = Predictor(model, cache_bytes=settings.cache_bytes, network_gbits=settings.network_gbits)
        self._pool = ThreadPoolExecutor(max_workers=settings.predict_workers, thread_name_prefix="predict")
        self.db = db
        self.settings = settings
        self.secret = secret if secret is not None else SharedSecret(settings.token_file)
        self.metrics = Metrics(registry or CollectorRegistry())
        self.feedback = Feedback(predictor=self.predictor, db=db, settings=feedback) if db is not None else None
        self.feedback_settings = feedback
        self.store = ModelStore(settings.model_store, keep=settings.model_keep) if settings.model_store else None
        self.watcher = ModelWatcher(self.store, base=model) if self.store is not None else None
        self._refit_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="refit")  # one refit at a time
        self.metrics.model_info.labels(model.version).set(1)
        if self.feedback is not None:
            levels: tuple[Level, ...] = ("family", "graph")
            for level in levels:
                self.metrics.corrected_keys.labels(level).set_function(self._key_count(level))

    def _key_count(self, level: Level) -> Callable[[], float]:
        """The gauge callback: keys with samples at one level (read at scrape time)."""
        def count() -> float:
            return float(self.feedback.table.key_counts()[level]) if self.feedback is not None else 0.0

        return count

    def load_samples(self) -> dict[str, int]:
        """Rebuild the correction table from the sample DB (start-up); counts of rows by judgement."""
        if self.feedback is None:
            return {}
        counts = dict(self.feedback.rebuild())
        log.info("corrections rebuilt from %s: %s; %d keys", self.db.path if self.db else "-", counts,
                 len(self.feedback.table))  # fmt: skip
        return counts

    def refresh_calibration(self, predictor: Predictor | None = None) -> int:
        """Recompute the per-GPU-type calibration from the collected rows in the DB (start-up, new rows, a new
        model) and swap it in whole; the number of calibrated GPU types. Off the hot path: predictions only read
        the mapping."""
        predictor = predictor or self.predictor
        if self.db is None:
            return 0
        from offpeak_predictor.collected import load_calibration

        calibration = load_calibration(predictor=predictor, db=self.db)
        predictor.calibration = calibration
        if calibration:
            log.info("calibrated from collected rows (factor, rows, held-out gain; a gain <= 0 leaves factor 1): %s",
                     {k: (round(v.factor, 3), v.rows, v.held_out_gain and round(v.held_out_gain, 3))
                      for k, v in calibration.items()})  # fmt: skip
        return len(calibration)

    def reload_model(self) -> str | None:
        """Serve the store's current version when it changed (the new version, else None). The new predictor and
        its correction table are built and re-judged while the old one keeps answering; then they are swapped
        under the old one's lock, and a second, cheap rebuild learns the samples posted meanwhile."""
        if self.watcher is None:
            return None
        model = self.watcher.reload_if_changed()  # ModelStoreError: keep serving; the caller reports it
        if model is None:
            return None
        predictor = Predictor(model, cache_bytes=self.settings.cache_bytes, network_gbits=self.settings.network_gbits)
        feedback = None
        self.refresh_calibration(predictor)
        if self.db is not None:
            feedback = Feedback(predictor=predictor, db=self.db, settings=self.feedback_settings)
            feedback.rebuild()
        old = self.predictor
        with old.lock:
            self.predictor, self.feedback = predictor, feedback
            if feedback is not None:
                with predictor.lock:
                    feedback.rebuild()
        self.metrics.model_info.remove(old.version)
        self.metrics.model_info.labels(model.version).set(1)
        log.info("now serving model %s (was %s)", model.version, old.version)
        return model.version

    def build(self) -> web.Application:
        """The aiohttp application, with the correction table rebuilt from the sample DB."""
        try:
            self.reload_model()  # a promoted version in the store is served from the start
        except ModelStoreError as e:
            log.error("model store: %s; serving %s", e, self.predictor.version)
        self.refresh_calibration()
        self.load_samples()
        app = web.Application(client_max_size=self.settings.max_body_bytes, middlewares=[self._middleware])
        app.on_cleanup.append(self._close_pool)
        if self.store is not None:
            app.on_startup.append(self._start_store_watch)
        app.router.add_post("/v1/predict", self.predict)
        app.router.add_post("/v1/samples", self.samples)
        app.router.add_post("/v1/collected", self.collected)
        app.router.add_post("/v1/model/refit", self.model_refit)
        app.router.add_post("/v1/model/rollback", self.model_rollback)
        app.router.add_get("/healthz", self.healthz)
        app.router.add_get("/readyz", self.readyz)
        if self.settings.metrics_port is None:
            app.router.add_get("/metrics", self.metrics_endpoint)
        app.router.add_get("/openapi.json", self.openapi)
        return app

    def build_metrics(self) -> web.Application:
        """The metrics listener: /metrics, /healthz and /readyz only (GETs that read; no body is accepted)."""
        app = web.Application(client_max_size=1024)
        app.router.add_get("/metrics", self.metrics_endpoint)
        app.router.add_get("/healthz", self.healthz)
        app.router.add_get("/readyz", self.readyz)
        return app

    @web.middleware
    async def _middleware(self, request: web.Request, handler: Any) -> web.StreamResponse:
        endpoint = request.match_info.route.resource.canonical if request.match_info.route.resource else "unknown"
        started = time.perf_counter()
        try:
            if (request.method, endpoint) in PROTECTED:
                decision = self.secret.check(request.headers.get("Authorization"))
                if not decision.ok:
                    self.metrics.auth_failures.labels(endpoint, decision.reason).inc()
                    raise _Refused(decision.status, decision.message, decision.reason)
            response = await handler(request)
        except _Refused as e:
            response = _error(e.status, e.message, reason=e.reason)
            if e.status == 401:
                response.headers["WWW-Authenticate"] = 'Bearer realm="offpeak-predictor"'
        except SampleTooLarge as e:
            response = _error(413, str(e))
        except UserError as e:
            response = _error(400, str(e))
        except BodyTooLarge as e:
            response = _error(413, f"{e}, the limit of {endpoint}")
        except web.HTTPException as e:
            response = _error(e.status, e.reason or "error")
        except Exception:  # noqa: BLE001 - the server must answer, not crash
            log.exception("unhandled error on %s", endpoint)
            response = _error(500, "internal error; see the predictor log")
        self.metrics.latency.labels(endpoint).observe(time.perf_counter() - started)
        if response.status >= 400:
            self.metrics.errors.labels(endpoint, str(response.status)).inc()
        return response

    async def _body(self, request: web.Request, kind: type[T], limit: int | None = None) -> T:
        """The request's body as its wire type (`wire.decode`: a 400 naming the field); 413 past `limit` bytes (the
        endpoint's; default `max_body_bytes`), decided on Content-Length or while streaming. A body over
        `INLINE_DECODE_BYTES` is decoded in a thread, so a large graph never holds the event loop (and /healthz)
        while it is parsed."""
        limit = self.settings.max_body_bytes if limit is None else min(limit, self.settings.max_body_bytes)
        raw = await read_body(request, limit)
        if raw is None:
            raise BodyTooLarge(limit)
        if len(raw) <= INLINE_DECODE_BYTES:
            return wire.decode(raw, kind)
        return await asyncio.get_running_loop().run_in_executor(None, wire.decode, raw, kind)

    async def predict(self, request: web.Request) -> web.Response:
        req = await self._body(request, PredictRequest)
        if req.graph_url is not UNSET:
            raise UserError("'graph_url' is not supported: send the model graph inline as 'graph'")
        for name in req.gpus:
            try:
                resolve_gpu(name)
            except UserError:
                return _error(400, f"unknown GPU {name!r}", known_gpus=known_gpus())
        options = PredictOptions(mode=req.mode, precision=req.precision, optimizer=req.optimizer,
                                 num_gpus=req.num_gpus, steps=req.steps, gpus_per_node=req.gpus_per_node)
        if req.startup_seconds is not None:
            options = replace(options, startup_seconds=req.startup_seconds)  # absent: the default start-up
        options.validate()
        answer, predictions = await self._off_loop(self._predict_json, req.graph, req.gpus, options)
        for item in predictions:
            self.metrics.predictions.labels(item["gpu_type"]).inc()
        return web.Response(body=answer, content_type="application/json")

    def _predict_json(self, raw_graph: dict[str, Any], gpus: list[str],
                      options: PredictOptions) -> tuple[bytes, list[dict[str, Any]]]:  # fmt: skip
        """Parse, validate, predict and serialise (in a worker thread: a 100k-op graph takes seconds)."""
        graph = _parse_graph(raw_graph)
        graph_hash = graph.content_hash()
        predictions = self.predictor.predict(graph, gpus, options, graph_hash=graph_hash)
        body = {"model_version": self.predictor.version, "graph_hash": graph_hash, "predictions": predictions}
        return _typed(wire.PredictResponse, body), predictions

    async def _off_loop(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Run heavy work in the worker pool, so the event loop (and /healthz) keeps answering; 503 past the
        deadline (the worker finishes in the background, its result dropped)."""
        future = asyncio.get_running_loop().run_in_executor(self._pool, fn, *args)
        try:
            return await asyncio.wait_for(future, timeout=self.settings.predict_deadline_s)
        except TimeoutError:
            raise web.HTTPServiceUnavailable(
                reason=f"prediction took longer than {self.settings.predict_deadline_s:g} s; retry later") from None

    async def samples(self, request: web.Request) -> web.Response:
        if self.feedback is None:
            return _error(503, "no sample database configured (start with --db)")
        req = await self._body(request, SampleReport)
        graph_hash = req.graph_hash
        graph = None
        if req.graph is not None:
            graph = await self._off_loop(_parse_graph, req.graph)
            graph_hash = graph.content_hash()
        if not graph_hash:
            raise UserError("give 'graph_hash' (string) or 'graph'")
        gpu_type = _gpu_type(req.gpu)
        if isinstance(gpu_type, web.Response):
            return gpu_type
        sample = _sample(req, graph, graph_hash=graph_hash, gpu_type=gpu_type, client=(request.remote or "")[:64])
        # Judging a sample predicts it (seconds for a 100k-op graph) and writes SQLite: in the predict worker, with
        # no deadline (the sample is stored whatever the client does), so /healthz never waits for it.
        outcome = await asyncio.get_running_loop().run_in_executor(self._pool, self._ingest, sample, graph,
                                                                   req.graph)
        self.metrics.samples.inc()
        self.metrics.sample_outcomes.labels(outcome.judgement.status).inc()
        answer = _typed(wire.SampleAnswer, _outcome_body(outcome, model_version=self.predictor.version))
        return web.Response(body=answer, status=SAMPLE_STATUS_CODES[outcome.judgement.status],
                            content_type="application/json")  # fmt: skip

    def _ingest(self, sample: Sample, graph: ModelGraph | None, graph_dict: dict[str, Any] | None) -> Outcome:
        assert self.feedback is not None
        with self.predictor.lock:  # another worker may be predicting with the same caches
            return self.feedback.ingest(sample, graph, graph_dict)

    async def collected(self, request: web.Request) -> web.Response:
        """Rows from `offpeak collect` (a collect Job): checked, stored, and the GPU type re-calibrated."""
        if self.db is None:
            return _error(503, "no benchmark database configured (start with --db)")
        req = await self._body(request, CollectedBatch)
        gpu_type = _gpu_type(req.gpu, unknown=": add it to the GPU catalogue before collecting on it")
        if isinstance(gpu_type, web.Response):
            return gpu_type
        answer = await asyncio.get_running_loop().run_in_executor(self._refit_pool, self._store_collected,
                                                                  req, gpu_type)  # fmt: skip
        return web.Response(body=wire.encode(answer), status=201, content_type="application/json")

    def _store_collected(self, req: CollectedBatch, gpu_type: str) -> wire.CollectedAnswer:
        """Check every row (each model row's graph is parsed and predicted) before anything is written, store them
        in one transaction, re-calibrate (in a worker: graphs are parsed and one prediction runs per row)."""
        from offpeak_predictor.collected import check_predictable, parse_batch, store_batch

        assert self.db is not None
        batch = parse_batch(req, gpu_type=gpu_type)  # UserError: a 400 naming the field
        check_predictable(self.predictor, batch)
        models, ops, repeated = store_batch(self.db, batch)
        self.refresh_calibration()
        cal = self.predictor.calibration.get(gpu_type)
        calibration = None if cal is None else wire.Calibration(
            factor=round(cal.factor, 6), rows=cal.rows, median_ratio=round(math.exp(cal.median_log_ratio), 6),
            held_out_gain=None if cal.held_out_gain is None else round(cal.held_out_gain, 6),
            implausible_rows=cal.implausible_rows)  # fmt: skip
        log.info("collected rows on %s: %d model, %d op (%d already stored); calibration %s", gpu_type, models, ops,
                 repeated, calibration)  # fmt: skip
        return wire.CollectedAnswer(gpu_type=gpu_type, model_rows=models, op_rows=ops, already_stored=repeated,
                                    calibration=calibration, model_version=self.predictor.version)  # fmt: skip

    async def _close_pool(self, app: web.Application) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._refit_pool.shutdown(wait=False, cancel_futures=True)

    async def _start_store_watch(self, app: web.Application) -> None:
        async def watch() -> None:
            while True:
                await asyncio.sleep(self.settings.store_poll_s)
                try:
                    await asyncio.get_running_loop().run_in_executor(self._refit_pool, self.reload_model)
                except ModelStoreError as e:
                    log.error("model store: %s; still serving %s", e, self.predictor.version)

        task = asyncio.create_task(watch())
        app.on_cleanup.append(lambda _: self._cancel(task))

    @staticmethod
    async def _cancel(task: asyncio.Task[None]) -> None:
        task.cancel()

    def _refit(self, dry_run: bool) -> dict[str, Any]:
        """Re-fit from the sample DB, promote when not worse, serve what was promoted (in the refit thread)."""
        assert self.store is not None and self.db is not None
        result = refit_into_store(serving=self.predictor.model, samples=self.db.job_samples(), store=self.store,
                                  now=dt.datetime.now(dt.UTC), settings=self.settings.refit, dry_run=dry_run)
        self.reload_model()
        return {**result.to_dict(), "dry_run": dry_run, "model_version": self.predictor.version}

    def _rollback(self) -> dict[str, Any]:
        assert self.store is not None
        pointer = self.store.rollback(reason="POST /v1/model/rollback")
        self.reload_model()
        return {**pointer.to_dict(), "model_version": self.predictor.version}

    async def _store_call(self, fn: Callable[..., dict[str, Any]], *args: Any) -> web.Response:
        if self.store is None or self.db is None:
            return _error(503, "no model store configured (start with --model-store and --db)")
        try:
            body = await asyncio.get_running_loop().run_in_executor(self._refit_pool, fn, *args)
        except ModelStoreError as e:
            return _error(409, str(e))
        return web.Response(text=finite_json(body), content_type="application/json")

    async def model_refit(self, request: web.Request) -> web.Response:
        req = await self._body(request, RefitRequest, SMALL_BODY_BYTES) if request.body_exists else RefitRequest()
        return await self._store_call(self._refit, req.dry_run)

    async def model_rollback(self, request: web.Request) -> web.Response:
        return await self._store_call(self._rollback)

    async def healthz(self, request: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def readyz(self, request: web.Request) -> web.Response:
        keys = self.feedback.table.key_counts() if self.feedback is not None else {}
        return web.json_response({"status": "ready", "model_version": self.predictor.version,
                                  "corrected_keys": keys})  # fmt: skip

    async def metrics_endpoint(self, request: web.Request) -> web.Response:
        resp = web.Response(body=generate_latest(self.metrics.registry))
        resp.content_type = CONTENT_TYPE_LATEST.split(";")[0]
        return resp

    async def openapi(self, request: web.Request) -> web.Response:
        return web.json_response(openapi_document(known_gpus()))


def run_server(*, model: RuntimeModel, db: BenchmarkDB | None, settings: ServerSettings,
               feedback: FeedbackSettings = FeedbackSettings()) -> None:  # fmt: skip
    """Serve until interrupted (the CLI entry point): the API, and the metrics listener when a port is set."""
    from prometheus_client import REGISTRY

    predictor = PredictorApp(model=model, db=db, settings=settings, registry=REGISTRY, feedback=feedback)
    sites = [(predictor.build(), settings.host, settings.port)]
    if settings.metrics_port is not None:
        sites.append((predictor.build_metrics(), settings.metrics_host, settings.metrics_port))
    asyncio.run(serve_apps(sites, access_log=access_logger))
