"""The extender under hostile or unlucky input: body limits, the decision deadline, readiness, unknown nodes."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer
from prometheus_client import CollectorRegistry

from offpeak_core.model import NodeView
from offpeak_extender.metrics import ExtenderMetrics
from offpeak_extender.server import ServerSettings, make_app
from offpeak_extender.service import DecisionSettings, ExtenderService
from offpeak_extender.store import ClusterStore
from offpeak_extender.wire import MAX_NODES, PREDICTED_ANNOTATION

from .k8s_objects import gpu_node, gpu_pod
from .test_http import NOW, PRED, SETTINGS, Clock, make_store, post, run

MANAGED_POD = gpu_pod("train-0", phase="Pending", predicted=PRED)


def requests_total(reg: CollectorRegistry, verb: str, outcome: str) -> float | None:
    return reg.get_sample_value("offpeak_extender_requests_total", {"verb": verb, "outcome": outcome})


def serve(store: ClusterStore, settings: ServerSettings,
          test: Callable[[TestClient, CollectorRegistry], Awaitable[None]]) -> None:
    async def main() -> None:
        registry = CollectorRegistry()
        service = ExtenderService(store=store, metrics=ExtenderMetrics.create(registry), settings=DecisionSettings())
        async with TestClient(TestServer(make_app(service=service, registry=registry, settings=settings))) as client:
            await test(client, registry)

    asyncio.run(main())


def test_body_over_the_limit_is_refused_with_413_and_a_reason() -> None:
    # 1M node names (~15 MB): the request that used to stall the extender for 6.7 s
    body = json.dumps({"Pod": MANAGED_POD, "NodeNames": [f"node-{i:06d}" for i in range(1_000_000)]}).encode()

    async def t(client: TestClient, reg: CollectorRegistry) -> None:
        resp = await client.post("/filter", data=body)
        assert resp.status == 413
        assert "limit of /filter" in (await resp.json())["Error"]
        assert requests_total(reg, "filter", "too-large") == 1

        async def chunks() -> AsyncIterator[bytes]:  # no Content-Length: the limit holds while streaming
            for i in range(0, len(body), 1 << 20):
                yield body[i:i + (1 << 20)]

        resp = await client.post("/prioritize", data=chunks())
        assert resp.status == 413
        assert requests_total(reg, "prioritize", "too-large") == 1
        small = {"Pod": MANAGED_POD, "NodeNames": ["long"]}
        assert (await (await client.post("/filter", data=json.dumps(small))).json())["NodeNames"] == ["long"]

    serve(make_store(Clock(NOW)), ServerSettings(), t)


def test_more_node_names_than_any_cluster_is_an_error_not_work() -> None:
    body = json.dumps({"Pod": MANAGED_POD, "NodeNames": ["n"] * (MAX_NODES + 1)})  # 500 kB: under the byte limit

    async def t(client: TestClient, reg: CollectorRegistry) -> None:
        resp = await client.post("/filter", data=body)
        assert resp.status == 200 and "more than 100000" in (await resp.json())["Error"]
        assert await (await client.post("/prioritize", data=body)).json() == []

    serve(make_store(Clock(NOW)), ServerSettings(), t)


class SlowStore(ClusterStore):
    """A store whose view lookup blocks (like a decision over a huge request) until released."""

    def __init__(self, release: threading.Event, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.release = release
        self.slow = False

    def views(self, names: Sequence[str], *, now: float | None = None) -> tuple[list[NodeView], list[str]]:
        if self.slow:
            self.release.wait(10)
        return super().views(names, now=now)


def test_slow_decision_fails_open_at_the_deadline_while_healthz_answers() -> None:
    release = threading.Event()
    clock = Clock(NOW)
    store = SlowStore(release, settings=SETTINGS, clock=clock, stale_after_seconds=60.0)
    store.replace_all(nodes=[gpu_node("short"), gpu_node("long")], pods=[])
    store.slow = True
    body = json.dumps({"Pod": MANAGED_POD, "NodeNames": ["short", "long", "new"]})

    async def t(client: TestClient, reg: CollectorRegistry) -> None:
        try:
            started = time.monotonic()
            pending = asyncio.ensure_future(client.post("/filter", data=body))
            await asyncio.sleep(0.05)
            health = await asyncio.wait_for(client.get("/healthz"), 2.0)  # the loop is free meanwhile
            assert health.status == 200 and not pending.done()
            resp = await asyncio.wait_for(pending, 5.0)
            assert time.monotonic() - started < 5.0
            res = await resp.json()
            assert resp.status == 200 and res["NodeNames"] == ["short", "long", "new"] and res["FailedNodes"] == {}
            assert res["Error"] == ""
            scores = await (await asyncio.wait_for(client.post("/prioritize", data=body), 5.0)).json()
            assert scores == [{"Host": n, "Score": 0} for n in ("short", "long", "new")]
            assert requests_total(reg, "filter", "deadline") == 1
            assert requests_total(reg, "prioritize", "deadline") == 1
        finally:
            release.set()

    serve(store, ServerSettings(deadline_seconds=0.3), t)


class BrokenStore(ClusterStore):
    broken = False

    def views(self, names: Sequence[str], *, now: float | None = None) -> tuple[list[NodeView], list[str]]:
        if self.broken:
            raise RuntimeError("a bug")
        return super().views(names, now=now)


def test_a_bug_in_the_decision_path_fails_open_not_500() -> None:
    store = BrokenStore(settings=SETTINGS, clock=Clock(NOW))
    store.replace_all(nodes=[gpu_node("a")], pods=[])
    store.broken = True
    body = json.dumps({"Pod": MANAGED_POD, "NodeNames": ["a"]})

    async def t(client: TestClient, reg: CollectorRegistry) -> None:
        resp = await client.post("/filter", data=body)
        assert resp.status == 200 and (await resp.json())["NodeNames"] == ["a"]
        assert requests_total(reg, "filter", "internal-error") == 1

    serve(store, ServerSettings(), t)


def test_readyz_is_503_until_the_informer_synced_and_healthz_stays_200() -> None:
    store = ClusterStore(settings=SETTINGS, clock=Clock(NOW))

    async def t(client: TestClient, reg: CollectorRegistry) -> None:
        assert (await client.get("/healthz")).status == 200
        resp = await client.get("/readyz")
        assert resp.status == 503 and (await resp.json())["synced"] is False
        store.replace_all(nodes=[gpu_node("a")])
        assert (await client.get("/readyz")).status == 503  # nodes listed, pods not yet
        store.replace_all(pods=[])
        resp = await client.get("/readyz")
        assert resp.status == 200 and (await resp.json())["ready"] is True

    serve(store, ServerSettings(), t)


def test_unknown_nodes_are_never_preferred() -> None:
    async def t(client: TestClient, reg: CollectorRegistry) -> None:
        body = {"Pod": MANAGED_POD, "NodeNames": ["long", "not-in-cache", "short"]}
        scores = {s["Host"]: s["Score"] for s in await (await client.post("/prioritize", data=json.dumps(body))).json()}
        assert scores["long"] >= 1  # fits: preferred
        assert scores["not-in-cache"] == 0  # unknown: lowest, like a node that does not fit
        assert scores["short"] == 0
        full = {"Pod": MANAGED_POD, "Nodes": {"items": [gpu_node("long"), gpu_node("not-in-cache", gpus=2)]}}
        scores = {s["Host"]: s["Score"] for s in await (await client.post("/prioritize", data=json.dumps(full))).json()}
        assert scores == {"long": scores["long"], "not-in-cache": 0} and scores["long"] >= 1
        res = await (await client.post("/filter", data=json.dumps(body))).json()
        assert res["NodeNames"] == ["long", "not-in-cache"]  # unknown still passes fits-now (documented)

    serve(make_store(Clock(NOW)), ServerSettings(), t)


BIG = "1" + "0" * 5000  # past Python's 4,300-digit limit for int(str): json.loads raised a ValueError on it


@pytest.mark.parametrize("annotation", ['{"A100-SXM4-40GB": {"p50": %s}}' % BIG,
                                        '{"A100-SXM4-40GB": {"p50": 3, "p90": %s}}' % BIG, "{not json"])
@pytest.mark.parametrize("names", [True, False])
def test_an_unreadable_prediction_is_judged_runtime_blind_and_says_so(annotation: str, names: bool) -> None:
    """docs/extender.md: a malformed annotation schedules the pod runtime-blind (fits now only). The call is answered
    (no Error, the whole node list judged) and the nodes turned down say why the pod was judged without its run time."""
    async def t(client: TestClient, store: ClusterStore, reg: CollectorRegistry, clock: Clock) -> None:
        pod = gpu_pod("train-0", phase="Pending", gpus=8)
        pod["metadata"]["annotations"][PREDICTED_ANNOTATION] = annotation
        nodes = {"NodeNames": ["short", "long", "t4"]} if names else \
            {"Nodes": {"items": [gpu_node("short"), gpu_node("long"), gpu_node("t4", gpu_type="T4")]}}
        res = await post(client, "filter", {"Pod": pod, **nodes})
        assert res["Error"] == ""
        passed = res["NodeNames"] if names else [n["metadata"]["name"] for n in res["Nodes"]["items"]]
        assert passed == ["t4"]  # the only node with 8 GPUs free now; no window judged
        assert set(res["FailedNodes"]) == {"short", "long"}
        for reason in res["FailedNodes"].values():
            assert reason.startswith("needs 8 GPU(s), 7 of 8 free now") and "judged runtime-blind" in reason
            assert PREDICTED_ANNOTATION in reason and "not JSON" in reason
        scores = await post(client, "prioritize", {"Pod": pod, **nodes})
        assert [s["Host"] for s in scores] == ["short", "long", "t4"]

    run(t)
