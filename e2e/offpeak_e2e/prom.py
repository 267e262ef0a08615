"""Prometheus for the local cluster: installed from Debian when missing, loopback only, short scrape interval."""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import yaml


class PrometheusMissing(RuntimeError):
    """Prometheus is not installed and could not be installed."""


# apt's own lock is taken per command and fails at once when held: test processes that start clusters together
# (the shared one and the demo's) queue on this one instead, and apt waits for any other apt user up to the timeout.
_INSTALL_LOCK = Path(tempfile.gettempdir()) / "offpeak-prometheus-install.lock"
_APT_LOCK_TIMEOUT_S = 600


def prometheus_binary(*, install: bool = True) -> Path:
    """Path of the prometheus binary; ``apt-get install prometheus`` first when missing and we are root (one
    process at a time: the others find it installed)."""
    found = shutil.which("prometheus")
    if found:
        return Path(found)
    if not install:
        raise PrometheusMissing("prometheus is not installed (apt-get install -y prometheus)")
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        raise PrometheusMissing("prometheus is not installed and cannot apt-get it here; install it first")
    with _INSTALL_LOCK.open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if found := shutil.which("prometheus"):  # another process installed it while this one waited
            return Path(found)
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        wait = f"DPkg::Lock::Timeout={_APT_LOCK_TIMEOUT_S}"
        for cmd in (["apt-get", "-o", wait, "update", "-q"],
                    ["apt-get", "-o", wait, "install", "-y", "-q", "--no-install-recommends", "prometheus"]):
            proc = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
            if proc.returncode != 0:
                raise PrometheusMissing(f"`{' '.join(cmd)}` failed: {proc.stderr.strip()[-500:]}")
    found = shutil.which("prometheus")
    if not found:
        raise PrometheusMissing("apt-get installed prometheus but it is not on PATH")
    return Path(found)


def config(*, targets: dict[str, str], scrape_interval_s: float = 2.0) -> dict:
    """Scrape config: one job per `targets` entry (job name -> host:port)."""
    interval = f"{scrape_interval_s:g}s"
    return {
        "global": {"scrape_interval": interval, "evaluation_interval": interval},
        "scrape_configs": [
            {"job_name": job, "scrape_interval": interval, "static_configs": [{"targets": [target]}]}
            for job, target in sorted(targets.items())
        ],
    }


def argv(*, binary: Path, config_file: Path, data_dir: Path, port: int) -> list[str]:
    """Command line of a loopback Prometheus."""
    return [
        str(binary), f"--config.file={config_file}", f"--storage.tsdb.path={data_dir}",
        f"--web.listen-address=127.0.0.1:{port}", "--storage.tsdb.retention.time=2d", "--web.enable-lifecycle",
        "--log.level=warn",
    ]


def write_config(path: Path, *, targets: dict[str, str], scrape_interval_s: float = 2.0) -> Path:
    path.write_text(yaml.safe_dump(config(targets=targets, scrape_interval_s=scrape_interval_s), sort_keys=False))
    return path
