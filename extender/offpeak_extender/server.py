"""aiohttp transport for the extender: `/filter`, `/prioritize`, `/healthz`, `/readyz`, `/windows`, `/metrics`;
optionally a second app with only `/healthz`, `/readyz` and `/metrics` (`make_probe_app`), so the decisions can
listen on loopback for the scheduler alone while kubelet and Prometheus reach the probes on the pod IP.

Handlers read the body (bounded per endpoint), hand the work to a thread pool, time it and reply, so `/healthz`
answers while a large request is decided, and a decision that misses its deadline is answered fail-open
(`service.fail_open`) instead of stalling the scheduler. One exception: a body of at most `inline_body_bytes` is
parsed on the event loop, and answered there when the service knows its answer is cheap
(`ExtenderService.answer_now`: the usual pod over a node list whose columns are kept, ~0.5 ms at 5,000 nodes);
the two thread hand-offs it saves are a fifth of such a call.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from aiohttp import web
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from offpeak.serving import read_body
from offpeak_extender.heap import share_main_arena
from offpeak_extender.metrics import DEADLINE, FILTER, INTERNAL_ERROR, PRIORITIZE, TOO_LARGE
from offpeak_extender.service import Attempt, DeadlineExceeded, ExtenderService, fail_open

log = logging.getLogger(__name__)

MIB = 1024 * 1024


@dataclass(frozen=True)
class ServerSettings:
    """Limits of the HTTP face. Bytes and seconds.

    `max_body_bytes` (for `/filter` and `/prioritize`; the GET endpoints take no body): kube-scheduler sends the
    pod and, with `nodeCacheCapable`, only node names. 15,000 names at the 253-byte maximum (3.8 MB) plus a pod at
    etcd's 1.5 MiB object limit fit in 8 MiB with room; typical names (~40 bytes) fit 65,000-node clusters in
    3 MB. `deadline_seconds` stays below kube-scheduler's default `httpTimeout` of 5 s, leaving time for the body
    transfer and a busy machine. `inline_body_bytes`: bodies up to this size are parsed on the event loop, and
    decided there when that is cheap (see the module's docstring). Parsing that much costs ~1-2 ms on the loop
    here: 11,000 new names of 44 bytes (488 KB) in 0.7 ms, 512 KiB of JSON nested too deep refused in 1.6 ms. 0: every
    body goes to the workers.
    """

    max_body_bytes: int = 8 * MIB
    deadline_seconds: float = 3.0
    workers: int = 2
    inline_body_bytes: int = 512 * 1024

    def __post_init__(self) -> None:
        if self.max_body_bytes <= 0 or self.deadline_seconds <= 0 or self.workers <= 0:
            raise ValueError("max_body_bytes, deadline_seconds and workers must be > 0")
        if self.inline_body_bytes < 0:
            raise ValueError("inline_body_bytes must be >= 0")


SERVICE_KEY: web.AppKey[ExtenderService] = web.AppKey("service", ExtenderService)
REGISTRY_KEY: web.AppKey[CollectorRegistry] = web.AppKey("registry", CollectorRegistry)
SETTINGS_KEY: web.AppKey[ServerSettings] = web.AppKey("settings", ServerSettings)
EXECUTOR_KEY: web.AppKey[ThreadPoolExecutor] = web.AppKey("executor", ThreadPoolExecutor)


def _error(status: int, message: str) -> web.Response:
    return web.Response(status=status, body=json.dumps({"Error": message}).encode(), content_type="application/json")


def _decision(verb: str) -> Callable[[web.Request], Awaitable[web.Response]]:
    async def handler(request: web.Request) -> web.Response:
        service = request.app[SERVICE_KEY]
        settings = request.app[SETTINGS_KEY]
        raw = await read_body(request, settings.max_body_bytes)
        if raw is None:
            service.metrics.requests.labels(verb, TOO_LARGE).inc()
            return _error(413, f"offpeak extender: request body over {settings.max_body_bytes} bytes, the limit of "
                               f"/{verb} (ExtenderArgs with nodeCacheCapable: the pod and node names)")
        start = time.perf_counter()
        attempt = Attempt.within(settings.deadline_seconds)
        try:
            body = service.answer_now(verb, raw, attempt) if len(raw) <= settings.inline_body_bytes else None
            if body is None:
                work = asyncio.get_running_loop().run_in_executor(request.app[EXECUTOR_KEY], service.answer, verb,
                                                                  raw, attempt)
                body = await asyncio.wait_for(work, settings.deadline_seconds)
        except (TimeoutError, DeadlineExceeded):
            attempt.abandoned = True  # the worker stops at its next check
            service.metrics.requests.labels(verb, DEADLINE).inc()
            log.warning("/%s: no decision within %gs; answering fail-open", verb, settings.deadline_seconds)
            body = fail_open(verb, attempt.args, f"no decision within {settings.deadline_seconds:g}s")
        except Exception:  # a bug must not block pods: log it, answer fail-open
            attempt.abandoned = True
            service.metrics.requests.labels(verb, INTERNAL_ERROR).inc()
            log.exception("/%s failed; answering fail-open", verb)
            body = fail_open(verb, attempt.args, "internal error")
        service.metrics.decision_seconds.labels(verb).observe(time.perf_counter() - start)
        return web.Response(body=body, content_type="application/json")

    return handler


async def healthz(request: web.Request) -> web.Response:
    """Liveness: the process answers. Cache state is reported, not judged (see /readyz)."""
    service = request.app[SERVICE_KEY]
    stale = service.store.data_stale()
    service.metrics.data_stale.set(1 if stale else 0)
    return web.json_response({"ok": True, "synced": service.store.synced, "data_stale": stale})


async def readyz(request: web.Request) -> web.Response:
    """Readiness: 503 until the informer has listed nodes and pods (before that every node would be unknown)."""
    service = request.app[SERVICE_KEY]
    synced = service.store.synced
    body = {"ready": synced, "synced": synced, "data_stale": service.store.data_stale()}
    return web.json_response(body, status=200 if synced else 503)


async def metrics(request: web.Request) -> web.Response:
    service = request.app[SERVICE_KEY]
    service.metrics.data_stale.set(1 if service.store.data_stale() else 0)
    service.metrics.nodes_known.set(len(service.store.node_names()))
    service.gangs.sweep(service.store.clock())
    body = generate_latest(request.app[REGISTRY_KEY])
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})


def windows_report(service: ExtenderService, names: list[str]) -> dict[str, Any]:
    """Each node's free GPUs now and forecast idle windows (`/windows`, a debug view)."""
    names = names or service.store.node_names()
    views, unknown = service.store.views(names)
    now = service.store.clock()
    return {
        "now": now,
        "data_stale": service.store.data_stale(),
        "unknown": unknown,
        "nodes": [
            {
                "name": v.name, "gpu_type": v.gpu_type, "gpus_total": v.gpus_total, "gpus_free_now": v.gpus_free_now,
                "data_stale": v.data_stale, "confidence": v.confidence,
                "windows": [{"start": w.start, "end": w.end, "free_gpus": w.free_gpus, "confidence": w.confidence,
                             "end_certain": w.end_certain}
                            for w in (v.windows or ()) if w.end is None or w.end > now],
            }
            for v in views
        ],
    }


async def windows(request: web.Request) -> web.Response:
    """Debug view (`?node=a&node=b` to narrow); built in the worker pool like the decisions."""
    names = request.query.getall("node", [])
    report = await asyncio.get_running_loop().run_in_executor(
        request.app[EXECUTOR_KEY], windows_report, request.app[SERVICE_KEY], names)
    return web.json_response(report)


async def _executor(app: web.Application) -> AsyncIterator[None]:
    share_main_arena()  # the workers below allocate in the main arena (serve_extender asked already; apps built
    # elsewhere, as the speed bench's, ask here)
    executor = ThreadPoolExecutor(max_workers=app[SETTINGS_KEY].workers, thread_name_prefix="extender-decide")
    app[EXECUTOR_KEY] = executor
    yield
    executor.shutdown(wait=False, cancel_futures=True)


def make_probe_app(*, service: ExtenderService, registry: CollectorRegistry) -> web.Application:
    """Health, readiness and metrics only (no body is read anywhere)."""
    app = web.Application(client_max_size=1024)
    app[SERVICE_KEY] = service
    app[REGISTRY_KEY] = registry
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/metrics", metrics)
    return app


def make_app(*, service: ExtenderService, registry: CollectorRegistry,
             settings: ServerSettings | None = None) -> web.Application:
    settings = settings or ServerSettings()
    app = web.Application(client_max_size=settings.max_body_bytes)  # backstop; handlers stream with their limit
    app[SERVICE_KEY] = service
    app[REGISTRY_KEY] = registry
    app[SETTINGS_KEY] = settings
    app.cleanup_ctx.append(_executor)
    app.router.add_post("/filter", _decision(FILTER))
    app.router.add_post("/prioritize", _decision(PRIORITIZE))
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/windows", windows)
    app.router.add_get("/metrics", metrics)
    return app
