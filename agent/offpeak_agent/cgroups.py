"""Map a process to its Kubernetes pod through `/proc/<pid>/cgroup` (cgroup v1 and v2, cgroupfs and systemd)."""

from __future__ import annotations

import re
from pathlib import Path

# cgroupfs:  /kubepods/burstable/pod0f1e2d3c-.../<container-id>
# systemd:   /kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod0f1e2d3c_....slice/cri-containerd-x.scope
_POD = re.compile(r"pod([0-9a-fA-F]{8}[-_][0-9a-fA-F]{4}[-_][0-9a-fA-F]{4}[-_][0-9a-fA-F]{4}[-_][0-9a-fA-F]{12})")


def pod_uid_from_cgroup(text: str) -> str | None:
    """The pod UID in a cgroup file's text, dashes restored; None for processes outside pods."""
    for line in text.splitlines():
        path = line.rsplit(":", 1)[-1]
        if "kubepods" not in path:
            continue
        m = _POD.search(path)
        if m:
            return m.group(1).replace("_", "-").lower()
    return None


def pod_uid_of_pid(pid: int, *, proc_root: Path = Path("/proc")) -> str | None:
    """The pod UID of `pid`, or None when it is not in a pod or has exited."""
    try:
        return pod_uid_from_cgroup((proc_root / str(pid) / "cgroup").read_text())
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
