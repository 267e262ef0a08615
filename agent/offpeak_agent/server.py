"""The agent's HTTP face: `/metrics`, `/healthz` (liveness, 200 without GPUs too) and `/readyz` (200 only while
NVML answers: before that the agent has no data to offer)."""

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


async def readyz(request: web.Request) -> web.Response:
    s = request.app[SAMPLER_KEY]
    body = {"ready": s.nvml_up, "node": s.node, "nvml": s.backend.available, "last_error": s.last_error}
    return web.json_response(body, status=200 if s.nvml_up else 503)


def make_app(*, sampler: Sampler, registry: CollectorRegistry) -> web.Application:
    app = web.Application()
    app[SAMPLER_KEY] = sampler
    app[REGISTRY_KEY] = registry
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    return app
