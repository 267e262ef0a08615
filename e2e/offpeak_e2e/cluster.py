"""The whole local offpeak cluster: the control plane plus Prometheus, the trace-driven online load and offpeak's
own services (predictor, extender, evictor, operator) run as local processes from this checkout's code, each as
charts/offpeak renders it (`offpeak_e2e.chartrun`: its arguments, environment, mounted files and ServiceAccount).

`LocalCluster.up()` starts everything and returns a `ClusterState`; `down()` stops it all (also from another
process: pid files in the run dir). Used by `offpeak cluster up|down|status`, `offpeak demo` and the e2e fixture.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from offpeak_core.versions import KUBERNETES_VERSION
from offpeak_e2e import build, chartrun, controlplane, kube, onlineload, procs, prom, traceshape
from offpeak_e2e.controlplane import ClusterState, ControlPlane, ControlPlaneSettings, StartError

Echo = Callable[[str], None]

SERVICES: tuple[str, ...] = ("prometheus", "online", "predictor", "extender", "evictor", "operator")


@dataclass(frozen=True)
class ClusterSettings:
    """What `offpeak cluster up` starts."""

    control_plane: ControlPlaneSettings = field(default_factory=ControlPlaneSettings)
    services: tuple[str, ...] = SERVICES
    day_seconds: float = 600.0  # one trace day of online load replayed in this many seconds
    online_start_minute: int = 720  # start the replay in the trace's quiet half of the day
    online_load: bool = True  # False: online Deployments stay at 0 replicas unless a test scales them
    scrape_interval_s: float = 2.0
    eviction_grace_s: int = 5  # terminationGracePeriod the evictor gives offline pods
    history_days: float = 4.0  # past replayed "days" backfilled into Prometheus before it starts (online load on)
    service_timeout_s: float = 90.0
    extra_env: dict[str, str] = field(default_factory=dict)  # every offpeak component's (the chart's extraEnv)
    online_plan: dict[str, list[int]] | None = None  # per node, online GPUs per slot of the day (None: the trace)
    addons: tuple[str, ...] = ()  # other controllers beside offpeak, with their CRDs: "kueue", "training-operator"
    operator_namespaces: tuple[str, ...] = ()  # kopf namespace patterns for the operator (none: every namespace)
    analysis_timeout_s: int = 120  # the operator's deadline for an analysis pod (kwok never runs one to its end)
    # values files charts/offpeak is rendered with for offpeak's services, before the overlay of these settings
    # (`chartrun.cluster_values`)
    chart_values: tuple[Path, ...] = (chartrun.VALUES_FILE,)


def offpeak_argv() -> list[str]:
    """How to run the `offpeak` CLI of this checkout (the venv's entry point, else ``python -m offpeak``)."""
    exe = Path(sys.executable).with_name("offpeak")
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "offpeak"]


class LocalCluster:
    """Control plane + observability + offpeak services."""

    def __init__(self, settings: ClusterSettings | None = None, *, echo: Echo = print) -> None:
        self.settings = settings or ClusterSettings()
        self.echo = echo
        self.cp = ControlPlane(self.settings.control_plane, echo=echo)
        self.state: ClusterState | None = None
        self._chart: list[dict[str, Any]] | None = None  # the rendered chart (config/chart.yaml)

    @property
    def sup(self) -> procs.Supervisor:
        return self.cp.sup

    def up(self) -> ClusterState:
        """Start everything; on any failure stop what was started and raise StartError."""
        start = time.monotonic()
        try:
            self.state = self.cp.start()
            kubeconfig = Path(self.state.kubeconfig)
            for addon in self.settings.addons:  # their CRDs first: offpeak's services watch them from the start
                self._timed(f"{addon} CRDs", functools.partial(controlplane.install_built_crds, kubeconfig, addon))
            # offpeak's services first, together (each spends seconds importing its libraries; they read Prometheus
            # every refresh and tolerate its absence); then the compressed day begins: its past days backfilled into
            # Prometheus and the online load replaying it from now, so a scenario that needs a time of day finds it
            # a known few seconds after the cluster is up
            day = [n for n in self.settings.services if n in ("prometheus", "online")]
            offpeak = [n for n in self.settings.services if n not in day]
            if "prometheus" in day:
                self.state.urls["prometheus"] = f"http://127.0.0.1:{self._port('prometheus')}"
            if offpeak:
                self._timed("chart", self._install_chart)
                self._timed("+".join(offpeak), lambda: self._start_together(offpeak))
            if day:
                self._timed("+".join(day), lambda: self._start_together(day))
            for addon in self.settings.addons:
                self._timed(addon, functools.partial(self._start_addon, addon))
        except BaseException:
            self.echo("[cluster] start failed; stopping what was started")
            self.down()
            raise
        self.state.timings["total"] = round(time.monotonic() - start, 2)
        self.state.save()
        self.echo(f"[cluster] up in {time.monotonic() - start:.1f}s; export KUBECONFIG={self.state.kubeconfig}")
        return self.state

    def down(self) -> None:
        """Stop every process of this cluster (safe to call twice)."""
        start = time.monotonic()
        self.cp.stop()
        shutil.rmtree(self.cp.run_dir / "prometheus-data", ignore_errors=True)
        self.echo(f"[cluster] down in {time.monotonic() - start:.1f}s")

    def _timed(self, label: str, fn: Callable[[], object]) -> None:
        assert self.state is not None
        t = time.monotonic()
        fn()
        self.state.timings[label] = round(time.monotonic() - t, 2)
        self.echo(f"[cluster] {label}: {time.monotonic() - t:.1f}s")
        self.state.save()

    # -- offpeak's services, from the chart -------------------------------------------------------------------
    def _components(self) -> list[str]:
        return [c for c in chartrun.COMPONENTS if c in self.settings.services]

    def _install_chart(self) -> None:
        """Render charts/offpeak for this cluster, hand out its services' ports, and apply what gives them their
        identity (ServiceAccounts, RBAC, the Secrets and ConfigMaps they mount) into the release namespace."""
        assert self.state is not None
        s = self.settings
        overlay = self.cp.run_dir / "config" / "chart-values.json"
        overlay.write_text(json.dumps(chartrun.cluster_values(
            services=s.services, addons=s.addons, day_seconds=s.day_seconds, eviction_grace_s=s.eviction_grace_s,
            analysis_timeout_s=s.analysis_timeout_s, operator_namespaces=s.operator_namespaces,
            prometheus_url=self.state.urls.get("prometheus", ""), extra_env=s.extra_env), indent=2))
        manifest = chartrun.render(build.binaries()["helm"], values=[*s.chart_values, overlay],
                                   kube_version=KUBERNETES_VERSION)
        (self.cp.run_dir / "config" / "chart.yaml").write_text(manifest)
        self._chart = chartrun.parse(manifest)
        for key in chartrun.declared_ports(self._chart, self._components()):
            # the offpeak-scheduler's config (made with the control plane) names the extender's port
            self.state.ports[key] = self.state.ports["extender"] if key == "extender/http" else procs.free_port()
        shutil.rmtree(self.cp.run_dir / "pods", ignore_errors=True)
        kubeconfig = Path(self.state.kubeconfig)
        kube.kubectl(kubeconfig, "create", "namespace", chartrun.NAMESPACE, check=False)
        specs = [self._spec(c) for c in self._components()]
        kube.apply(kubeconfig, chartrun.identity_objects(self._chart, specs))

    def _objects(self) -> list[dict[str, Any]]:
        if self._chart is None:  # a test process attached to a cluster another one started
            self._chart = chartrun.parse((self.cp.run_dir / "config" / "chart.yaml").read_text())
        return self._chart

    def _chart_ports(self) -> dict[str, int]:
        assert self.state is not None
        return {k: self.state.ports[k] for k in chartrun.declared_ports(self._objects(), self._components())}

    def _spec(self, component: str) -> chartrun.ProcessSpec:
        return chartrun.process_spec(self._objects(), component, ports=self._chart_ports(),
                                     volume_root=self.cp.run_dir / "pods")

    def _chart_service(self, component: str) -> str:
        """Start one offpeak component as the chart renders it; its readiness URL."""
        assert self.state is not None
        spec = self._spec(component)
        env = chartrun.materialise(spec, admin_kubeconfig=Path(self.state.kubeconfig), server=self.state.apiserver,
                                   ca_file=self.cp.run_dir / "pki" / "ca.crt",
                                   kubeconfig_path=self.cp.run_dir / "pods" / component / "kubeconfig")
        self.sup.start(component, [*offpeak_argv(), *spec.argv], wrapper=chartrun.clean_env_wrapper(env))
        self.state.urls[component] = chartrun.service_url(self._objects(), component, ports=self._chart_ports())
        return spec.ready_url

    def _port(self, name: str) -> int:
        assert self.state is not None
        if name not in self.state.ports:
            self.state.ports[name] = procs.free_port()
        return self.state.ports[name]

    def start_service(self, name: str) -> None:
        """Start (or restart) one service by name and wait until it is healthy."""
        self._wait_http(name, self._launch(name))

    def _launch(self, name: str) -> str:
        """Start (or restart) one service by name without waiting; its health URL."""
        assert self.state is not None
        if name not in SERVICES:
            raise StartError(f"unknown service {name!r}; choose from {', '.join(SERVICES)}")
        self.sup.stop(name)
        if name == "prometheus":
            return self._prometheus()
        if name == "online":
            return self._online()
        return self._chart_service(name)

    def _start_together(self, names: Sequence[str]) -> None:
        """Start services that need nothing of each other at once (each spends seconds importing its libraries),
        then wait until every one is healthy."""
        urls = {name: self._launch(name) for name in names}
        for name, url in urls.items():
            self._wait_http(name, url)

    def _start_addon(self, name: str) -> None:
        """Start another controller the scenarios use (Kueue: ready when this returns; training-operator: started,
        `kubeflow.wait_ready` before use, since its certificates take up to a minute)."""
        from offpeak_e2e import kubeflow, kueue  # noqa: PLC0415

        assert self.state is not None
        kubeconfig = Path(self.state.kubeconfig)
        if name == "kueue":
            self.state.urls["kueue"] = kueue.start(self.sup, run_dir=self.cp.run_dir, kubeconfig=kubeconfig)
        elif name == "training-operator":
            self.state.urls["training-operator"] = kubeflow.launch(self.sup, kubeconfig=kubeconfig,
                                                                   run_dir=self.cp.run_dir)
        else:
            raise StartError(f"unknown addon {name!r}; choose from kueue, training-operator")

    def stop_service(self, name: str) -> None:
        """Stop one service (fault-injection in tests)."""
        self.sup.stop(name)

    def _wait_http(self, name: str, url: str) -> None:
        self.cp._wait(name, f"{name} {url}", lambda: kube.http_ok(url), timeout=self.settings.service_timeout_s)

    def _prometheus(self) -> str:
        assert self.state is not None
        binary = prom.prometheus_binary()
        port = self._port("prometheus")
        targets = {"offpeak-node-agent": f"127.0.0.1:{self._port('online')}"}
        if self._components():  # what the chart's ServiceMonitors scrape
            targets.update(chartrun.scrape_targets(self._objects(), ports=self._chart_ports()))
        cfg = prom.write_config(self.cp.run_dir / "config" / "prometheus.yml", targets=targets,
                                scrape_interval_s=self.settings.scrape_interval_s)
        data = self.cp.run_dir / "prometheus-data"
        shutil.rmtree(data, ignore_errors=True)
        data.mkdir(parents=True)
        if self.settings.online_load and self.settings.history_days > 0:
            self._backfill(binary, data, instance=targets["offpeak-node-agent"])
        self.sup.start("prometheus", prom.argv(binary=binary, config_file=cfg, data_dir=data, port=port))
        self.state.urls["prometheus"] = f"http://127.0.0.1:{port}"
        return f"http://127.0.0.1:{port}/-/ready"

    def _load_settings(self) -> onlineload.LoadSettings:
        assert self.state is not None
        if "reference" not in self.state.urls:
            minutes = traceshape.shape_minutes()
            ref = time.time() - self.settings.online_start_minute / minutes * self.settings.day_seconds
            self.state.urls["reference"] = f"{ref:.3f}"  # wall time of trace minute 0 (shared with the driver)
        return onlineload.LoadSettings(
            nodes=tuple(self.state.nodes), gpus=self.settings.control_plane.gpus_per_node,
            day_seconds=self.settings.day_seconds, reference_time=float(self.state.urls["reference"]),
            plan_file=self._plan_file(),
        )

    def _plan_file(self) -> str:
        """The scenario's own online plan as a file both the backfill and the driver read ("" = the trace)."""
        if self.settings.online_plan is None:
            return ""
        path = self.cp.run_dir / "config" / "online-plan.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.settings.online_plan))
        return str(path)

    def _backfill(self, binary: Path, data: Path, *, instance: str) -> None:
        """Write the replay's past `history_days` into Prometheus' TSDB with promtool (before it starts)."""
        promtool = binary.with_name("promtool")
        if not promtool.exists():
            self.echo("[cluster] promtool not found; the forecaster starts without history")
            return
        ls = self._load_settings()
        demand = onlineload.load_plan(ls)
        now = time.time()
        text = onlineload.history_openmetrics(
            demand, gpus=ls.gpus, reference=ls.reference_time, day_seconds=ls.day_seconds,
            start=now - self.settings.history_days * ls.day_seconds, end=now - 5,
            step=max(self.settings.scrape_interval_s, ls.day_seconds / 1440 * 5),
            labels={"job": "offpeak-node-agent", "instance": instance},
        )
        src = self.cp.run_dir / "config" / "history.om"
        src.write_text(text)
        proc = subprocess.run([str(promtool), "tsdb", "create-blocks-from", "openmetrics", str(src), str(data)],
                              capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise StartError(f"promtool backfill failed: {proc.stderr.strip()[-800:]}")
        self.echo(f"[cluster] backfilled {self.settings.history_days:g} replayed days of online load")

    def _online(self) -> str:
        assert self.state is not None
        kubeconfig = Path(self.state.kubeconfig)
        kube.apply(kubeconfig, onlineload.base_objects())
        kube.apply(kubeconfig, [onlineload.online_deployment(node=n, replicas=0) for n in self.state.nodes])
        port = self._port("online")
        argv = [
            sys.executable, "-m", "offpeak_e2e.onlineload", f"--kubeconfig={kubeconfig}", f"--port={port}",
            f"--nodes={','.join(self.state.nodes)}", f"--gpus={self.settings.control_plane.gpus_per_node}",
            f"--day-seconds={self.settings.day_seconds:g}",
            f"--reference-time={self._load_settings().reference_time:.3f}",
        ]
        if self.settings.online_plan is not None:
            argv.append(f"--plan-file={self._plan_file()}")
        if not self.settings.online_load:
            argv.append("--manual")
        self.sup.start("online", argv, env={"PYTHONPATH": _pythonpath()})
        self.state.urls["node-metrics"] = f"http://127.0.0.1:{port}/metrics"
        return f"http://127.0.0.1:{port}/metrics"


def _pythonpath() -> str:
    here = str(Path(__file__).resolve().parents[1])
    return os.pathsep.join([here, *filter(None, [os.environ.get("PYTHONPATH")])])


def load_state(name: str) -> ClusterState | None:
    """The saved state of cluster `name`, if it was started."""
    return ClusterState.load(controlplane.run_dir_for(name))


def status(name: str) -> dict[str, object]:
    """Which of the cluster's processes are running."""
    sup = procs.Supervisor(controlplane.run_dir_for(name))
    state = load_state(name)
    return {
        "name": name,
        "kubeconfig": state.kubeconfig if state else None,
        "processes": {p.name: ("running" if procs.alive(p) else "dead") for p in sup.procs()},
        "urls": state.urls if state else {},
    }


def with_services(settings: ClusterSettings, *, without: Sequence[str]) -> ClusterSettings:
    """`settings` minus some services."""
    unknown = set(without) - set(SERVICES)
    if unknown:
        raise ValueError(f"unknown service(s) {', '.join(sorted(unknown))}; choose from {', '.join(SERVICES)}")
    return replace(settings, services=tuple(s for s in settings.services if s not in without))
