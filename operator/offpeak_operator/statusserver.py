"""The status server: training pods POST their progress here over HTTPS (Kubeflow Trainer's protocol, KEP-2779),
and it lands in the status of the job and attempt their token names. Pods need no API credentials.

A thin adapter over `livereports` (tokens, paths, bodies): the handler checks the token before it reads anything
from the API (401 without one, 403 for one this operator did not make or for another URL), bounds and checks the
body (413, 422 with the field's name), throttles each attempt (429), then writes `status.liveReport` in a worker
thread (404: no such job, 403: the token is of an earlier job of that name, 409: that attempt is over). Every
outcome is counted (`offpeak_status_reports_total{outcome}`). It runs on its own event loop in a thread beside
kopf's (`StatusServer.start`), and on every replica: reports are written through the API, so any replica may
take them.
"""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urlsplit

from aiohttp import web

from offpeak_operator import names, statustls
from offpeak_operator.livereports import (MAX_BODY_BYTES, PATH_PREFIX, Claim, PodParts, ReportError, TrainerStatus,
                                          bearer, mint, parse_body, pod_parts, to_status, verify)
from offpeak_operator.metrics import OperatorMetrics
from offpeak_operator.settings import StatusServerSettings

log = logging.getLogger(__name__)
KEY_BYTES = 32
MAX_THROTTLED_SUBJECTS = 10_000  # attempts whose last report time is remembered (the oldest forgotten first)


class StatusChannel:
    """The operator's half of the channel: the token key, the TLS material and the base URL pods report to."""

    def __init__(self, *, key: bytes, tls: statustls.TlsMaterial, base_url: str) -> None:
        self.key = key
        self.tls = tls
        self.base_url = base_url.rstrip("/")

    @classmethod
    def from_settings(cls, settings: StatusServerSettings) -> StatusChannel:
        """Key and TLS from their files (made there first when absent), else made now and kept in memory (this
        process's own: see `StatusServerSettings`)."""
        base = settings.base_url
        hosts = [urlsplit(base).hostname or "127.0.0.1", "localhost", "127.0.0.1"]
        if settings.tls_dir:
            tls = statustls.load_or_make(settings.tls_dir, hosts=hosts)
        else:
            tls = statustls.generate(hosts=hosts)
        if settings.key_file:
            key = load_or_make_key(settings.key_file)
        else:
            key = secrets.token_bytes(KEY_BYTES)
            log.warning("no status key file: report tokens are this process's own (a restarted operator refuses the "
                        "reports of pods started before it)")
        return cls(key=key, tls=tls, base_url=base)

    def pod_parts(self, claim: Claim) -> PodParts:
        """What one attempt's training pods get: the URL, their token and the CA."""
        return pod_parts(url=self.base_url + claim.path, token=mint(self.key, claim), ca_pem=self.tls.ca_pem)


def load_or_make_key(path: str) -> bytes:
    """The token key in `path` (16 bytes or more); a random one written there first when there is no file."""
    if not os.path.exists(path):
        statustls.write_private(Path(path), secrets.token_hex(KEY_BYTES).encode())
    with open(path, "rb") as f:
        key = f.read().strip()
    if len(key) < 16:
        raise ValueError(f"{path}: a status key needs at least 16 bytes")
    return key


class JobStore(Protocol):
    def get_job(self, namespace: str, name: str) -> dict[str, Any] | None: ...

    def patch_job_status(self, namespace: str, name: str, status: Mapping[str, Any]) -> None: ...


@dataclass(frozen=True, slots=True)
class Outcome:
    code: int
    outcome: str  # the metric's label
    message: str


def record(store: JobStore, claim: Claim, report: TrainerStatus, *, now: datetime) -> Outcome:
    """Write one checked report into the TrainingJob its claim names (blocking: call from a worker thread)."""
    where = f"{claim.plural} {claim.namespace}/{claim.name}"
    if claim.plural != names.PLURAL:
        return Outcome(404, "not_found", f"{claim.plural} do not report here")
    job = store.get_job(claim.namespace, claim.name)
    if job is None:
        return Outcome(404, "not_found", f"no {where}")
    if (job.get("metadata") or {}).get("uid") != claim.uid:
        return Outcome(403, "bad_token", f"the token is of an earlier {where}, not of the one there now")
    attempt = int((job.get("status") or {}).get("attempts") or 0)
    if attempt != claim.attempt:
        return Outcome(409, "stale_attempt", f"attempt {claim.attempt} of {where} is over (now: attempt {attempt})")
    store.patch_job_status(claim.namespace, claim.name,
                           {"liveReport": to_status(report, attempt=claim.attempt, received_at=now)})
    return Outcome(200, "accepted", f"progress of {where} attempt {claim.attempt} recorded")


class Throttle:
    """At most one accepted report per attempt every `interval` seconds (a loop that reports every step must not
    turn into an API write per step)."""

    def __init__(self, interval: float, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.interval = interval
        self._clock = clock
        self._last: OrderedDict[str, float] = OrderedDict()
        self._lock = threading.Lock()

    def wait_seconds(self, subject: str) -> float:
        """Seconds until `subject` may report again (0: now)."""
        with self._lock:
            last = self._last.get(subject)
        return 0.0 if last is None else max(0.0, self.interval - (self._clock() - last))

    def accepted(self, subject: str) -> None:
        with self._lock:
            self._last[subject] = self._clock()
            self._last.move_to_end(subject)
            while len(self._last) > MAX_THROTTLED_SUBJECTS:
                self._last.popitem(last=False)


REASONS = {200: "OK", 401: "Unauthorized", 403: "Forbidden", 404: "NotFound", 409: "Conflict",
           413: "RequestEntityTooLarge", 422: "Invalid", 429: "TooManyRequests", 500: "InternalError"}


def _answer(code: int, message: str, **headers: str) -> web.Response:
    """A Kubernetes `Status` body, as Kubeflow Trainer's server answers."""
    body = {"kind": "Status", "apiVersion": "v1", "status": "Success" if code < 400 else "Failure",
            "message": message, "reason": REASONS.get(code, "Unknown"), "code": code}
    return web.json_response(body, status=code, headers=headers or None)


def build_app(*, channel: StatusChannel, store: JobStore, metrics: OperatorMetrics, throttle: Throttle,
              clock: Callable[[], datetime] = lambda: datetime.now(UTC)) -> web.Application:
    """The aiohttp application: `POST <PATH_PREFIX>/<ns>/<plural>/<name>/attempts/<n>/status`, and /healthz."""

    def done(code: int, outcome: str, message: str, **headers: str) -> web.Response:
        metrics.status_reports_total.labels(outcome=outcome).inc()
        if code >= 400:
            log.info("status report refused (%d %s): %s", code, outcome, message)
        return _answer(code, message, **headers)

    async def report(request: web.Request) -> web.Response:
        token = bearer(request.headers.get("Authorization"))
        if token is None:
            return done(401, "missing_token", "no bearer token: send the content of the file named by "
                        "KUBEFLOW_TRAINER_SERVER_TOKEN as 'Authorization: Bearer <token>'")
        claim = verify(channel.key, token)
        if claim is None:
            return done(403, "bad_token", "the token was not made by this operator (wrong, changed, or made by "
                        "an operator process since restarted without its key)")
        if claim.path != request.path:
            return done(403, "bad_token", f"the token is for {claim.path}, not for {request.path}")
        wait = throttle.wait_seconds(claim.subject)
        if wait > 0:
            return done(429, "throttled", f"one report per {throttle.interval:g}s per attempt",
                        **{"Retry-After": str(max(1, round(wait)))})
        try:
            parsed = parse_body(await request.read())
        except web.HTTPRequestEntityTooLarge:
            return done(413, "too_large", f"body: larger than {MAX_BODY_BYTES} bytes")
        except ReportError as e:
            return done(422, "invalid", str(e))
        if parsed is None:
            return done(200, "empty", "no trainerStatus: nothing to record")
        try:
            out = await asyncio.get_running_loop().run_in_executor(None, lambda: record(store, claim, parsed,
                                                                                         now=clock()))
        except Exception:  # noqa: BLE001 - the API failed: the pod reports again later
            log.exception("recording a progress report of %s failed", claim.subject)
            return done(500, "error", "the operator could not record the report; it is safe to send it again")
        if out.code == 200:
            throttle.accepted(claim.subject)
        return done(out.code, out.outcome, out.message)

    async def healthz(_: web.Request) -> web.Response:
        return web.Response(text="ok")

    app = web.Application(client_max_size=MAX_BODY_BYTES)
    app.router.add_post(PATH_PREFIX + "/{namespace}/{plural}/{name}/attempts/{attempt}/status", report)
    app.router.add_get("/healthz", healthz)
    return app


class StatusServer:
    """Serves an app over TLS on its own event loop in a daemon thread, so kopf's loop never waits on it."""

    def __init__(self, app: web.Application, *, host: str, port: int, channel: StatusChannel) -> None:
        self.app, self.host, self.port, self.channel = app, host, port, channel
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: web.AppRunner | None = None
        self._thread: threading.Thread | None = None

    def start(self, *, any_port_if_taken: bool = False) -> int:
        """Bind and serve; returns the bound port. A bind error (the port is taken) is raised at once, or, with
        `any_port_if_taken`, a free port is taken instead (a local operator whose pods are told the URL)."""
        loop = asyncio.new_event_loop()
        runner = web.AppRunner(self.app, access_log=None)
        loop.run_until_complete(runner.setup())
        context = self.channel.tls.server_context()
        try:
            try:
                loop.run_until_complete(web.TCPSite(runner, self.host, self.port, ssl_context=context).start())
            except OSError as e:
                if not any_port_if_taken:
                    raise
                log.warning("status port %d is taken (%s): serving live progress on a free port", self.port, e)
                loop.run_until_complete(web.TCPSite(runner, self.host, 0, ssl_context=context).start())
        except OSError:
            loop.run_until_complete(runner.cleanup())
            loop.close()
            raise
        self._loop, self._runner = loop, runner
        self._thread = threading.Thread(target=loop.run_forever, name="offpeak-status-server", daemon=True)
        self._thread.start()
        bound = runner.addresses[0][1] if runner.addresses else self.port
        log.info("status server on port %d; pods report to %s", bound, self.channel.base_url)
        return int(bound)

    def stop(self) -> None:
        if self._loop is None or self._runner is None or self._thread is None:
            return
        asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(timeout=10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._loop.close()
        self._loop = None
