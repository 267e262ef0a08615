"""Expected-goodput admission in the extender: the ledger is fed from the store's views and live usage, and a
checkpointing pod gets into a window shorter than its p90 once such windows have proved to last."""

from __future__ import annotations

import json

import numpy as np
import pytest
from prometheus_client import CollectorRegistry

from offpeak.cliargs import Parser
from offpeak_core.goodput import GoodputSettings
from offpeak_extender.app import ExtenderConfig
from offpeak_extender.cli import register
from offpeak_extender.goodputfeed import GoodputFeed
from offpeak_extender.metrics import ExtenderMetrics
from offpeak_extender.service import DecisionSettings, ExtenderService
from offpeak_extender.wire import parse_pod

from support.clock import Clock

from .k8s_objects import gpu_pod
from .test_http import NOW, make_store

SETTINGS = GoodputSettings(min_efficiency=0.8, startup_seconds=0.0, min_samples=20)


def _checkpointing_pod(interval: str | None) -> dict:
    pod = gpu_pod("train-0", gpus=2, phase="Pending", checkpointing=True,
                  predicted={"A100-SXM4-40GB": {"p50": 100.0, "p90": 120.0}})
    if interval is not None:
        pod["metadata"]["annotations"]["offpeak.io/checkpoint-interval-seconds"] = interval
    return pod


def test_the_checkpoint_interval_annotation_is_read_and_bad_values_mean_none() -> None:
    assert parse_pod(_checkpointing_pod("30"))[0].checkpoint_interval_seconds == 30.0
    for bad in (None, "soon", "-5", "0", "nan", "inf"):
        assert parse_pod(_checkpointing_pod(bad))[0].checkpoint_interval_seconds is None


def test_tick_notes_free_levels_and_closes_them_when_online_pods_take_the_gpus() -> None:
    clock = Clock(NOW)
    store = make_store(clock)
    feed = GoodputFeed(store=store, settings=SETTINGS)
    feed.tick()
    observed, still_open = feed.counts()
    assert observed == 0 and still_open > 0
    assert feed.ledger.open_on("short") == 7  # 1 of 8 GPUs online: levels 1..7 free, each with a forecast window
    clock.t += 20.0
    store.upsert_pod(gpu_pod("web-9", gpus=7, node="short", workload="online"))  # online takes the whole node
    feed.tick()
    assert feed.counts() == (7, still_open - 7)


def _filter(service: ExtenderService, pod: dict) -> dict:
    body = json.dumps({"Pod": pod, "Nodes": None, "NodeNames": ["short", "long", "t4"]}).encode()
    return json.loads(service.answer("filter", body))


def test_a_checkpointing_pod_takes_a_short_window_only_with_goodput_and_evidence() -> None:
    clock = Clock(NOW)
    store = make_store(clock)  # "short": a 60 s window, "long": 540 s; the pod needs 120 s x 1.15
    feed = GoodputFeed(store=store, settings=SETTINGS)
    metrics = ExtenderMetrics.create(CollectorRegistry())
    with_goodput = ExtenderService(store=store, metrics=metrics, settings=DecisionSettings(), goodput=feed)
    without = ExtenderService(store=store, metrics=metrics, settings=DecisionSettings())
    pod = _checkpointing_pod("10")

    assert _filter(with_goodput, pod)["NodeNames"] == ["long"]  # no table yet: the p90 rule
    # 40 windows elsewhere that the forecast gave ~60 s and that outlasted the ledger's horizon
    names = [f"seen-{i}" for i in range(40)]
    cap, idle = np.full(40, 8), np.zeros(40, dtype=int)
    feed.ledger.note(now=NOW - 1000, names=names, capacity=cap, online=idle, left_by_level={2: np.full(40, 60.0)})
    feed.ledger.observe(now=NOW - 1000 + feed.ledger.s.horizon_seconds, names=names, capacity=cap, online=idle)
    feed.tick()

    assert _filter(with_goodput, pod)["NodeNames"] == ["short", "long", "t4"]  # t4: also a 60 s window
    assert _filter(without, pod)["NodeNames"] == ["long"]
    assert _filter(with_goodput, _checkpointing_pod(None))["NodeNames"] == ["long"]  # no interval: whole run
    no_checkpoints = _checkpointing_pod("10")
    no_checkpoints["metadata"]["annotations"]["offpeak.io/checkpointing"] = "false"
    assert _filter(with_goodput, no_checkpoints)["NodeNames"] == ["long"]


def test_goodput_admission_is_off_unless_asked_and_bad_settings_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    def config(*argv: str) -> ExtenderConfig:
        parser = Parser()
        register(parser.add_subparsers())
        return ExtenderConfig.from_args(parser.parse_args(["extender", *argv]))

    assert config().goodput is None
    on = config("--goodput-min-efficiency", "0.7", "--goodput-startup-seconds", "30")
    assert on.goodput == GoodputSettings(min_efficiency=0.7, startup_seconds=30.0, min_samples=30)
    monkeypatch.setenv("OFFPEAK_GOODPUT_MIN_EFFICIENCY", "0.9")
    assert config().goodput is not None and config().goodput.min_efficiency == 0.9
    with pytest.raises(ValueError, match="min_efficiency"):
        config("--goodput-min-efficiency", "1.5")
