"""`offpeak extender` and `offpeak evictor` as real processes against a minimal fake Kubernetes API server."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from .k8s_objects import gpu_node, gpu_pod

PRED = {"A100-SXM4-40GB": {"p50": 100.0, "p90": 120.0}}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class FakeApi:
    """Lists/watches nodes and pods; records evictions, events and patches."""

    def __init__(self) -> None:
        self.nodes = [gpu_node("n1", gpus=4), gpu_node("n2", gpus=4)]
        online = gpu_pod("api-0", gpus=3, workload="online", phase="Pending", namespace="web")
        online["spec"]["nodeSelector"] = {"kubernetes.io/hostname": "n1"}
        online["status"]["conditions"] = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]
        self.pods = [gpu_pod("web-0", gpus=1, node="n1", workload="online"),
                     gpu_pod("resnet-0", gpus=3, node="n1", checkpointing=True), online]
        self.calls: list[tuple[str, str, Any]] = []

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/api/v1/nodes", self.list_("NodeList", lambda: self.nodes))
        app.router.add_get("/api/v1/pods", self.list_("PodList", lambda: self.pods))
        app.router.add_patch("/api/v1/namespaces/{ns}/pods/{name}", self.record("patch"))
        app.router.add_post("/api/v1/namespaces/{ns}/pods/{name}/eviction", self.record("evict"))
        app.router.add_post("/api/v1/namespaces/{ns}/events", self.record("event"))
        app.router.add_get("/apis/offpeak.io/v1alpha1/namespaces/{ns}/trainingjobs/{name}", self.trainingjob)
        app.router.add_get("/prometheus/api/v1/query_range", self.query_range)
        return app

    async def query_range(self, request: web.Request) -> web.Response:
        """Prometheus: node n2 has had all 4 GPUs busy with online work at every step of the history."""
        self.calls.append(("query_range", "", dict(request.query)))
        start, end, step = (float(request.query[k]) for k in ("start", "end", "step"))
        values = [[start + i * step, "4"] for i in range(int((end - start) // step) + 1)]
        return web.json_response({"status": "success", "data": {"resultType": "matrix", "result": [
            {"metric": {"node": "n2"}, "values": values}]}})

    def list_(self, kind: str, items: Any) -> Any:
        async def handler(request: web.Request) -> web.StreamResponse:
            if request.query.get("watch") in ("true", "True", "1"):
                resp = web.StreamResponse()
                await resp.prepare(request)
                await asyncio.sleep(min(float(request.query.get("timeoutSeconds", "5")), 5.0))
                return resp
            return web.json_response({"kind": kind, "apiVersion": "v1", "metadata": {"resourceVersion": "1"},
                                      "items": items()})
        return handler

    def record(self, verb: str) -> Any:
        async def handler(request: web.Request) -> web.Response:
            body = await request.json()
            self.calls.append((verb, request.match_info["name"] if "name" in request.match_info else "", body))
            return web.json_response({**body, "metadata": {**body.get("metadata", {}), "name": "x"}}, status=201)
        return handler

    async def trainingjob(self, request: web.Request) -> web.Response:
        return web.json_response({"apiVersion": "offpeak.io/v1alpha1", "kind": "TrainingJob",
                                  "metadata": {"name": request.match_info["name"], "uid": "tj-1"}})


@pytest.fixture()
def fake_api(tmp_path: Path) -> Iterator[tuple[FakeApi, Path]]:
    """The fake API on its own event loop thread, and a kubeconfig pointing at it."""
    api = FakeApi()
    port = free_port()
    loop = asyncio.new_event_loop()
    runner = web.AppRunner(api.app())
    loop.run_until_complete(runner.setup())
    loop.run_until_complete(web.TCPSite(runner, "127.0.0.1", port).start())
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "fake",
        "clusters": [{"name": "fake", "cluster": {"server": f"http://127.0.0.1:{port}"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "u"}}],
    }))
    yield api, kubeconfig
    asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(timeout=10)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(timeout=5)


def start(args: list[str], log: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    with log.open("wb") as out:
        return subprocess.Popen([sys.executable, "-m", "offpeak.cli", *args], env=env, stdout=out,
                                stderr=subprocess.STDOUT)


def wait_json(url: str, ok: Any, timeout: float = 120.0) -> Any:  # a wait, not a timing check
    deadline = time.time() + timeout
    last: Any = None
    while time.time() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                last = json.load(r)
                if ok(last):
                    return last
        except OSError:
            pass
        time.sleep(0.3)
    raise AssertionError(f"{url} never became ready: {last}")


def post(url: str, body: Any) -> Any:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=5) as r:
        return json.load(r)


@pytest.mark.slow
def test_extender_process_filters_with_its_informer_cache(fake_api: tuple[FakeApi, Path]) -> None:
    api, kubeconfig = fake_api
    port = free_port()
    server = json.loads(kubeconfig.read_text())["clusters"][0]["cluster"]["server"]
    proc = start(["extender", "--port", str(port), "--kubeconfig", str(kubeconfig), "--season-seconds", "600",
                  "--step-seconds", "6", "--refresh-seconds", "1", "--prometheus-url", f"{server}/prometheus"],
                 kubeconfig.with_name("extender.log"))
    try:
        base = f"http://127.0.0.1:{port}"
        wait_json(f"{base}/healthz", lambda h: h["synced"] and not h["data_stale"])
        body = {"Pod": gpu_pod("train-0", gpus=2, phase="Pending", predicted=PRED), "NodeNames": ["n1", "n2"]}
        res = post(f"{base}/filter", body)
        assert res["NodeNames"] == []
        assert res["FailedNodes"]["n1"] == "needs 2 GPU(s), 0 of 4 free now"
        # n2 is free now (no pods) but Prometheus history says online work fills it all day: no real window
        assert res["FailedNodes"]["n2"].startswith("window ends within "), res["FailedNodes"]["n2"]
        q = next(c[2] for c in api.calls if c[0] == "query_range")
        assert q["query"] == "max by (node) (offpeak_node_online_gpus)" and q["step"] == "6"
        blind = {"Pod": gpu_pod("train-1", gpus=2, phase="Pending", predicted=None), "NodeNames": ["n1", "n2"]}
        assert post(f"{base}/filter", blind)["NodeNames"] == ["n1", "n2"]  # unannotated: pass-through
        scores = post(f"{base}/prioritize", body)
        assert scores == [{"Host": "n1", "Score": 0}, {"Host": "n2", "Score": 0}]
        with urllib.request.urlopen(f"{base}/metrics", timeout=5) as r:
            assert b'offpeak_extender_decision_seconds_count{verb="filter"} 2.0' in r.read()
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@pytest.mark.slow
def test_extender_process_keeps_decisions_on_loopback_and_probes_on_the_metrics_port(
        fake_api: tuple[FakeApi, Path]) -> None:
    _, kubeconfig = fake_api
    port, probes = free_port(), free_port()
    proc = start(["extender", "--host", "127.0.0.1", "--port", str(port), "--metrics-host", "127.0.0.1",
                  "--metrics-port", str(probes), "--kubeconfig", str(kubeconfig), "--season-seconds", "600",
                  "--step-seconds", "6", "--refresh-seconds", "1"], kubeconfig.with_name("extender-probes.log"))
    try:
        ready = wait_json(f"http://127.0.0.1:{probes}/readyz", lambda r: r["ready"])
        assert ready["synced"]
        with urllib.request.urlopen(f"http://127.0.0.1:{probes}/metrics", timeout=5) as r:
            assert b"offpeak_extender_requests_total" in r.read()
        body = {"Pod": gpu_pod("train-0", gpus=2, phase="Pending", predicted=PRED), "NodeNames": ["n1", "n2"]}
        assert "n1" in post(f"http://127.0.0.1:{port}/filter", body)["FailedNodes"]
        with pytest.raises(urllib.error.HTTPError) as refused:  # the probe port answers no decisions
            post(f"http://127.0.0.1:{probes}/filter", body)
        assert refused.value.code in (404, 405)
    finally:
        proc.terminate()
        assert proc.wait(timeout=10) == 0  # SIGTERM: a clean stop


@pytest.mark.slow
def test_evictor_process_evicts_for_unschedulable_online_pod(fake_api: tuple[FakeApi, Path]) -> None:
    api, kubeconfig = fake_api
    port = free_port()
    proc = start(["evictor", "--host", "127.0.0.1", "--metrics-port", str(port), "--kubeconfig", str(kubeconfig),
                  "--grace-seconds", "5", "--interval-seconds", "0.5"], kubeconfig.with_name("evictor.log"))
    try:
        wait_json(f"http://127.0.0.1:{port}/healthz", lambda h: h["ok"] and h["synced"])
        deadline = time.time() + 20
        while time.time() < deadline and not any(c[0] == "evict" for c in api.calls):
            time.sleep(0.2)
        verbs = [(c[0], c[1]) for c in api.calls]
        assert verbs[:3] == [("patch", "resnet-0"), ("event", ""), ("evict", "resnet-0")]
        patch, event, evict = (c[2] for c in api.calls[:3])
        assert "web/api-0" in patch["metadata"]["annotations"]["offpeak.io/eviction-reason"]
        assert event["involvedObject"]["kind"] == "TrainingJob" and event["involvedObject"]["uid"] == "tj-1"
        assert evict["deleteOptions"]["gracePeriodSeconds"] == 5
        time.sleep(1.5)
        assert sum(1 for c in api.calls if c[0] == "evict") == 1  # remembered as releasing: not evicted twice
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
            assert b'offpeak_evictions_total{reason="online-pod-pending"} 1.0' in r.read()
    finally:
        proc.terminate()
        proc.wait(timeout=10)
