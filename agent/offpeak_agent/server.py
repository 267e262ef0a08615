"""The agent's HTTP face: `/metrics` and `/healthz` (healthy without GPUs, too)."""

from __future__ import annotations

from aiohttp import web
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from offpeak_agent.collector import Sampler

SAMPLER_KEY: web.AppKey[Sampler] = web.AppKey("sampler", Sampler)
REGISTRY_KEY: web.AppKey[CollectorRegistry] = web.AppKey("registry", CollectorRegistry)


async def metrics(request: web.Request) -> web.Response:
    return web.Response(body=generate_latest(request.app[REGISTRY_KEY]), headers={"Content-Type": CONTENT_TYPE_LATEST})


async def healthz(request: web.Request) -> web.Response:
    s = request.app[SAMPLER_KEY]
    return web.json_response({"ok": True, "node": s.node, "nvml": s.backend.available, "samples": s.samples,
                              "last_error": s.last_error})


def make_app(*, sampler: Sampler, registry: CollectorRegistry) -> web.Application:
    app = web.Application()
    app[SAMPLER_KEY] = sampler
    app[REGISTRY_KEY] = registry
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/healthz", healthz)
    return app
