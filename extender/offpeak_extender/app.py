"""Entry-point wiring: build settings once, connect store, informer, refresher/evictor and the HTTP servers."""

from __future__ import annotations

import argparse
import asyncio
import logging
import threading
from dataclasses import dataclass

from aiohttp import web
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from offpeak.serving import serve_apps
from offpeak_core.forecast import ForecastSettings
from offpeak_core.goodput import GoodputSettings
from offpeak_extender.gangs import GangSettings
from offpeak_extender.pools import PoolSettings
from offpeak_extender.server import ServerSettings
from offpeak_extender.service import DecisionSettings

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ExtenderConfig:
    host: str
    port: int
    kubeconfig: str | None
    prometheus_url: str | None
    refresh_seconds: float
    stale_seconds: float
    forecast: ForecastSettings
    decisions: DecisionSettings
    server: ServerSettings
    metrics_host: str = "0.0.0.0"  # noqa: S104 - probes and scrapes come to the pod IP
    metrics_port: int | None = None  # None: /healthz, /readyz and /metrics only on the main port
    gangs: GangSettings = GangSettings()
    goodput: GoodputSettings | None = None  # None: expected-goodput admission off
    kueue_check: str | None = None  # controller name of the Kueue admission check to answer; None: off
    kueue_interval_seconds: float = 5.0
    pools: PoolSettings | None = None  # None: pool windows off

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> ExtenderConfig:
        forecast = forecast_settings(args)
        stale = stale_seconds(args)
        server = ServerSettings(max_body_bytes=args.max_body_bytes, deadline_seconds=args.deadline_seconds,
                                inline_body_bytes=args.inline_body_bytes)
        goodput = None
        if getattr(args, "goodput_min_efficiency", None) is not None:
            goodput = GoodputSettings(min_efficiency=args.goodput_min_efficiency,
                                      startup_seconds=args.goodput_startup_seconds,
                                      min_samples=args.goodput_min_samples)  # raises ValueError on bad values
        pools = pool_settings(args, forecast)
        return cls(args.host, args.port, args.kubeconfig, args.prometheus_url, args.refresh_seconds, stale,
                   forecast, DecisionSettings(margin=args.margin), server, args.metrics_host, args.metrics_port,
                   GangSettings(timeout_seconds=args.gang_timeout_seconds), goodput,
                   getattr(args, "kueue_admission_check", None), getattr(args, "kueue_interval_seconds", 5.0), pools)


def forecast_settings(args: argparse.Namespace) -> ForecastSettings:
    """The seasonal forecaster's settings from the command line (`cli._forecast_arguments`), the extender's and the
    evictor's alike."""
    return ForecastSettings(
        season_seconds=args.season_seconds,
        step_seconds=args.step_seconds,
        horizon_seconds=args.horizon_seconds or args.season_seconds,
        history_seconds=args.history_days * args.season_seconds,
        quantile=args.quantile,
    )


def pool_settings(args: argparse.Namespace, forecast: ForecastSettings) -> PoolSettings | None:
    """Pool windows from the command line (`--pool-label`), the extender's and the evictor's alike; None: off."""
    if not getattr(args, "pool_label", None):
        return None
    ceilings = frozenset(n.strip() for n in (getattr(args, "pool_ceiling_namespaces", None) or "").split(",")
                         if n.strip())
    return PoolSettings(label=args.pool_label,
                        look_back_seconds=args.pool_look_back_seconds or forecast.season_seconds / 4,
                        ceiling_namespaces=ceilings)


def stale_seconds(args: argparse.Namespace) -> float:
    """How old a forecast may be before decisions stop trusting it: `--stale-seconds`, else 3 refreshes, at least
    2 steps."""
    return float(args.stale_seconds or max(3 * args.refresh_seconds, 2 * args.step_seconds))


def serve_extender(config: ExtenderConfig) -> None:
    from offpeak_extender.goodputfeed import GoodputFeed
    from offpeak_extender.history import LocalHistory, PrometheusHistory, Refresher
    from offpeak_extender.kube import Informer, load_api_client
    from offpeak_extender.heap import share_main_arena
    from offpeak_extender.metrics import ExtenderMetrics
    from offpeak_extender.server import make_app, make_probe_app
    from offpeak_extender.service import ExtenderService
    from offpeak_extender.store import ClusterStore

    share_main_arena()  # before any thread allocates: decisions run in worker threads (heap's docstring)
    registry = CollectorRegistry()
    metrics = ExtenderMetrics.create(registry)
    store = ClusterStore(settings=config.forecast, stale_after_seconds=config.stale_seconds, pools=config.pools)
    api = load_api_client(config.kubeconfig)
    informer = Informer(api_client=api, store=store, announcements=config.pools is not None)
    source = PrometheusHistory(config.prometheus_url) if config.prometheus_url else LocalHistory(store)
    goodput = None
    if config.goodput is not None:
        goodput = GoodputFeed(store=store, settings=config.goodput)
    refresher = Refresher(store=store, source=source, metrics=metrics, refresh_seconds=config.refresh_seconds,
                          freeze_gc=True, goodput=goodput, trim_heap=True)
    informer.start()
    refresher.start()
    service = ExtenderService(store=store, metrics=metrics, settings=config.decisions, gangs=config.gangs,
                              goodput=goodput)
    kueue = None
    if config.kueue_check:
        from offpeak_extender.kueuecontroller import KueueAdmissionCheck

        kueue = KueueAdmissionCheck(api_client=api, service=service, controller_name=config.kueue_check,
                                    interval_seconds=config.kueue_interval_seconds)
        kueue.start()
        log.info("answering Kueue admission checks of controller %s every %gs", config.kueue_check,
                 config.kueue_interval_seconds)
    log.info("extender on http://%s:%d (history: %s, day=%gs, step=%gs, margin=%g, goodput admission: %s, "
             "pool windows: %s)", config.host, config.port, config.prometheus_url or "local pod samples",
             config.forecast.season_seconds, config.forecast.step_seconds, config.decisions.margin,
             f"min efficiency {config.goodput.min_efficiency:g}" if config.goodput else "off",
             f"label {config.pools.label}, look-back {config.pools.look_back_seconds:g}s" if config.pools else "off")
    sites = [(make_app(service=service, registry=registry, settings=config.server), config.host, config.port)]
    if config.metrics_port is not None:
        log.info("extender probes and metrics on http://%s:%d", config.metrics_host, config.metrics_port)
        sites.append((make_probe_app(service=service, registry=registry), config.metrics_host, config.metrics_port))
    try:
        asyncio.run(serve_apps(sites))
    finally:
        informer.stop()
        refresher.stop()
        if kueue is not None:
            kueue.stop()


def serve_evictor(args: argparse.Namespace) -> None:
    from offpeak_extender.evictor import (
        Evictor,
        EvictorSettings,
        KubeEvictionActions,
        prometheus_measured_online,
    )
    from offpeak_extender.kube import Informer, load_api_client
    from offpeak_extender.metrics import EvictorMetrics
    from offpeak_extender.store import ClusterStore

    registry = CollectorRegistry()
    metrics = EvictorMetrics.create(registry)
    forecast = forecast_settings(args)
    pools = pool_settings(args, forecast) if getattr(args, "yield_at_checkpoints", False) else None
    store = ClusterStore(settings=forecast, stale_after_seconds=stale_seconds(args), pools=pools)
    api = load_api_client(args.kubeconfig)
    informer = Informer(api_client=api, store=store, announcements=pools is not None)
    settings = EvictorSettings(grace_seconds=args.grace_seconds, interval_seconds=args.interval_seconds,
                               prometheus_url=args.prometheus_url,
                               yield_at_checkpoints=bool(getattr(args, "yield_at_checkpoints", False)),
                               startup_seconds=args.startup_seconds, yield_margin_seconds=args.yield_margin_seconds,
                               pressure_settle_seconds=args.pressure_settle_seconds)
    measured = prometheus_measured_online(args.prometheus_url) if args.prometheus_url else None
    evictor = Evictor(store=store, actions=KubeEvictionActions(api), metrics=metrics, settings=settings,
                      measured_online=measured)
    informer.start()
    refresher = None
    if settings.yield_at_checkpoints:  # planned stops need each node's forecast, as the extender fits it
        from offpeak_extender.history import LocalHistory, PrometheusHistory, Refresher

        source = PrometheusHistory(args.prometheus_url) if args.prometheus_url else LocalHistory(store)
        refresher = Refresher(store=store, source=source, metrics=None, refresh_seconds=args.refresh_seconds,
                              freeze_gc=True, trim_heap=True)
        refresher.start()
    thread = threading.Thread(target=evictor.run, name="evictor", daemon=True)
    thread.start()

    async def metrics_handler(_: web.Request) -> web.Response:
        return web.Response(body=generate_latest(registry), headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def healthz(_: web.Request) -> web.Response:
        ok = thread.is_alive()
        return web.json_response({"ok": ok, "synced": store.synced}, status=200 if ok else 500)

    app = web.Application()
    app.router.add_get("/metrics", metrics_handler)
    app.router.add_get("/healthz", healthz)
    log.info("evictor metrics on http://%s:%d (grace %ds, every %gs, planned stops at checkpoints: %s)", args.host,
             args.metrics_port, args.grace_seconds, args.interval_seconds,
             "on" if settings.yield_at_checkpoints else "off")
    try:
        web.run_app(app, host=args.host, port=args.metrics_port, print=None, access_log=None)
    finally:
        evictor.stop_event.set()
        informer.stop()
        if refresher is not None:
            refresher.stop()

