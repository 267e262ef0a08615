"""What the loopback benchmarks share: a free port, waiting for a child server's /readyz, its RSS, percentiles, and
a Prometheus counter read back from its /metrics by label."""

from __future__ import annotations

import http.client
import socket
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_ready(port: int, *, timeout: float = 120.0, proc: subprocess.Popen[bytes] | None = None,
               log: Path | None = None) -> None:
    """Poll GET /readyz on 127.0.0.1 until 200; fail early, with the tail of `log`, when `proc` has exited."""
    def tail() -> str:
        return f":\n{log.read_text()[-2000:]}" if log is not None and log.exists() else ""

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"the bench server exited ({proc.returncode}){tail()}")
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            conn.request("GET", "/readyz")
            if conn.getresponse().status == 200:
                return
        except OSError:
            pass
        time.sleep(0.1)
    raise RuntimeError(f"the bench server was not ready within {timeout:g} s{tail()}")


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for {pid}")


def pct(values: Sequence[float], q: float) -> float:
    return float(np.percentile(values, q))


def counter_by_labels(port: int, name: str, labels: Sequence[str]) -> dict[str, float]:
    """The samples of counter `name` on 127.0.0.1:port/metrics, keyed by their `labels` values joined by spaces."""
    from prometheus_client.parser import text_string_to_metric_families

    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.request("GET", "/metrics")
    text = conn.getresponse().read().decode()
    conn.close()
    return {" ".join(s.labels[k] for k in labels): s.value
            for family in text_string_to_metric_families(text) for s in family.samples if s.name == name}
