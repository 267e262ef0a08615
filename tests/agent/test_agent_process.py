"""`offpeak agent` as a process on this GPU-less machine: starts, exports no GPU data, alive but not ready."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest


@pytest.mark.slow
def test_agent_without_gpus_exports_no_gpu_data(tmp_path: object) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
    proc = subprocess.Popen([sys.executable, "-m", "offpeak.cli", "agent", "--host", "127.0.0.1", "--port", str(port),
                             "--node-name", "cpu-node", "--interval", "0.5"], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 120  # a wait, not a timing check: the suite may share the machine
        health = None
        while time.time() < deadline:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as r:
                    health = json.load(r)
                    if health["samples"] >= 2:
                        break
            except OSError:
                time.sleep(0.3)
        assert health is not None and health["ok"] and health["samples"] >= 2
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as r:
            text = r.read().decode()
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as r:
                ready_status = r.status
        except urllib.error.HTTPError as e:
            ready_status = e.code
        if health["nvml"]:  # a machine with a GPU driver: real data, ready
            assert ready_status == 200 and 'offpeak_node_online_gpus{node="cpu-node"}' in text
        else:  # absent, not zero: nothing the extender could read as idle GPUs
            assert ready_status == 503
            assert 'offpeak_agent_nvml_up{node="cpu-node"} 0.0' in text
            assert "offpeak_node_online_gpus{" not in text and "offpeak_node_gpus{" not in text
    finally:
        proc.terminate()
        proc.wait(timeout=10)
