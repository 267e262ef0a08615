"""Fixtures for the end-to-end scenarios: one real local cluster per test session (see docs/e2e.md).

The control-plane binaries are built (first run: 20-40 min on 2 cores) in `pytest_collection_finish`, before any
test starts, so a test's timeout never covers the Go build. If the build or the start fails, every e2e test FAILS
with the reason; nothing skips.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from offpeak_e2e import build
from offpeak_e2e.controlplane import StartError
from offpeak_e2e.harness import E2ECluster, e2e_settings, reap_stale_sessions, session_cluster_name

_BUILD_ERROR: list[str] = []


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.e2e)


def pytest_collection_finish(session: pytest.Session) -> None:
    here = Path(__file__).parent
    if not any(here in Path(str(i.fspath)).parents for i in session.items):
        return
    missing = build.missing()
    if not missing:
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    echo = (lambda m: reporter.write_line(m)) if reporter else print
    echo(f"[e2e] building control-plane binaries ({', '.join(missing)}) from Go modules; first run is slow")
    start = time.monotonic()
    try:
        build.build_all(echo=echo)
    except build.BuildError as e:
        _BUILD_ERROR.append(str(e))
        echo(f"[e2e] build FAILED: {e}")
    echo(f"[e2e] build stage: {time.monotonic() - start:.0f}s")


@pytest.fixture(scope="session")
def e2e_cluster(request: pytest.FixtureRequest) -> Iterator[E2ECluster]:
    """A running local cluster (control plane + kwok GPU nodes + Prometheus + offpeak services) for the session.

    Environment knobs: OFFPEAK_E2E_NODES (default 4), OFFPEAK_E2E_KEEP=1 (leave it running afterwards),
    OFFPEAK_E2E_WITHOUT=predictor,... (services not to start; tests needing them then fail).
    """
    if _BUILD_ERROR:
        pytest.fail(f"the local control plane could not be built: {_BUILD_ERROR[0]}", pytrace=False)
    reap_stale_sessions(echo=lambda m: print(m, flush=True))
    try:
        cluster = E2ECluster.start(e2e_settings(name=session_cluster_name("pytest")),
                                   echo=lambda m: print(m, flush=True))
    except StartError as e:
        pytest.fail(f"the local cluster did not start: {e}", pytrace=False)
    try:
        yield cluster
    finally:
        if os.environ.get("OFFPEAK_E2E_KEEP") != "1":
            cluster.stop()


@pytest.fixture
def e2e_namespace(e2e_cluster: E2ECluster) -> Iterator[str]:
    """A fresh namespace for one test, deleted afterwards."""
    ns = e2e_cluster.new_namespace()
    try:
        yield ns
    finally:
        e2e_cluster.delete_namespace(ns)
