"""The service's usual filter answer, kept as columns and joined from quoted names (`NamesFilterReply`), and its
prioritize reply from the store's quoted names: the same bytes and metrics as the per-node dicts of the general path
(`GangPlacer.filter_other`, `filter_result`, `encode_filter_result`; `prioritize_arrays`, `encode_priorities`)."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest
from prometheus_client import CollectorRegistry

from offpeak_core.decisions import prioritize_arrays
from offpeak_core.forecast import ForecastSettings
from offpeak_extender.metrics import ExtenderMetrics, count_reason_kinds
from offpeak_extender.service import DecisionSettings, ExtenderService
from offpeak_extender.store import ClusterStore
from offpeak_extender.wire import encode_filter_result, encode_priorities, filter_result, parse_extender_args

from support.clock import Clock

from .k8s_objects import gpu_node, gpu_pod

DAY = 600.0
S = ForecastSettings(season_seconds=DAY, step_seconds=10.0, horizon_seconds=DAY, history_seconds=3 * DAY)
NOW = 100 * DAY
TYPES = ("A100-SXM4-40GB", "H100-SXM5-80GB", "T4", "L4")


def cluster(rng: np.random.Generator, n: int, kind: type[ClusterStore] = ClusterStore) -> ClusterStore:
    """`n` nodes of mixed GPU counts and types, some online and offline pods, seasonal demand with noise."""
    store = kind(settings=S, clock=Clock(NOW), stale_after_seconds=60.0)
    names = [f"node-{i}" for i in range(n)]
    gpus = {name: int(rng.choice([1, 4, 8])) for name in names}
    pods = [gpu_pod(f"p{i}-{j}", gpus=1, node=name, workload=str(rng.choice(["online", "offline"])))
            for i, name in enumerate(names) for j in range(int(rng.integers(0, gpus[name] + 1)))]
    store.replace_all(nodes=[gpu_node(name, gpus=gpus[name], gpu_type=str(rng.choice(TYPES))) for name in names],
                      pods=pods)
    t = np.arange(NOW - 3 * DAY, NOW, S.step_seconds)
    store.set_history({name: (t, np.clip(gpus[name] / 2 * (1 + np.sin(2 * np.pi * (t / DAY + rng.random())))
                                         + rng.normal(0, 0.3, t.size), 0, gpus[name]))
                       for name in names if rng.random() < 0.9}, now=NOW)
    return store


def managed_pod(rng: np.random.Generator) -> dict[str, Any]:
    predicted = {str(t): {"p50": float(rng.uniform(10, 400)), "p90": float(rng.uniform(400, 900))}
                 for t in rng.choice(TYPES, size=int(rng.integers(1, 5)), replace=False)}
    return gpu_pod("train-0", gpus=int(rng.integers(1, 5)), predicted=predicted, phase="Pending")


def service(store: ClusterStore) -> tuple[ExtenderService, CollectorRegistry]:
    registry = CollectorRegistry()
    return ExtenderService(store=store, metrics=ExtenderMetrics.create(registry), settings=DecisionSettings()), registry


def filtered_out(registry: CollectorRegistry) -> dict[str, float]:
    return {s.labels["reason"]: s.value for m in registry.collect() if m.name == "offpeak_extender_filtered_out"
            for s in m.samples if s.name.endswith("_total") and s.value}


@pytest.mark.parametrize("seed", range(12))
def test_filter_and_prioritize_replies_are_the_general_paths_bytes(seed: int) -> None:
    rng = np.random.default_rng(seed)
    store = cluster(rng, int(rng.integers(1, 80)))
    svc, registry = service(store)
    known = store.node_names()
    for _ in range(4):
        names = [str(n) for n in rng.permutation(known)[:int(rng.integers(0, len(known) + 1))]]
        body = {"Pod": managed_pod(rng), "NodeNames": names}
        raw = json.dumps(body).encode()
        before = filtered_out(registry)
        got = svc.answer("filter", raw)
        counted = {k: v - before.get(k, 0) for k, v in filtered_out(registry).items() if v - before.get(k, 0)}

        args = parse_extender_args(body)  # the general path, node by node
        arrays, _ = store.node_arrays(names)
        result = svc.gangs.filter_other(pod=args.pod, views=arrays.views, now=NOW, margin=svc.settings.margin,
                                        arrays=arrays)
        want = filter_result(args=args, passed=result.passed, failed=result.failed)
        assert got == encode_filter_result(want)
        assert svc.filter(body) == want
        assert counted == dict(count_reason_kinds(result.failed.values()))

        passed = json.loads(got)["NodeNames"]
        second = json.dumps({"Pod": body["Pod"], "NodeNames": passed}).encode()
        passed_arrays, _ = store.node_arrays(passed)
        scores = prioritize_arrays(pod=args.pod, nodes=passed_arrays, now=NOW, margin=svc.settings.margin)
        assert svc.answer("prioritize", second) == encode_priorities(scores, passed)


def test_lists_the_columns_cannot_answer_take_the_general_path() -> None:
    rng = np.random.default_rng(99)
    store = cluster(rng, 6)
    svc, _ = service(store)
    pod = managed_pod(rng)
    for names in (["node-0", "node-1", "node-0"], ["node-0", "ghost", "node-2"]):  # twice; unknown to the store
        body = {"Pod": pod, "NodeNames": names}
        reply = json.loads(svc.answer("filter", json.dumps(body).encode()))
        assert reply == svc.filter(body)
        assert set(reply["NodeNames"]) | set(reply["FailedNodes"]) == set(names)
        assert "ghost" not in reply["FailedNodes"]  # unknown names pass (fits now cannot be checked)
        scores = {p["Host"]: p["Score"] for p in json.loads(svc.answer("prioritize", json.dumps(body).encode()))}
        assert list(scores) == list(dict.fromkeys(names)) and scores.get("ghost", 0) == 0
