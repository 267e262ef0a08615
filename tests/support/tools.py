"""Find the binaries the chart checks need: helm and kube-scheduler (built from Go modules by offpeak_e2e.build) and
promtool (Debian's prometheus package).

Order: an explicit environment variable, then the shared cache `${OFFPEAK_CACHE:-~/.cache/offpeak}/bin/<ver>/`,
then PATH. A missing tool is an error that says how to get it, never a reason to skip a check.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from offpeak_core.datapaths import cache_dir
from offpeak_core.versions import HELM_VERSION
from offpeak_core.versions import KUBERNETES_VERSION as KUBE_VERSION
BUILD_HINT = ".venv/bin/python -m offpeak_e2e.build --only {target}   (Go from the module proxy, a few minutes)"


class ToolMissing(RuntimeError):
    """A binary a chart check needs is not built; the message says how to build it."""


def _find(name: str, *, env: str, version: str, target: str) -> Path:
    explicit = os.environ.get(env)
    if explicit:
        path = Path(explicit).expanduser()
        if path.is_file() and os.access(path, os.X_OK):
            return path
        raise ToolMissing(f"{env}={explicit} is not an executable file")
    pinned = cache_dir() / "bin" / version / name
    if pinned.is_file():
        return pinned
    others = sorted((cache_dir() / "bin").glob(f"*/{name}"), reverse=True)
    if others:
        return others[0]
    on_path = shutil.which(name)
    if on_path:
        return Path(on_path)
    raise ToolMissing(
        f"{name} not found (looked at ${env}, {pinned}, PATH). Build it: {BUILD_HINT.format(target=target)}"
    )


def find_helm() -> Path:
    """helm: $OFFPEAK_HELM, the cache, or PATH."""
    return _find("helm", env="OFFPEAK_HELM", version=HELM_VERSION, target="helm")


def find_kube_scheduler() -> Path:
    """kube-scheduler: $OFFPEAK_KUBE_SCHEDULER, the cache, or PATH."""
    return _find("kube-scheduler", env="OFFPEAK_KUBE_SCHEDULER", version=KUBE_VERSION, target="kubernetes")


def find_promtool() -> Path:
    """promtool: $OFFPEAK_PROMTOOL, PATH, else Debian's `prometheus` package installed the way the e2e suite installs
    Prometheus (offpeak_e2e.prom, as root with apt-get), which ships it."""
    explicit = os.environ.get("OFFPEAK_PROMTOOL")
    if explicit:
        path = Path(explicit).expanduser()
        if path.is_file() and os.access(path, os.X_OK):
            return path
        raise ToolMissing(f"OFFPEAK_PROMTOOL={explicit} is not an executable file")
    found = shutil.which("promtool")
    if found:
        return Path(found)
    from offpeak_e2e.prom import PrometheusMissing, prometheus_binary

    try:
        prometheus_binary(install=True)
    except PrometheusMissing as e:
        raise ToolMissing(f"promtool not found and {e} (as root: apt-get install -y prometheus)") from e
    found = shutil.which("promtool")
    if not found:
        raise ToolMissing("the prometheus package is installed but promtool is not on PATH")
    return Path(found)
