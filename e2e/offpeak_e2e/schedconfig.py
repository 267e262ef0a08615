"""KubeSchedulerConfiguration documents for the two local schedulers (pure builders)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

OFFPEAK_SCHEDULER = "offpeak-scheduler"


def default_scheduler_config(*, kubeconfig: Path) -> dict[str, Any]:
    """The stock scheduler (profile ``default-scheduler``), no leader election on a single local control plane."""
    return {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "clientConnection": {"kubeconfig": str(kubeconfig), "qps": 200, "burst": 400},
        "leaderElection": {"leaderElect": False},
        "profiles": [{"schedulerName": "default-scheduler"}],
    }


def offpeak_scheduler_config(
    *, kubeconfig: Path, extender_url: str, weight: int = 5, http_timeout_s: float = 5.0
) -> dict[str, Any]:
    """The second scheduler: profile ``offpeak-scheduler`` whose filter/prioritize call offpeak's extender.

    ``ignorable: true`` keeps pods schedulable when the extender is down; ``nodeCacheCapable: true`` sends only
    node names (the extender keeps its own node cache). ``managedResources`` makes the scheduler call the extender
    only for pods that request GPUs.
    """
    return {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "clientConnection": {"kubeconfig": str(kubeconfig), "qps": 200, "burst": 400},
        "leaderElection": {"leaderElect": False, "resourceName": OFFPEAK_SCHEDULER},
        "profiles": [{"schedulerName": OFFPEAK_SCHEDULER}],
        "extenders": [
            {
                "urlPrefix": extender_url.rstrip("/"),
                "filterVerb": "filter",
                "prioritizeVerb": "prioritize",
                "weight": weight,
                "enableHTTPS": False,
                "nodeCacheCapable": True,
                "ignorable": True,
                "httpTimeout": f"{http_timeout_s:g}s",
                "managedResources": [{"name": "nvidia.com/gpu", "ignoredByScheduler": False}],
            }
        ],
    }


def dump(config: dict[str, Any], path: Path) -> Path:
    """Write a config as YAML; return the path."""
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path
