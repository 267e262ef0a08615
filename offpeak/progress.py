"""Tell offpeak how far a training run got and how long one step takes. Optional, standard library only.

offpeak learns each job's real step time from what it measures when the pod ends. Without help it can only
divide the pod's wall time (minus the job's declared start-up) by the steps; training code that calls this
helper reports the steady-state step time itself, so data loading, compilation and warm-up are not counted.

    from offpeak import progress

    tracker = progress.Tracker()           # reads OFFPEAK_PROGRESS_FILE / OFFPEAK_COMPLETED_STEPS from the pod
    for batch in loader:
        train_step(batch)
        tracker.step()                      # counts and times the step; writes at most every 10 s
        if time_to_checkpoint():
            save_checkpoint()
            tracker.checkpoint()            # the step a restart resumes from (written at once)
    tracker.flush()                         # also done at interpreter exit and by `with Tracker() as tracker:`

The report is one small JSON object written to the pod's termination message file (`/dev/termination-log`,
what Kubernetes shows in `state.terminated.message`; at most 4 KiB), overwritten on every write: the final record,
read when the pod ends. While the pod runs, the same report also goes to the operator's status server when the
pod was given one (Kubeflow Trainer's protocol: `KUBEFLOW_TRAINER_SERVER_URL`, a token file and a CA file; see
`LiveReporter`), from a background thread, so the job's status shows its measured pace and ETA while it trains.
Outside a training pod (no such file, no such URL) every call is a no-op, and a failed write or send never
interrupts training. This file is self-contained: copy it into an image without offpeak if you like.
"""

from __future__ import annotations

import atexit
import json
import math
import os
import signal
import ssl
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

FORMAT_KEY = "offpeak_progress"  # marks the JSON object as ours, with the format version as its value
FORMAT_VERSION = 1
DEFAULT_PATH = "/dev/termination-log"  # the Kubernetes default terminationMessagePath
PATH_ENV = "OFFPEAK_PROGRESS_FILE"  # set by the operator on training pods
START_STEP_ENV = "OFFPEAK_COMPLETED_STEPS"  # steps done by earlier attempts (set by the operator)
TOTAL_STEPS_ENV = "OFFPEAK_TOTAL_STEPS"
MAX_BYTES = 4096  # Kubernetes keeps at most 4 KiB of a termination message
# the status server the operator gives a pod (Kubeflow Trainer's names: merged SERVER_*, KEP-2779's STATUS_*)
STATUS_ENV_PREFIXES = ("KUBEFLOW_TRAINER_SERVER", "KUBEFLOW_TRAINER_STATUS")
WORKER_ENV = "OFFPEAK_WORKER_INDEX"  # only worker 0 reports live (its pace is the job's)
SEND_TIMEOUT_SECONDS = 5.0
# the trainerStatus metrics a live report carries: the HF callback's names for the step, then offpeak's own
METRIC_STEPS, METRIC_TOTAL = "current_step", "total_steps"
METRIC_STEP_SECONDS, METRIC_ATTEMPT_STEPS = "step_seconds", "attempt_steps"
METRIC_CHECKPOINT, METRIC_STARTUP = "checkpoint_step", "startup_seconds"


@dataclass(frozen=True, slots=True)
class Progress:
    """One progress report. Steps are absolute (they count earlier attempts' steps too)."""

    steps: int  # the step the run has reached
    attempt_steps: int  # steps done by this process
    step_seconds: float | None  # mean seconds per step after the first one (None until two steps are done)
    startup_seconds: float | None = None  # tracker start -> end of the first step (start-up and warm-up)
    checkpoint_steps: int | None = None  # the step the last checkpoint covers (where a restart resumes)
    total_steps: int | None = None

    def to_json(self) -> str:
        body: dict[str, Any] = {FORMAT_KEY: FORMAT_VERSION, "steps": self.steps, "attempt_steps": self.attempt_steps}
        for key in ("step_seconds", "startup_seconds", "checkpoint_steps", "total_steps"):
            value = getattr(self, key)
            if value is not None:
                body[key] = round(value, 9) if isinstance(value, float) else value
        return json.dumps(body, separators=(",", ":"))

    def trainer_status(self, *, now: datetime | None = None) -> dict[str, Any]:
        """The live report in Kubeflow Trainer's shape (`{"trainerStatus": ...}`): progress and ETA where the
        total is known, and the fields above as metrics (`current_step`, `total_steps` as the HF callback names
        them; `step_seconds`, `attempt_steps`, `checkpoint_step`, `startup_seconds`)."""
        metrics = {METRIC_STEPS: self.steps, METRIC_TOTAL: self.total_steps, METRIC_STEP_SECONDS: self.step_seconds,
                   METRIC_ATTEMPT_STEPS: self.attempt_steps, METRIC_CHECKPOINT: self.checkpoint_steps,
                   METRIC_STARTUP: self.startup_seconds}
        status: dict[str, Any] = {"lastUpdatedTime": (now or datetime.now(UTC)).isoformat(),
                                  "metrics": [{"name": k, "value": f"{v:.9g}" if isinstance(v, float) else str(v)}
                                              for k, v in metrics.items() if v is not None]}
        if self.total_steps:
            status["progressPercentage"] = max(0, min(100, 100 * self.steps // self.total_steps))
            if self.step_seconds is not None:
                status["estimatedRemainingSeconds"] = int(max(0, self.total_steps - self.steps) * self.step_seconds)
        return {"trainerStatus": status}


def _count(raw: Any) -> int | None:
    if isinstance(raw, bool) or not isinstance(raw, int) or raw < 0:
        return None
    return raw


def _seconds(raw: Any) -> float | None:
    if isinstance(raw, bool) or not isinstance(raw, (int, float)) or not math.isfinite(raw) or raw < 0:
        return None
    return float(raw)


def parse(text: str | None) -> Progress | None:
    """The report in a termination message, or None when it is not one (any other text, a bad value)."""
    if not text or FORMAT_KEY not in text:
        return None
    try:
        body = json.loads(text.strip())
    except ValueError:
        return None
    if not isinstance(body, dict) or body.get(FORMAT_KEY) != FORMAT_VERSION:
        return None
    steps, attempt_steps = _count(body.get("steps")), _count(body.get("attempt_steps"))
    if steps is None or attempt_steps is None:
        return None
    step_seconds = _seconds(body.get("step_seconds"))
    return Progress(steps=steps, attempt_steps=attempt_steps, step_seconds=step_seconds or None,
                    startup_seconds=_seconds(body.get("startup_seconds")),
                    checkpoint_steps=_count(body.get("checkpoint_steps")),
                    total_steps=_count(body.get("total_steps")))  # fmt: skip


def _env_int(name: str) -> int | None:
    try:
        value = int(os.environ.get(name, ""))
    except ValueError:
        return None
    return value if value >= 0 else None


def default_path() -> str | None:
    """$OFFPEAK_PROGRESS_FILE, else /dev/termination-log when it exists (inside a pod), else None (no-op)."""
    env = os.environ.get(PATH_ENV)
    if env:
        return env
    return DEFAULT_PATH if os.path.exists(DEFAULT_PATH) else None


def _status_env(environ: Mapping[str, str], suffix: str) -> str:
    return next((environ[f"{p}_{suffix}"] for p in STATUS_ENV_PREFIXES if environ.get(f"{p}_{suffix}")), "")


class LiveReporter:
    """Sends reports to the operator's status server while the pod runs: HTTPS to the pod's status URL, the token
    file's content as a bearer token (read on every send), the server checked against the CA file. A background
    thread sends, so training never waits on the network; only the latest report is kept, and a failed send is
    dropped (the next report goes; the termination message stays the final record)."""

    def __init__(self, *, url: str, token_file: str, ca_file: str = "", timeout: float = SEND_TIMEOUT_SECONDS,
                 send: Callable[[bytes], None] | None = None) -> None:  # fmt: skip
        self.url, self.token_file, self.ca_file, self.timeout = url, token_file, ca_file, timeout
        self._send = send or self._post
        self._pending: bytes | None = None
        self._busy = False
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None
        self.sent = 0
        self.failed = 0

    @classmethod
    def from_env(cls, environ: Mapping[str, str] = os.environ) -> LiveReporter | None:
        """The reporter the pod's environment asks for; None without a status URL and token, or on a worker other
        than worker 0 (the data-parallel workers share one pace)."""
        url, token = _status_env(environ, "URL"), _status_env(environ, "TOKEN")
        if not url or not token or environ.get(WORKER_ENV, "0") not in ("", "0"):
            return None
        return cls(url=url, token_file=token, ca_file=_status_env(environ, "CA_CERT"))

    def submit(self, report: Progress) -> None:
        """Queue `report` (replacing one not sent yet); returns at once."""
        body = json.dumps(report.trainer_status(), separators=(",", ":")).encode()
        with self._cond:
            self._pending = body
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="offpeak-progress", daemon=True)
                self._thread.start()
            self._cond.notify()

    def drain(self, timeout: float = SEND_TIMEOUT_SECONDS) -> bool:
        """Wait until the queued report is sent (or failed); False when `timeout` passed first."""
        with self._cond:
            return self._cond.wait_for(lambda: self._pending is None and not self._busy, timeout=timeout)

    def _run(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._pending is not None)
                body, self._pending, self._busy = self._pending or b"", None, True
            try:
                self._send(body)
                self.sent += 1
            except Exception as e:  # noqa: BLE001 - never break training over a report
                self.failed += 1
                if self.failed == 1:
                    print(f"offpeak.progress: live report to {self.url} failed ({e}); retrying with the next one",
                          file=sys.stderr)
            with self._cond:
                self._busy = False
                self._cond.notify_all()

    def _post(self, body: bytes) -> None:
        with open(self.token_file, encoding="utf-8") as f:
            token = f.read().strip()
        context = ssl.create_default_context(cafile=self.ca_file or None)
        request = urllib.request.Request(self.url, data=body, method="POST", headers={
            "Authorization": f"Bearer {token}", "Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=self.timeout, context=context) as response:  # noqa: S310
            response.read()


class Tracker:
    """Counts and times training steps and writes `Progress` reports. Not thread-safe: call from the loop."""

    def __init__(self, *, path: str | None = None, start_step: int | None = None, total_steps: int | None = None,
                 write_every_seconds: float = 10.0, clock: Callable[[], float] = time.monotonic,
                 at_exit: bool = True, live: LiveReporter | bool = True) -> None:  # fmt: skip
        """`live`: report to the status server too (True: the one the environment names, if any)."""
        self.path = path if path is not None else default_path()
        self.live = LiveReporter.from_env() if live is True else (live or None)
        self.start_step = start_step if start_step is not None else (_env_int(START_STEP_ENV) or 0)
        self.total_steps = total_steps if total_steps is not None else _env_int(TOTAL_STEPS_ENV)
        self.write_every_seconds = write_every_seconds
        self._clock = clock
        self._started = clock()
        self._first_step_end: float | None = None
        self._last_step_end: float | None = None
        self._attempt_steps = 0
        self._checkpoint: int | None = None
        self._last_write: float | None = None
        self.stopping = False  # set by SIGTERM once `catch_sigterm` was called: save a checkpoint and exit
        if at_exit and (self.path or self.live):
            atexit.register(self.close)

    def catch_sigterm(self) -> bool:
        """Turn SIGTERM (an eviction: Kubernetes waits the pod's grace period before SIGKILL) into `stopping`, so
        the loop can save a checkpoint, report it and exit instead of dying mid-step. False where signals cannot
        be caught (not the main thread)."""
        def stop(signum: int, frame: object) -> None:
            self.stopping = True

        try:
            signal.signal(signal.SIGTERM, stop)
        except ValueError:
            return False
        return True

    def step(self, n: int = 1) -> None:
        """Record `n` more finished steps (call after each optimizer step, or every n steps)."""
        if n <= 0:
            return
        now = self._clock()
        if self._first_step_end is None:
            self._first_step_end = now
        self._last_step_end = now
        self._attempt_steps += n
        if self._last_write is None or now - self._last_write >= self.write_every_seconds:
            self.flush()

    def checkpoint(self, step: int | None = None) -> None:
        """Record that a checkpoint covers `step` (default: the step reached) and write the report now."""
        self._checkpoint = self.start_step + self._attempt_steps if step is None else step
        self.flush()

    def report(self) -> Progress:
        step_seconds = None
        if self._first_step_end is not None and self._last_step_end is not None and self._attempt_steps > 1:
            # the first step carries start-up, compilation and warm-up: time the steps after it
            step_seconds = (self._last_step_end - self._first_step_end) / (self._attempt_steps - 1)
        startup = self._first_step_end - self._started if self._first_step_end is not None else None
        return Progress(steps=self.start_step + self._attempt_steps, attempt_steps=self._attempt_steps,
                        step_seconds=step_seconds, startup_seconds=startup, checkpoint_steps=self._checkpoint,
                        total_steps=self.total_steps)  # fmt: skip

    def flush(self) -> None:
        """Write the report now, and queue it for the status server (a no-op without either; a failed write
        disables further writes)."""
        if not self.path and not self.live:
            return
        self._last_write = self._clock()
        report = self.report()
        if self.live is not None:
            self.live.submit(report)
        if not self.path:
            return
        try:
            with open(self.path, "wb") as f:
                f.write(report.to_json().encode()[:MAX_BYTES])
        except OSError:
            self.path = None  # never break training over a report

    def close(self) -> None:
        """Flush, and give the last live report a moment to go (at interpreter exit, and `with`)."""
        self.flush()
        if self.live is not None:
            self.live.drain()

    def __enter__(self) -> Tracker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
