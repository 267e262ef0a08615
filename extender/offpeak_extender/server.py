"""aiohttp transport for the extender: `/filter`, `/prioritize`, `/healthz`, `/metrics`."""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from offpeak_extender.service import ExtenderService
from offpeak_extender.wire import error_filter_result

SERVICE_KEY: web.AppKey[ExtenderService] = web.AppKey("service", ExtenderService)
REGISTRY_KEY: web.AppKey[CollectorRegistry] = web.AppKey("registry", CollectorRegistry)


def _dumps(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"))


def _timed(verb: str, decide: Callable[[ExtenderService, Any], Any]) -> Callable[[web.Request], Awaitable[web.Response]]:
    async def handler(request: web.Request) -> web.Response:
        service = request.app[SERVICE_KEY]
        raw = await request.read()
        start = time.perf_counter()
        try:
            body = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            payload: Any = error_filter_result(f"offpeak extender: request is not JSON: {e}") if verb == "filter" else []
        else:
            payload = decide(service, body)
        text = _dumps(payload)
        service.metrics.decision_seconds.labels(verb).observe(time.perf_counter() - start)
        return web.Response(text=text, content_type="application/json")

    return handler


async def healthz(request: web.Request) -> web.Response:
    service = request.app[SERVICE_KEY]
    stale = service.store.data_stale()
    service.metrics.data_stale.set(1 if stale else 0)
    return web.json_response({"ok": True, "synced": service.store.synced, "data_stale": stale})


async def metrics(request: web.Request) -> web.Response:
    service = request.app[SERVICE_KEY]
    service.metrics.data_stale.set(1 if service.store.data_stale() else 0)
    service.metrics.nodes_known.set(len(service.store.node_names()))
    body = generate_latest(request.app[REGISTRY_KEY])
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})


async def windows(request: web.Request) -> web.Response:
    """Debug view: each node's free GPUs now and forecast idle windows (`?node=a&node=b` to narrow)."""
    service = request.app[SERVICE_KEY]
    names = request.query.getall("node", []) or service.store.node_names()
    views, unknown = service.store.views(names)
    now = service.store.clock()
    out = {
        "now": now,
        "data_stale": service.store.data_stale(),
        "unknown": unknown,
        "nodes": [
            {
                "name": v.name, "gpu_type": v.gpu_type, "gpus_total": v.gpus_total, "gpus_free_now": v.gpus_free_now,
                "data_stale": v.data_stale, "confidence": v.confidence,
                "windows": [{"start": w.start, "end": w.end, "free_gpus": w.free_gpus, "confidence": w.confidence}
                            for w in (v.windows or ()) if w.end is None or w.end > now],
            }
            for v in views
        ],
    }
    return web.json_response(out)


def make_app(*, service: ExtenderService, registry: CollectorRegistry) -> web.Application:
    app = web.Application(client_max_size=64 * 1024 * 1024)
    app[SERVICE_KEY] = service
    app[REGISTRY_KEY] = registry
    app.router.add_post("/filter", _timed("filter", ExtenderService.filter))
    app.router.add_post("/prioritize", _timed("prioritize", ExtenderService.prioritize))
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/windows", windows)
    app.router.add_get("/metrics", metrics)
    return app
