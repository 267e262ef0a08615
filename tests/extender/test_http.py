"""HTTP handlers through aiohttp's test client, backed by a real ClusterStore fed with watch-shaped objects."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any

import numpy as np
from aiohttp.test_utils import TestClient, TestServer
from prometheus_client import CollectorRegistry

from offpeak_core.forecast import ForecastSettings
from offpeak_extender.metrics import ExtenderMetrics
from offpeak_extender.server import make_app
from offpeak_extender.service import DecisionSettings, ExtenderService
from offpeak_extender.store import ClusterStore

from support.clock import Clock

from .k8s_objects import gpu_node, gpu_pod

DAY = 600.0
SETTINGS = ForecastSettings(season_seconds=DAY, step_seconds=10.0, horizon_seconds=DAY, history_seconds=7 * DAY)
NOW = 70 * DAY  # start of a compressed day
PRED = {"A100-SXM4-40GB": {"p50": 100.0, "p90": 120.0}}


def history(busy_from: float) -> tuple[np.ndarray, np.ndarray]:
    """Online GPUs: 1 all day, all 8 from `busy_from` (fraction of the day) to the end of each day."""
    t = np.arange(NOW - 7 * DAY, NOW, 10.0)
    v = np.where((t % DAY) / DAY >= busy_from, 8.0, 1.0)
    return t, v


def make_store(clock: Clock) -> ClusterStore:
    store = ClusterStore(settings=SETTINGS, clock=clock, stale_after_seconds=60.0)
    store.replace_all(
        nodes=[gpu_node("short"), gpu_node("long"), gpu_node("t4", gpu_type="T4")],
        pods=[gpu_pod("web-0", gpus=1, node="short", workload="online"),
              gpu_pod("web-1", gpus=1, node="long", workload="online")],
    )
    store.set_history({"short": history(0.1), "long": history(0.9), "t4": history(0.1)})  # windows: 60 s, 540 s, 60 s
    return store


def run(test: Callable[[TestClient, ClusterStore, CollectorRegistry, Clock], Awaitable[None]]) -> None:
    async def main() -> None:
        clock = Clock(NOW)
        store = make_store(clock)
        registry = CollectorRegistry()
        service = ExtenderService(store=store, metrics=ExtenderMetrics.create(registry), settings=DecisionSettings())
        async with TestClient(TestServer(make_app(service=service, registry=registry))) as client:
            await test(client, store, registry, clock)

    asyncio.run(main())


async def post(client: TestClient, verb: str, body: Any) -> Any:
    resp = await client.post(f"/{verb}", data=json.dumps(body), headers={"Content-Type": "application/json"})
    assert resp.status == 200
    return await resp.json()


def test_filter_node_cache_capable_with_reasons() -> None:
    async def t(client: TestClient, store: ClusterStore, reg: CollectorRegistry, clock: Clock) -> None:
        body = {"Pod": gpu_pod("train-0", phase="Pending", predicted=PRED), "NodeNames": ["short", "long", "t4"]}
        res = await post(client, "filter", body)
        assert res["NodeNames"] == ["long"]
        assert res["FailedNodes"]["short"].startswith("window ends within 1m, job needs ~3m (p90 x1.15)")
        assert res["FailedNodes"]["t4"].endswith("(p90 x1.15, slowest known GPU type)")
        assert res["Error"] == ""
        assert reg.get_sample_value("offpeak_extender_filtered_out_total", {"reason": "window_too_short"}) == 2.0

    run(t)


def test_unannotated_pod_passes_everything_with_neutral_scores() -> None:
    async def t(client: TestClient, store: ClusterStore, reg: CollectorRegistry, clock: Clock) -> None:
        body = {"Pod": gpu_pod("web-9", workload="online", phase="Pending"), "NodeNames": ["short", "long", "new"]}
        res = await post(client, "filter", body)
        assert res["NodeNames"] == ["short", "long", "new"] and res["FailedNodes"] == {}
        scores = await post(client, "prioritize", body)
        assert {s["Score"] for s in scores} == {0}

    run(t)


def test_prioritize_scores_and_full_node_objects() -> None:
    async def t(client: TestClient, store: ClusterStore, reg: CollectorRegistry, clock: Clock) -> None:
        body = {"Pod": gpu_pod("train-0", phase="Pending", predicted=PRED),
                "Nodes": {"items": [gpu_node("short"), gpu_node("long")]}}
        scores = await post(client, "prioritize", body)
        assert [s["Host"] for s in scores] == ["short", "long"]
        assert scores[0]["Score"] == 0 and 1 <= scores[1]["Score"] <= 10
        res = await post(client, "filter", body)
        assert [n["metadata"]["name"] for n in res["Nodes"]["items"]] == ["long"] and res["NodeNames"] is None

    run(t)


def test_online_pod_arriving_closes_window_via_live_usage() -> None:
    async def t(client: TestClient, store: ClusterStore, reg: CollectorRegistry, clock: Clock) -> None:
        times, online = history(0.9)  # its last minute of samples: the 1 online GPU its pods hold (the day turned)
        store.set_history({"short": history(0.1), "long": (times, np.where(times >= NOW - 60, 1.0, online)),
                           "t4": history(0.1)})
        store.upsert_pod(gpu_pod("web-2", gpus=6, node="long", workload="online"))  # online surge, not forecast
        body = {"Pod": gpu_pod("train-0", phase="Pending", predicted=PRED), "NodeNames": ["long"]}
        res = await post(client, "filter", body)
        assert res["NodeNames"] == []
        assert res["FailedNodes"]["long"].startswith("no idle window for 1 GPU(s) now")
        store.delete_pod(gpu_pod("web-2", gpus=6, node="long", workload="online"))
        assert (await post(client, "filter", body))["NodeNames"] == ["long"]

    run(t)


def test_stale_history_degrades_to_fits_now_and_sets_gauge() -> None:
    async def t(client: TestClient, store: ClusterStore, reg: CollectorRegistry, clock: Clock) -> None:
        clock.t = NOW + 120  # older than stale_after_seconds: forecasts no longer trusted
        body = {"Pod": gpu_pod("train-0", phase="Pending", predicted=PRED), "NodeNames": ["short", "long"]}
        assert (await post(client, "filter", body))["NodeNames"] == ["short", "long"]
        metrics = await (await client.get("/metrics")).text()
        assert "offpeak_extender_data_stale 1.0" in metrics
        assert 'offpeak_extender_decision_seconds_count{verb="filter"} 1.0' in metrics
        health = await (await client.get("/healthz")).json()
        assert health["ok"] and health["data_stale"]

    run(t)


def test_bad_json_returns_error_field() -> None:
    async def t(client: TestClient, store: ClusterStore, reg: CollectorRegistry, clock: Clock) -> None:
        resp = await client.post("/filter", data="{nope")
        res = await resp.json()
        assert resp.status == 200 and "not JSON" in res["Error"]
        res = await post(client, "filter", {"NodeNames": ["a"]})
        assert "Pod is missing" in res["Error"]
        assert await post(client, "prioritize", {"nothing": 1}) == []

    run(t)


def test_windows_debug_endpoint() -> None:
    async def t(client: TestClient, store: ClusterStore, reg: CollectorRegistry, clock: Clock) -> None:
        res = await (await client.get("/windows?node=short&node=nope")).json()
        assert res["unknown"] == ["nope"] and [n["name"] for n in res["nodes"]] == ["short"]
        [w] = [w for w in res["nodes"][0]["windows"] if w["free_gpus"] == 7]
        assert w["end"] == NOW + 60 and w["end_certain"] is False  # a forecast end: it may be outlasted

    run(t)
