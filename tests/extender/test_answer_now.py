"""`ExtenderService.answer_now`, the answer given on the event loop: the same bytes as `answer` whenever it gives
one, and None (the worker's job) whenever deciding could rebuild views, plan a gang or wait for the store's lock;
and through the HTTP server, a kept list answered while every worker is busy."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest
from aiohttp.test_utils import TestClient
from prometheus_client import CollectorRegistry

from offpeak_core.gangs import GangKey
from offpeak_core.model import NodeView
from offpeak_extender.server import ServerSettings
from offpeak_extender.store import KEPT_PATCH_NODES, ClusterStore

from .k8s_objects import gpu_node, gpu_pod
from .test_hardening import MANAGED_POD, SlowStore, requests_total, serve
from .test_http import NOW, SETTINGS, Clock
from .test_service_columns import cluster, managed_pod, service

VERBS = ("filter", "prioritize")


def body(pod: dict[str, Any], names: list[str]) -> bytes:
    return json.dumps({"Pod": pod, "NodeNames": names}).encode()


class LaggingInformer(ClusterStore):
    """A store whose informer has not yet rebuilt the views a pod event dropped (while `lag` is set)."""

    lag = False

    def views(self, names: Sequence[str], *, now: float | None = None) -> tuple[list[NodeView], list[str]]:
        if self.lag:
            return [], []
        return super().views(names, now=now)


@pytest.mark.parametrize("seed", range(8))
def test_answer_now_is_the_answer_of_a_fresh_store_once_a_lists_columns_are_kept(seed: int) -> None:
    def build() -> tuple[ClusterStore, np.random.Generator]:
        rng = np.random.default_rng(seed)
        return cluster(rng, int(rng.integers(KEPT_PATCH_NODES + 2, 60)), LaggingInformer), rng

    store, rng = build()
    twin, _ = build()  # the same cluster, whose columns are never kept: the oracle
    svc, _ = service(store)
    known = store.node_names()
    names = [str(n) for n in rng.permutation(known)]
    raw = body(managed_pod(rng), names)

    def oracle(verb: str, raw: bytes) -> bytes:
        twin.cache.arrays.clear()
        return service(twin)[0].answer(verb, raw)

    for verb in VERBS:
        assert svc.answer_now(verb, raw) is None  # nothing kept for this list yet: gathering it is a pass over it
    for verb in VERBS:
        assert svc.answer(verb, raw) == oracle(verb, raw)  # the worker's answer keeps the columns
        assert svc.answer_now(verb, raw) == oracle(verb, raw)
    other = body(managed_pod(rng), names)  # another pod over the same list: the kept columns serve it too
    assert svc.answer_now("filter", other) == oracle("filter", other)

    def start(pod: dict[str, Any]) -> None:
        store.upsert_pod(pod)
        twin.upsert_pod(pod)

    start(gpu_pod("web-new", gpus=8, node=names[0], workload="online"))  # its view rebuilt by the informer
    for verb in VERBS:
        assert svc.answer_now(verb, raw) == oracle(verb, raw)  # one row patched

    store.lag = True  # the next pod event's view is not rebuilt yet: rebuilding it is the worker's job
    start(gpu_pod("web-lag", gpus=1, node=names[1], workload="online"))
    store.lag = False
    assert svc.answer_now("filter", raw) is None
    assert svc.answer("filter", raw) == oracle("filter", raw)
    assert svc.answer_now("prioritize", raw) == oracle("prioritize", raw)

    for i in range(KEPT_PATCH_NODES + 1):  # more nodes changed than a few rows: gathered again by the worker
        start(gpu_pod(f"web-many-{i}", gpus=1, node=names[i], workload="offline"))
    assert svc.answer_now("filter", raw) is None
    assert svc.answer("filter", raw) == oracle("filter", raw)
    assert svc.answer_now("filter", raw) == oracle("filter", raw)


def test_answer_now_leaves_to_the_worker_what_could_wait_or_plan() -> None:
    rng = np.random.default_rng(7)
    store = cluster(rng, 20)
    svc, _ = service(store)
    names = store.node_names()
    raw = body(managed_pod(rng), names)
    svc.answer("filter", raw)
    assert svc.answer_now("filter", raw) is not None

    with store._lock:  # a view or refit being published: never wait for it on the event loop
        assert svc.answer_now("filter", raw) is None

    svc.gangs.table.reserve(GangKey("ml", "job", "1"), places=[names[0]], gpus=1, now=NOW)
    assert svc.answer_now("filter", raw) is None  # GPUs reserved for gangs: the per-node path notes them
    svc.gangs.table = type(svc.gangs.table)()

    gang_pod = managed_pod(rng)
    gang_pod["metadata"]["labels"] = {"offpeak.io/trainingjob": "job", "offpeak.io/attempt": "1",
                                      "offpeak.io/worker": "0"}
    gang_pod["metadata"]["annotations"]["offpeak.io/gang-size"] = "2"
    assert svc.answer_now("filter", body(gang_pod, names)) is None  # a gang's worker may plan the whole gang

    unknown = body(managed_pod(rng), [*names, "node-not-seen"])
    svc.answer("filter", unknown)
    assert svc.answer_now("filter", unknown) is None  # a name the store does not know: the per-node path


@pytest.mark.parametrize("raw", [b"not json", b'{"Pod": 3}', body(gpu_pod("web-0", workload="online"), ["a", "b"])])
def test_refused_and_unmanaged_bodies_are_answered_at_once_as_answer_does(raw: bytes) -> None:
    svc, _ = service(cluster(np.random.default_rng(1), 3))
    for verb in VERBS:
        got = svc.answer_now(verb, raw)
        assert got is not None and got == svc.answer(verb, raw)


def test_a_kept_list_is_answered_on_the_loop_while_every_worker_is_busy() -> None:
    """One worker held by a slow request: a pod over a kept list still gets its real answer at once. With
    `inline_body_bytes=0` the same request waits for the worker, and fails open at the deadline."""

    def run(settings: ServerSettings) -> dict[str, Any]:
        release = threading.Event()
        store = SlowStore(release, settings=SETTINGS, clock=Clock(NOW), stale_after_seconds=60.0)
        store.replace_all(nodes=[gpu_node("big", gpus=8), gpu_node("small", gpus=1)],
                          pods=[gpu_pod("web-0", gpus=1, node="small", workload="online")])
        pod = {**MANAGED_POD, "spec": {**MANAGED_POD["spec"], "containers": [
            {**MANAGED_POD["spec"]["containers"][0],
             "resources": {"limits": {"nvidia.com/gpu": "2"}, "requests": {"cpu": "1"}}}]}}
        kept = body(pod, ["big", "small"])
        got: dict[str, Any] = {}

        async def t(client: TestClient, reg: CollectorRegistry) -> None:
            try:
                first = await (await client.post("/filter", data=kept)).json()  # the worker keeps the columns
                store.slow = True
                slow = asyncio.ensure_future(client.post("/filter", data=body(pod, ["big", "small", "new"])))
                await asyncio.sleep(0.05)  # the only worker now waits in the slow store
                got["answer"] = await asyncio.wait_for(client.post("/filter", data=kept), 2.0)
                got["json"] = await got["answer"].json()
                got["first"] = first
                got["deadline"] = requests_total(reg, "filter", "deadline")
                release.set()
                await slow
            finally:
                release.set()

        serve(store, settings, t)
        return got

    at_once = run(ServerSettings(workers=1, deadline_seconds=1.0))
    assert at_once["first"]["NodeNames"] == ["big"] and "small" in at_once["first"]["FailedNodes"]
    assert at_once["json"] == at_once["first"]  # the real answer, not fail-open
    assert at_once["deadline"] == 0

    queued = run(ServerSettings(workers=1, deadline_seconds=0.3, inline_body_bytes=0))
    assert "no decision within 0.3s" in queued["json"]["Error"]  # fail-open, not parsed: the scheduler skips us
    assert queued["deadline"] == 2  # the slow request and the queued one


def test_inline_body_bytes_must_not_be_negative() -> None:
    with pytest.raises(ValueError, match="inline_body_bytes"):
        ServerSettings(inline_body_bytes=-1)


def test_the_cli_sets_inline_body_bytes_and_refuses_a_negative_one(monkeypatch: pytest.MonkeyPatch,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    from offpeak.cli import main

    from .test_pool_windows import config

    assert config().server.inline_body_bytes == 512 * 1024
    assert config("--inline-body-bytes", "0").server.inline_body_bytes == 0
    monkeypatch.setenv("OFFPEAK_EXTENDER_INLINE_BODY_BYTES", "4096")
    assert config().server.inline_body_bytes == 4096
    assert main(["extender", "--inline-body-bytes", "-1"]) == 2
    assert "--inline-body-bytes must be >= 0" in capsys.readouterr().err
