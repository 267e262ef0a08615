"""Fixtures for the end-to-end scenarios (docs/e2e.md): one shared local cluster, cut into lanes, for every test
process of the session.

The scenarios run in parallel test processes (pytest-xdist, `--dist loadfile`: each test file is one lane, its
tests run in one process, in order). The first process that needs the cluster starts it and the others attach to it (`E2ECluster.shared`);
the controlling pytest process stops it when the session ends. Without xdist the one process does all of it.

The control-plane binaries are built (first run: 20-40 min on 2 cores) before any test starts, so a test's
timeout never covers the Go build. If the build or the start fails, every e2e test FAILS with the reason; nothing
skips.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from offpeak_e2e import build, lanes, procs, testclock
from offpeak_e2e.controlplane import ClusterState, ControlPlane, ControlPlaneSettings, StartError, run_dir_for
from offpeak_e2e.harness import E2ECluster, reap_stale_sessions, session_cluster_name

_CLOCK = testclock.Clock()
_OUTCOMES: dict[str, str] = {}
_SESSION = "OFFPEAK_E2E_SESSION"  # the shared cluster's name, set by the controlling process for its workers
_BUILD_ERROR = "OFFPEAK_E2E_BUILD_ERROR"


def _is_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")


def _echo(config: pytest.Config) -> Any:
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    return (lambda m: reporter.write_line(m)) if reporter else print


def pytest_configure(config: pytest.Config) -> None:
    if _is_worker(config):
        worker = int(str(os.environ.get("PYTEST_XDIST_WORKER", "gw0")).removeprefix("gw") or 0)
        os.environ[procs.PORT_BAND_ENV] = procs.port_band(worker)  # no two workers hand out one port
        return
    os.environ[_SESSION] = session_cluster_name("pytest")
    config.stash[_STARTED] = (time.monotonic(), testclock.machine_cpu_seconds())
    reap_stale_sessions(echo=_echo(config))
    missing = [] if config.option.collectonly else build.missing()
    if missing:
        echo = _echo(config)
        echo(f"[e2e] building control-plane binaries ({', '.join(missing)}) from Go modules; first run is slow")
        start = time.monotonic()
        try:
            build.build_all(echo=echo)
        except build.BuildError as e:
            os.environ[_BUILD_ERROR] = str(e)
            echo(f"[e2e] build FAILED: {e}")
        echo(f"[e2e] build stage: {time.monotonic() - start:.0f}s")


_STARTED = pytest.StashKey[tuple[float, float]]()


def _lane(item: pytest.Item) -> str:
    return Path(str(item.fspath)).stem


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.e2e)
    rank = {lane: i for i, lane in enumerate(lanes.FILE_ORDER)}
    items.sort(key=lambda item: rank.get(_lane(item), len(rank)))  # stable: a lane's tests keep their order


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    _CLOCK.start()
    yield
    _CLOCK.stop(item.nodeid, _OUTCOMES.pop(item.nodeid, "passed"))


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.failed:
        _OUTCOMES[report.nodeid] = "failed"
    elif report.skipped:
        _OUTCOMES.setdefault(report.nodeid, "skipped")


def pytest_sessionfinish(session: pytest.Session) -> None:
    config = session.config
    if _is_worker(config):
        config.workeroutput["e2e_costs"] = testclock.dump(_CLOCK.costs)  # type: ignore[attr-defined]
        return
    name = os.environ.get(_SESSION, "")
    run_dir = run_dir_for(name)
    state = ClusterState.load(run_dir)
    if state is not None:
        config.stash[_CLUSTER_CPU] = testclock.cluster_cpu_seconds(run_dir)
        _render_dashboard(state, config)
    if os.environ.get("OFFPEAK_E2E_KEEP") != "1":
        ControlPlane(ControlPlaneSettings(name=name), echo=lambda m: None).stop()
        if os.environ.get("OFFPEAK_E2E_KEEP_LOGS") != "1":
            shutil.rmtree(run_dir, ignore_errors=True)
    for suffix in (".lock", ".failed"):
        run_dir.with_name(f"{run_dir.name}{suffix}").unlink(missing_ok=True)


_CLUSTER_CPU = pytest.StashKey[float]()


def _render_dashboard(state: ClusterState, config: pytest.Config) -> None:
    """With OFFPEAK_DASHBOARD_PNG set, draw the dashboard from the shared cluster's Prometheus once every lane has
    run (what docs/img/dashboard.png shows): the whole session's jobs, evictions and harvest."""
    out = os.environ.get("OFFPEAK_DASHBOARD_PNG")
    started = config.stash.get(_STARTED, None)
    if not out or "prometheus" not in state.urls or started is None:
        return
    from offpeak.cli import main  # noqa: PLC0415

    seconds = max(600, int(time.monotonic() - started[0]))
    main(["dashboard", "render", "--prometheus-url", state.urls["prometheus"], "--out", out,
          "--range-seconds", str(seconds)])


def pytest_testnodedown(node: Any, error: Any) -> None:
    """(xdist, controller) collect each worker's per-test costs."""
    _CLOCK.costs.extend(testclock.load(getattr(node, "workeroutput", {}).get("e2e_costs", "[]")))


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> None:
    """Each test's wall seconds and the CPU seconds its own process used (the shared cluster's processes not
    included), the costliest first; then the whole stage's wall and CPU (every process on the machine) and the
    shared cluster's own CPU. `$OFFPEAK_E2E_COSTS` also gets the table as JSON."""
    if not _CLOCK.costs or _is_worker(config):
        return
    terminalreporter.write_sep("=", "e2e cost per test (wall s, and CPU s of the test's own processes)")
    for line in testclock.table(_CLOCK.costs, top=15):
        terminalreporter.write_line(line)
    started = config.stash.get(_STARTED, None)
    if started is not None:
        wall, cpu = time.monotonic() - started[0], testclock.machine_cpu_seconds() - started[1]
        cluster = config.stash.get(_CLUSTER_CPU, 0.0)
        terminalreporter.write_line(f"[e2e] stage: {wall:.0f} s wall, {cpu:.0f} CPU-s on the machine "
                                    f"({cpu / max(wall, 1):.2f} cores busy); shared cluster's processes "
                                    f"{cluster:.0f} CPU-s")
    if os.environ.get("OFFPEAK_E2E_COSTS"):
        testclock.write_json(_CLOCK.costs, Path(os.environ["OFFPEAK_E2E_COSTS"]))


@pytest.fixture(scope="session")
def e2e_cluster() -> E2ECluster:
    """The shared cluster (`offpeak_e2e.lanes.shared_settings`: every lane's nodes, Prometheus with the lanes'
    history, offpeak's services, Kueue and training-operator). Test processes share it; it stops with the session
    (OFFPEAK_E2E_KEEP=1 leaves it running)."""
    if os.environ.get(_BUILD_ERROR):
        pytest.fail(f"the local control plane could not be built: {os.environ[_BUILD_ERROR]}", pytrace=False)
    settings = lanes.shared_settings(os.environ.get(_SESSION) or session_cluster_name("pytest"))
    try:
        cluster = E2ECluster.shared(settings, echo=lambda m: print(m, flush=True))
    except StartError as e:
        pytest.fail(f"the shared cluster did not start: {e}", pytrace=False)
    _CLOCK.exclude_cluster(Path(cluster.state.run_dir))
    return cluster


@pytest.fixture
def e2e_namespace(e2e_cluster: E2ECluster) -> Iterator[str]:
    """A fresh namespace for one test, deleted afterwards."""
    ns = e2e_cluster.new_namespace()
    try:
        yield ns
    finally:
        e2e_cluster.delete_namespace(ns)
