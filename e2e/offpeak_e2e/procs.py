"""Start and stop the cluster's processes so that nothing is left running.

Every process runs in its own session (process group), its pid and command line are recorded in
``<run>/pids/<name>.json``, and `stop_all` signals whole process groups, checking first that the pid still belongs
to the process we started (pids get reused).
"""

from __future__ import annotations

import json
import os
import random
import signal
import socket
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Proc:
    """A process started by us."""

    name: str
    pid: int
    argv: tuple[str, ...]
    log: Path


_EPHEMERAL_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")
_LOWEST_PORT = 10_000  # above the well-known and most registered service ports
_handed_out: set[int] = set()
# "LOW:HIGH": the ports this process hands out (parallel test processes each get their own band, so two of them
# never pick the same free port before either binds it)
PORT_BAND_ENV = "OFFPEAK_PORT_BAND"
_BAND_WIDTH = 2_000


def port_band(index: int, *, ephemeral: tuple[int, int] | None = None) -> str:
    """The `PORT_BAND_ENV` value of parallel test process `index` (0, 1, ...): disjoint bands below the
    kernel's ephemeral range, wrapping around when there are more processes than bands."""
    low, _ = ephemeral or ephemeral_range()
    bands = max(1, (low - _LOWEST_PORT) // _BAND_WIDTH)
    start = _LOWEST_PORT + (index % bands) * _BAND_WIDTH
    return f"{start}:{start + _BAND_WIDTH}"


def _band(ephemeral: tuple[int, int]) -> tuple[int, int]:
    """Where to draw ports from: this process's band when it has one, else everything below the ephemeral range."""
    low, high = _LOWEST_PORT, ephemeral[0]
    given = os.environ.get(PORT_BAND_ENV, "")
    if given:
        try:
            a, b = (int(x) for x in given.split(":"))
            low, high = max(low, a), min(high, b)
        except ValueError:
            pass
    return low, high


def ephemeral_range(path: Path = _EPHEMERAL_FILE) -> tuple[int, int]:
    """The ports the kernel picks from for outgoing connections and for ``bind(0)`` (Linux's default when unknown)."""
    try:
        low, high = (int(x) for x in path.read_text().split())
        return low, high
    except (OSError, ValueError):
        return 32768, 60999


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port(*, ephemeral: tuple[int, int] | None = None, rng: random.Random | None = None) -> int:
    """A free TCP port on 127.0.0.1 that the kernel does not hand to anyone else before the service binds it.

    A port from ``bind(0)`` lies in the kernel's ephemeral range, where any outgoing connection made in the
    meantime (a kubectl call, a client's keep-alive) may take it as its local port: a service started minutes
    later then fails with "address already in use". So the port is drawn below that range, where the kernel never
    hands ports out by itself, and no port is given twice in this process.
    """
    low, high = _band(ephemeral or ephemeral_range())
    rng = rng or random.SystemRandom()
    if high - low >= 100:
        for _ in range(200):
            port = rng.randrange(low, high)
            if port not in _handed_out and _bindable(port):
                _handed_out.add(port)
                return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:  # a machine with no room below the range
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def port_open(port: int, *, host: str = "127.0.0.1") -> bool:
    """Whether something accepts connections on host:port."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(0.5)
        return s.connect_ex((host, port)) == 0


def _cmdline(pid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return None


def alive(proc: Proc) -> bool:
    """Whether `proc` is still running (and is still the process we started, not a reused pid)."""
    cmd = _cmdline(proc.pid)
    if not cmd:
        return False
    try:
        state = Path(f"/proc/{proc.pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z" and proc.argv[0] in cmd


class Supervisor:
    """Starts processes under a run directory and remembers them in pid files."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        self.pid_dir = run_dir / "pids"
        self.log_dir = run_dir / "logs"
        self.pid_dir.mkdir(parents=True, exist_ok=True)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self._children: dict[str, subprocess.Popen[bytes]] = {}

    def start(
        self, name: str, argv: Sequence[str], *, env: Mapping[str, str] | None = None, cwd: Path | None = None,
        wrapper: Sequence[str] = (),
    ) -> Proc:
        """Start `argv` in its own process group, logging to ``logs/<name>.log``. A `wrapper` (a command that
        ends by exec-ing the arguments after it) runs first; `argv` is what gets recorded, so the process is
        still recognised once the wrapper has become it."""
        log = self.log_dir / f"{name}.log"
        self.pid_dir.mkdir(parents=True, exist_ok=True)
        with log.open("ab") as out:
            popen = subprocess.Popen(
                [*wrapper, *argv], stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                env={**os.environ, **(env or {})}, cwd=cwd, start_new_session=True,
            )
        self._children[name] = popen
        proc = Proc(name=name, pid=popen.pid, argv=tuple(argv), log=log)
        (self.pid_dir / f"{name}.json").write_text(
            json.dumps({"name": name, "pid": proc.pid, "argv": list(argv), "log": str(log)})
        )
        return proc

    def procs(self) -> list[Proc]:
        """The processes recorded in pid files (running or not)."""
        found = []
        for f in sorted(self.pid_dir.glob("*.json")):
            try:
                d = json.loads(f.read_text())
                found.append(Proc(name=d["name"], pid=int(d["pid"]), argv=tuple(d["argv"]), log=Path(d["log"])))
            except (OSError, ValueError, KeyError):
                f.unlink(missing_ok=True)
        return found

    def get(self, name: str) -> Proc | None:
        return next((p for p in self.procs() if p.name == name), None)

    def exited(self, name: str) -> int | None:
        """Exit code of a child we started in this Python process, or None while it runs / if unknown."""
        child = self._children.get(name)
        return None if child is None else child.poll()

    def stop(self, name: str, *, timeout: float = 10.0) -> None:
        """Stop one recorded process group: SIGTERM, then SIGKILL after `timeout` seconds."""
        proc = self.get(name)
        if proc is not None:
            _terminate([proc], timeout=timeout)
            (self.pid_dir / f"{name}.json").unlink(missing_ok=True)
        child = self._children.pop(name, None)
        if child is not None:
            try:
                child.wait(timeout=1)
            except subprocess.TimeoutExpired:
                pass

    def kill(self, name: str) -> None:
        """SIGKILL one recorded process group at once (a crash, for fault-injection tests)."""
        proc = self.get(name)
        if proc is not None and alive(proc):
            _signal_group(proc, signal.SIGKILL)
        child = self._children.pop(name, None)
        if child is not None:
            child.wait(timeout=10)
        (self.pid_dir / f"{name}.json").unlink(missing_ok=True)

    def stop_all(self, *, timeout: float = 10.0, order: Sequence[str] = ()) -> None:
        """Stop every recorded process: names in `order` first (in that order), then the rest together."""
        procs = self.procs()
        rank = {n: i for i, n in enumerate(order)}
        first = sorted((p for p in procs if p.name in rank), key=lambda p: rank[p.name])
        rest = [p for p in procs if p.name not in rank]
        if rest:
            _terminate(rest, timeout=timeout)
        for p in first:
            _terminate([p], timeout=timeout)
        for p in procs:
            (self.pid_dir / f"{p.name}.json").unlink(missing_ok=True)
        for child in self._children.values():
            try:
                child.wait(timeout=1)
            except subprocess.TimeoutExpired:
                pass
        self._children.clear()


def _signal_group(proc: Proc, sig: int) -> None:
    try:
        os.killpg(proc.pid, sig)  # start_new_session made pid the group id
    except ProcessLookupError:
        pass
    except PermissionError:
        try:
            os.kill(proc.pid, sig)
        except ProcessLookupError:
            pass


def _terminate(procs: Sequence[Proc], *, timeout: float) -> None:
    started = [p for p in procs if alive(p)]
    running = list(started)
    for p in running:
        _signal_group(p, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while running and time.monotonic() < deadline:
        time.sleep(0.1)
        running = [p for p in running if alive(p)]
    for p in running:
        _signal_group(p, signal.SIGKILL)
    # children left in the group after the leader exits (e.g. a shell's children)
    for p in started:
        try:
            os.killpg(p.pid, 0)
        except (ProcessLookupError, PermissionError):
            continue
        _signal_group(p, signal.SIGKILL)
