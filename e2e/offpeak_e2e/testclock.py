"""What each end-to-end test costs: wall seconds and the CPU seconds of the test process's whole tree.

The local cluster's processes (control plane, Prometheus, offpeak's services) are children of the pytest process
that started them, and every `kubectl` it forks is too, so the CPU a test spends is the growth of its process tree's
CPU time (live processes' own time plus what their reaped children used). A cluster started by a fixture is charged
to the test that first needed it, which is what that test really costs the suite.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path

_TICKS = os.sysconf("SC_CLK_TCK")


def _proc_stats(proc: Path = Path("/proc")) -> tuple[dict[int, list[int]], dict[int, int]]:
    """Each process's children, and its CPU ticks (own and reaped children's)."""
    children: dict[int, list[int]] = {}
    ticks: dict[int, int] = {}
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            rest = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue  # gone meanwhile
        pid, ppid = int(entry.name), int(rest[1])
        children.setdefault(ppid, []).append(pid)
        ticks[pid] = sum(int(x) for x in rest[11:15])  # utime, stime, cutime, cstime
    return children, ticks


def tree_cpu_seconds(root: int | None = None, *, exclude: Iterable[int] = (), proc: Path = Path("/proc")) -> float:
    """CPU seconds used so far by process `root` (default: this one) and all its descendants, but for the
    subtrees of the processes in `exclude`."""
    children, ticks = _proc_stats(proc)
    skip = set(exclude)
    total, stack = 0, [root or os.getpid()]
    while stack:
        pid = stack.pop()
        if pid in skip:
            continue
        total += ticks.get(pid, 0)
        stack.extend(children.get(pid, ()))
    return total / _TICKS


def run_dir_pids(run_dir: Path) -> list[int]:
    """The processes a cluster's supervisor recorded in its run dir."""
    pids = []
    for f in (run_dir / "pids").glob("*.json"):
        try:
            pids.append(int(json.loads(f.read_text())["pid"]))
        except (OSError, ValueError, KeyError):
            continue
    return pids


def cluster_cpu_seconds(run_dir: Path, *, proc: Path = Path("/proc")) -> float:
    """CPU seconds used so far by a cluster's running processes and their children."""
    return sum(tree_cpu_seconds(pid, proc=proc) for pid in run_dir_pids(run_dir))


def machine_cpu_seconds(stat: Path = Path("/proc/stat")) -> float:
    """CPU seconds every core of the machine has been busy since boot (all processes, ours or not)."""
    fields = stat.read_text().splitlines()[0].split()[1:]
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(x) for x in fields[:8])
    return (user + nice + system + irq + softirq + steal) / _TICKS


@dataclass(frozen=True)
class TestCost:
    """One test's wall and CPU seconds (setup, call and teardown together)."""

    test: str
    wall_s: float
    cpu_s: float
    outcome: str
    started: float = 0.0  # wall-clock time it started (the timeline of parallel lanes)


class Clock:
    """Times one test at a time: `start()` before it, `stop(test, outcome)` after it. The processes of a shared
    cluster (`exclude_cluster`) are left out: whichever test process started them, they serve every test."""

    def __init__(self) -> None:
        self.costs: list[TestCost] = []
        self._started: tuple[float, float, float] | None = None
        self._shared: list[Path] = []

    def exclude_cluster(self, run_dir: Path) -> None:
        if run_dir not in self._shared:
            self._shared.append(run_dir)

    def _cpu(self) -> float:
        return tree_cpu_seconds(exclude=[pid for d in self._shared for pid in run_dir_pids(d)])

    def start(self) -> None:
        self._started = (time.monotonic(), self._cpu(), time.time())

    def stop(self, test: str, outcome: str) -> None:
        if self._started is None:
            return
        wall, cpu, at = self._started
        self._started = None
        self.costs.append(TestCost(test=test, wall_s=time.monotonic() - wall, cpu_s=self._cpu() - cpu,
                                   outcome=outcome, started=at))


def table(costs: Iterable[TestCost], *, top: int | None = None) -> list[str]:
    """A plain-text table, the most expensive (wall) first, with when each started (seconds after the first) and
    a total line."""
    rows = sorted(costs, key=lambda c: c.wall_s, reverse=True)
    first = min((c.started for c in rows), default=0.0)
    lines = [f"{'wall s':>8} {'cpu s':>8} {'at s':>6}  test"]
    lines += [f"{c.wall_s:8.1f} {c.cpu_s:8.1f} {c.started - first:6.0f}  {c.test} ({c.outcome})" for c in rows[:top]]
    lines.append(f"{sum(c.wall_s for c in rows):8.1f} {sum(c.cpu_s for c in rows):8.1f} {'':6}  total of {len(rows)} "
                 "tests")
    return lines


def dump(costs: Iterable[TestCost]) -> str:
    return json.dumps([asdict(c) for c in costs])


def load(text: str) -> list[TestCost]:
    return [TestCost(**c) for c in json.loads(text)]


def write_json(costs: Iterable[TestCost], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps([asdict(c) for c in costs], indent=1))
