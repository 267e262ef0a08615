"""Gang placement through the extender's service: all workers get reserved places in fitting windows, or none."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import numpy as np
import pytest
from aiohttp.test_utils import TestClient, TestServer
from prometheus_client import CollectorRegistry

from offpeak.cliargs import Parser
from offpeak_core.forecast import ForecastSettings
from offpeak_core.gangs import GangKey
from offpeak_extender.app import ExtenderConfig
from offpeak_extender.cli import register
from offpeak_extender.gangs import GangSettings
from offpeak_extender.metrics import ExtenderMetrics
from offpeak_extender.server import make_app
from offpeak_extender.service import DecisionSettings, ExtenderService
from offpeak_extender.store import ClusterStore, pod_info
from offpeak_extender.wire import GANG_SIZE_ANNOTATION, WireError, parse_extender_args, parse_gang

from support.clock import Clock

from .k8s_objects import gpu_node, gpu_pod

DAY = 600.0
SETTINGS = ForecastSettings(season_seconds=DAY, step_seconds=10.0, horizon_seconds=DAY, history_seconds=7 * DAY)
NOW = 70 * DAY
PRED = {"A100-SXM4-40GB": {"p50": 100.0, "p90": 120.0}}  # needs ~138 s of window
NODES = ["a", "b", "c"]


def history(busy_from: float) -> tuple[np.ndarray, np.ndarray]:
    """No online GPUs until `busy_from` (fraction of the day), all 8 after."""
    t = np.arange(NOW - 7 * DAY, NOW, 10.0)
    return t, np.where((t % DAY) / DAY >= busy_from, 8.0, 0.0)


def worker(index: int, *, size: int = 2, job: str = "bert", attempt: str = "0", gpus: int = 8,
           node: str | None = None) -> dict[str, Any]:
    pod = gpu_pod(f"{job}-a{attempt}-w{index}", gpus=gpus, node=node, predicted=PRED,
                  phase="Running" if node else "Pending")
    pod["metadata"]["labels"].update({"offpeak.io/trainingjob": job, "offpeak.io/attempt": attempt,
                                      "offpeak.io/worker": str(index)})
    pod["metadata"]["annotations"][GANG_SIZE_ANNOTATION] = str(size)
    return pod


def lone(name: str = "solo-0", gpus: int = 8) -> dict[str, Any]:
    return gpu_pod(name, gpus=gpus, predicted=PRED, phase="Pending")


class Cluster:
    """A store with three 8-GPU nodes (a and b: long windows, c: busy in a minute), a service and its metrics."""

    def __init__(self, timeout: float = 60.0) -> None:
        self.clock = Clock(NOW)
        self.store = ClusterStore(settings=SETTINGS, clock=self.clock, stale_after_seconds=600.0)
        self.store.replace_all(nodes=[gpu_node(n) for n in NODES], pods=[])
        self.store.set_history({"a": history(0.9), "b": history(0.9), "c": history(0.1)})
        self.registry = CollectorRegistry()
        self.service = ExtenderService(store=self.store, metrics=ExtenderMetrics.create(self.registry),
                                       settings=DecisionSettings(), gangs=GangSettings(timeout_seconds=timeout))

    def add(self, *pods: dict[str, Any]) -> None:
        for pod in pods:
            self.store.upsert_pod(pod)

    def filter(self, pod: dict[str, Any]) -> tuple[list[str], dict[str, str]]:
        self.store.upsert_pod(pod)  # the informer sees a pod before (or about when) the scheduler asks
        res = self.service.filter({"Pod": pod, "NodeNames": NODES})
        assert res["Error"] == ""
        return list(res["NodeNames"] or []), dict(res["FailedNodes"])

    def metric(self, name: str, **labels: str) -> float | None:
        return self.registry.get_sample_value(name, labels)


def test_with_one_fitting_node_no_worker_of_a_two_worker_gang_is_admitted() -> None:
    c = Cluster()
    c.add(gpu_pod("web-0", gpus=8, node="b", workload="online"))  # b is taken now: only a fits
    for i in (0, 1, 0):
        passed, failed = c.filter(worker(i))
        assert passed == []
        assert failed["a"] == "gang of 2 worker(s) x 8 GPU(s) needs 2 place(s) in fitting windows; 1 found on 1 node(s)"
        assert failed["b"].startswith("needs 8 GPU(s), 0 of 8 free now")
        assert failed["c"].startswith("window ends within")
    assert c.metric("offpeak_extender_filtered_out_total", reason="gang_no_room") == 3
    assert c.metric("offpeak_extender_gang_reservations_total", outcome="created") == 0
    assert c.service.gangs.table.withheld() == {}  # nothing held back for a gang that does not fit
    assert c.filter(lone())[0] == ["a"]


def test_with_two_fitting_nodes_each_worker_gets_its_own_reserved_place() -> None:
    c = Cluster()
    passed0, failed0 = c.filter(worker(0))
    assert len(passed0) == 1 and passed0[0] in {"a", "b"}
    assert c.metric("offpeak_extender_gang_reservations_total", outcome="created") == 1
    assert c.metric("offpeak_extender_gang_reservations_active") == 1
    assert c.metric("offpeak_extender_gang_reserved_gpus") == 16
    passed1, failed1 = c.filter(worker(1))
    assert len(passed1) == 1 and {passed0[0], passed1[0]} == {"a", "b"}
    assert failed1[passed0[0]] == f"gang ml/bert#0: this worker's reserved place is on {passed1[0]}"
    assert c.filter(worker(0))[0] == passed0  # a retried worker keeps its place
    # Workers are bound one after the other: the reservation ends with the last one.
    c.add(worker(0, node=passed0[0]))
    assert c.filter(lone())[0] == []  # the other place is still held for worker 1
    assert c.metric("offpeak_extender_gang_reserved_gpus") == 8
    c.add(worker(1, node=passed1[0]))
    c.service.gangs.sweep(c.clock())
    assert c.metric("offpeak_extender_gang_reservations_total", outcome="complete") == 1
    assert c.metric("offpeak_extender_gang_reservations_active") == 0
    assert c.metric("offpeak_extender_gang_reserved_gpus") == 0


def test_reserved_gpus_are_not_free_for_other_pods_or_other_gangs() -> None:
    c = Cluster()
    c.filter(worker(0))
    passed, failed = c.filter(lone())
    assert passed == []
    assert failed["a"] == "needs 8 GPU(s), 0 of 8 free now; 8 GPU(s) reserved for a gang"
    other_passed, other_failed = c.filter(worker(0, job="gpt"))
    assert other_passed == []
    assert other_failed["a"] == other_failed["b"] == "needs 8 GPU(s), 0 of 8 free now; 8 GPU(s) reserved for a gang"
    assert c.filter(lone(gpus=0))[0] == ["a", "b"]  # a pod without GPUs is not held back


def test_several_workers_share_a_node_whose_window_has_the_gpus() -> None:
    c = Cluster()
    c.add(gpu_pod("web-0", gpus=8, node="b", workload="online"))
    nodes = [c.filter(worker(i, gpus=4))[0] for i in (0, 1)]
    assert nodes == [["a"], ["a"]]
    assert c.filter(lone(gpus=1))[0] == []  # all 8 GPUs of a are held for the two 4-GPU workers


def test_partial_reservation_expires_and_frees_the_gpus() -> None:
    c = Cluster(timeout=30.0)
    c.filter(worker(0))
    c.clock.t += 29
    assert c.filter(lone())[0] == []
    c.clock.t += 2
    assert c.filter(lone())[0] == ["a", "b"]
    assert c.metric("offpeak_extender_gang_reservations_total", outcome="expired") == 1
    assert c.metric("offpeak_extender_gang_reservations_active") == 0
    assert len(c.filter(worker(1))[0]) == 1  # a worker arriving later reserves afresh
    assert c.metric("offpeak_extender_gang_reservations_total", outcome="created") == 2


def test_after_a_partial_binding_the_rest_of_the_gang_is_planned_alone() -> None:
    c = Cluster(timeout=30.0)
    first = c.filter(worker(0))[0][0]
    c.add(worker(0, node=first))  # bound, then its sibling never came in time
    c.clock.t += 31
    passed, _ = c.filter(worker(1))
    assert len(passed) == 1 and passed[0] != first  # one place for the one remaining worker, not two
    assert c.service.gangs.table.get(GangKey("ml", "bert", "0")).size == 1  # type: ignore[union-attr]


def test_reservation_ends_when_the_gangs_pods_are_deleted() -> None:
    c = Cluster()
    c.filter(worker(0))
    c.filter(worker(1))
    c.store.delete_pod(worker(0))
    c.store.delete_pod(worker(1))
    assert c.filter(lone())[0] == ["a", "b"]
    assert c.metric("offpeak_extender_gang_reservations_total", outcome="gone") == 1


def test_gangs_are_keyed_by_attempt() -> None:
    c = Cluster()
    c.filter(worker(0, attempt="0"))
    passed, failed = c.filter(worker(0, attempt="1"))
    assert passed == [] and failed["a"].endswith("8 GPU(s) reserved for a gang")  # attempt 0 holds both nodes


def test_a_gang_size_of_one_or_a_bad_annotation_places_the_pod_alone() -> None:
    c = Cluster()
    assert c.filter(worker(0, size=1))[0] == ["a", "b"]
    bad = worker(0, job="odd")
    bad["metadata"]["annotations"][GANG_SIZE_ANNOTATION] = "two"
    assert c.filter(bad)[0] == ["a", "b"]
    assert len(c.service.gangs.table) == 0


def test_parse_gang_reads_key_and_size_and_refuses_nonsense() -> None:
    meta = worker(1, size=4, attempt="3")["metadata"]
    gang = parse_gang(meta)
    assert gang is not None and gang.size == 4 and gang.key == GangKey("ml", "bert", "3")
    args = parse_extender_args({"Pod": worker(1), "NodeNames": ["a"]})
    assert args.gang is not None and args.gang.key == GangKey("ml", "bert", "0") and args.gang_error is None
    assert pod_info(worker(1, node="a")).gang == GangKey("ml", "bert", "0")
    for text in ("0", "-2", "1.5", "", "100000"):
        meta["annotations"][GANG_SIZE_ANNOTATION] = text
        with pytest.raises(WireError):
            parse_gang(meta)
    meta["annotations"][GANG_SIZE_ANNOTATION] = "2"
    del meta["labels"]["offpeak.io/trainingjob"]
    with pytest.raises(WireError, match="offpeak.io/trainingjob label .* or offpeak.io/gang"):
        parse_gang(meta)
    unmanaged = worker(0)
    del unmanaged["metadata"]["annotations"]["offpeak.io/predicted-job-seconds"]
    assert parse_extender_args({"Pod": unmanaged, "NodeNames": ["a"]}).gang is None  # online pods never wait


def replica(name: str, *, gang: str = "ddp", node: str | None = None) -> dict[str, Any]:
    """A PyTorchJob replica as training-operator makes it from a template the operator annotated: no TrainingJob
    labels, the gang named by `offpeak.io/gang`."""
    pod = gpu_pod(name, gpus=8, node=node, predicted=PRED, phase="Running" if node else "Pending")
    pod["metadata"]["labels"]["offpeak.io/gang"] = gang
    pod["metadata"]["annotations"][GANG_SIZE_ANNOTATION] = "2"
    return pod


def test_a_controller_made_gang_is_keyed_by_its_gang_label_and_placed_all_or_none() -> None:
    assert pod_info(replica("ddp-master-0")).gang == GangKey("ml", "gang:ddp", "")  # apart from a TrainingJob ddp
    c = Cluster()
    c.add(gpu_pod("web-0", gpus=8, node="b", workload="online"))  # only a fits: no replica of the two is admitted
    passed, failed = c.filter(replica("ddp-master-0"))
    assert passed == [] and failed["a"].startswith("gang of 2 worker(s) x 8 GPU(s) needs 2 place(s)")
    c.store.delete_pod(gpu_pod("web-0", gpus=8, node="b", workload="online"))
    first, _ = c.filter(replica("ddp-master-0"))
    second, _ = c.filter(replica("ddp-worker-0"))
    assert len(first) == len(second) == 1 and {*first, *second} == {"a", "b"}  # each its own reserved place


def test_over_http_a_scrape_expires_reservations_and_the_reasons_reach_the_scheduler() -> None:
    c = Cluster(timeout=30.0)
    c.add(gpu_pod("web-0", gpus=8, node="b", workload="online"))

    async def main() -> None:
        async with TestClient(TestServer(make_app(service=c.service, registry=c.registry))) as client:
            async def filter_(pod: dict[str, Any]) -> dict[str, Any]:
                c.store.upsert_pod(pod)
                resp = await client.post("/filter", data=json.dumps({"Pod": pod, "NodeNames": NODES}))
                assert resp.status == 200
                return dict(await resp.json())

            res = await filter_(worker(0, gpus=4))
            assert res["NodeNames"] == ["a"]
            assert res["FailedNodes"]["b"] == "gang ml/bert#0: this worker's reserved place is on a"
            text = await (await client.get("/metrics")).text()
            assert "offpeak_extender_gang_reservations_active 1.0" in text
            assert "offpeak_extender_gang_reserved_gpus 8.0" in text
            c.clock.t += 31
            text = await (await client.get("/metrics")).text()  # no filter call needed to end it
            assert "offpeak_extender_gang_reservations_active 0.0" in text
            assert 'offpeak_extender_gang_reservations_total{outcome="expired"} 1.0' in text

    asyncio.run(main())


def test_the_timeout_comes_from_the_command_line_or_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    def config(*argv: str) -> ExtenderConfig:
        parser = Parser()
        register(parser.add_subparsers())
        return ExtenderConfig.from_args(parser.parse_args(["extender", *argv]))

    assert config().gangs.timeout_seconds == 60.0
    assert config("--gang-timeout-seconds", "15").gangs.timeout_seconds == 15.0
    monkeypatch.setenv("OFFPEAK_GANG_TIMEOUT_SECONDS", "120")
    assert config().gangs.timeout_seconds == 120.0
    with pytest.raises(ValueError):
        GangSettings(timeout_seconds=0)


def test_a_running_gang_worker_is_offered_for_eviction_with_its_whole_gangs_gpus() -> None:
    """Evicting one worker stops the gang, so eviction weighs the work on all of its GPUs (`gang_gpus`)."""
    c = Cluster()
    c.add(worker(0, gpus=4, node="a"), worker(1, gpus=4, node="b"), gpu_pod("solo-0", gpus=2, node="a",
                                                                           predicted=PRED, phase="Running"))
    on_a = {p.name: p for p in c.store.offline_pods_on("a", now=NOW)}
    assert set(on_a) == {"bert-a0-w0", "solo-0"}
    assert on_a["bert-a0-w0"].gang_gpus == 8 and on_a["bert-a0-w0"].gpus == 4
    assert on_a["solo-0"].gang_gpus == 0
    c.store.delete_pod(worker(1, gpus=4, node="b"))  # a worker gone: the rest of the gang holds less
    assert {p.name: p.gang_gpus for p in c.store.offline_pods_on("a", now=NOW)}["bert-a0-w0"] == 4
