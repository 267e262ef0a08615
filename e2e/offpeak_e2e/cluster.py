"""The whole local offpeak cluster: the control plane plus Prometheus, the trace-driven online load and offpeak's
own services (predictor, extender, evictor, operator) run as local processes from this checkout's code.

`LocalCluster.up()` starts everything and returns a `ClusterState`; `down()` stops it all (also from another
process: pid files in the run dir). Used by `offpeak cluster up|down|status`, `offpeak demo` and the e2e fixture.
"""

from __future__ import annotations

import functools
import json
import os
import secrets
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from offpeak_e2e import controlplane, kube, onlineload, procs, prom, traceshape
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
    extra_env: dict[str, str] = field(default_factory=dict)
    online_plan: dict[str, list[int]] | None = None  # per node, online GPUs per slot of the day (None: the trace)
    addons: tuple[str, ...] = ()  # other controllers beside offpeak, with their CRDs: "kueue", "training-operator"
    operator_namespaces: tuple[str, ...] = ()  # kopf namespace patterns for the operator (none: every namespace)
    analysis_timeout_s: int = 120  # the operator's deadline for an analysis pod (kwok never runs one to its end)


def offpeak_argv() -> list[str]:
    """How to run the `offpeak` CLI of this checkout (the venv's entry point, else ``python -m offpeak``)."""
    exe = Path(sys.executable).with_name("offpeak")
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "offpeak"]


def offpeak_has(command: str) -> bool:
    """Whether the installed `offpeak` CLI has a subcommand (components land at different times)."""
    proc = subprocess.run([*offpeak_argv(), "--help"], capture_output=True, text=True, check=False)
    return f" {command} " in proc.stdout or f"    {command}\n" in proc.stdout or f"{{{command}" in proc.stdout


class LocalCluster:
    """Control plane + observability + offpeak services."""

    def __init__(self, settings: ClusterSettings | None = None, *, echo: Echo = print) -> None:
        self.settings = settings or ClusterSettings()
        self.echo = echo
        self.cp = ControlPlane(self.settings.control_plane, echo=echo)
        self.state: ClusterState | None = None

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

    # -- services -------------------------------------------------------------------------------------------
    def env(self) -> dict[str, str]:
        """Environment for offpeak's processes: the contracts' OFFPEAK_* fallbacks point at this cluster."""
        assert self.state is not None
        urls = self.state.urls
        env = {"KUBECONFIG": self.state.kubeconfig, "PYTHONUNBUFFERED": "1",
               "OFFPEAK_PREDICTOR_TOKEN_FILE": str(self._predictor_token())}
        if "prometheus" in urls:
            env["OFFPEAK_PROMETHEUS_URL"] = urls["prometheus"]
        if "predictor" in urls:
            env["OFFPEAK_PREDICTOR_URL"] = urls["predictor"]
        return {**env, **self.settings.extra_env}

    def _predictor_token(self) -> Path:
        """The shared secret of predictor and operator (the chart mounts one Secret into both): made once per
        cluster, readable by this user only."""
        path = self.cp.run_dir / "config" / "predictor-token"
        if not path.is_file():
            path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as out:
                out.write(secrets.token_hex(32))
        return path

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
        starters = {
            "prometheus": self._prometheus, "online": self._online, "predictor": self._predictor,
            "extender": self._extender, "evictor": self._evictor, "operator": self._operator,
        }
        if name not in starters:
            raise StartError(f"unknown service {name!r}; choose from {', '.join(SERVICES)}")
        self.sup.stop(name)
        return starters[name]()

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

    def _require(self, command: str) -> None:
        if not offpeak_has(command.split()[0]):
            raise StartError(
                f"`offpeak {command}` is not available in this checkout yet; start the cluster without it "
                f"(offpeak cluster up --without {command.split()[0]})"
            )

    def _prometheus(self) -> str:
        assert self.state is not None
        binary = prom.prometheus_binary()
        port = self._port("prometheus")
        targets = {"offpeak-node-agent": f"127.0.0.1:{self._port('online')}"}
        for svc, key in (("extender", "extender"), ("evictor", "evictor-metrics"),
                         ("operator", "operator-metrics"), ("predictor", "predictor")):
            if svc in self.settings.services:
                targets[f"offpeak-{svc}"] = f"127.0.0.1:{self._port(key)}"
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

    def _predictor(self) -> str:
        assert self.state is not None
        self._require("predictor")
        port = self._port("predictor")
        db = self.cp.run_dir / "predictor-samples.sqlite"
        self.sup.start("predictor", [*offpeak_argv(), "predictor", "serve", "--host", "127.0.0.1", "--port",
                                     str(port), "--db", str(db)], env=self.env())
        self.state.urls["predictor"] = f"http://127.0.0.1:{port}"
        return f"http://127.0.0.1:{port}/healthz"

    def _extender(self) -> str:
        assert self.state is not None
        self._require("extender")
        port = self.state.ports["extender"]  # fixed at control-plane start: the scheduler config names it
        argv = [
            *offpeak_argv(), "extender", "--host", "127.0.0.1", "--port", str(port),
            "--kubeconfig", self.state.kubeconfig, *self._forecast_argv(),
        ]
        if "prometheus" in self.state.urls:
            argv += ["--prometheus-url", self.state.urls["prometheus"]]
        self.sup.start("extender", argv, env=self.env())
        self.state.urls["extender"] = f"http://127.0.0.1:{port}"
        return f"http://127.0.0.1:{port}/healthz"

    def _forecast_argv(self) -> list[str]:
        """The forecaster's options for this cluster's compressed day: the extender's, and the evictor's for
        planned stops (both must see the same windows)."""
        day = self.settings.day_seconds
        return ["--season-seconds", f"{day:g}", "--step-seconds", f"{max(1.0, day / 96):g}", "--refresh-seconds", "2"]

    def _evictor(self) -> str:
        assert self.state is not None
        self._require("evictor")
        port = self._port("evictor-metrics")
        argv = [
            *offpeak_argv(), "evictor", "--host", "127.0.0.1", "--metrics-port", str(port),
            "--kubeconfig", self.state.kubeconfig, "--grace-seconds", str(self.settings.eviction_grace_s),
            "--interval-seconds", "1", *self._forecast_argv(),
        ]
        if "prometheus" in self.state.urls:
            argv += ["--prometheus-url", self.state.urls["prometheus"]]
        self.sup.start("evictor", argv, env=self.env())
        self.state.urls["evictor"] = f"http://127.0.0.1:{port}"
        return f"http://127.0.0.1:{port}/healthz"

    def _operator(self) -> str:
        assert self.state is not None
        self._require("operator")
        port = self._port("operator-metrics")
        live = self._port("operator-liveness")
        predictor = self.state.urls.get("predictor", "http://127.0.0.1:9")  # unreachable: fallback predictions
        scope = ([arg for ns in self.settings.operator_namespaces for arg in ("--namespace", ns)]
                 or ["--all-namespaces"])
        self.sup.start("operator", [
            *offpeak_argv(), "operator", *scope, "--standalone", "--kubeconfig", self.state.kubeconfig,
            "--predictor-url", predictor, "--metrics-port", str(port), "--liveness-port", str(live),
            "--resync-seconds", "2", "--requeue-base-seconds", "3",
            "--analysis-timeout-seconds", str(self.settings.analysis_timeout_s),
        ], env=self.env())
        self.state.urls["operator"] = f"http://127.0.0.1:{port}"
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
