"""Bounded soak of the extender: mixed valid and invalid traffic from several clients on 127.0.0.1.

A child process serves the real extender app over a 1,000-node store and, meanwhile, does what the informer and
the history refresher do (a pod update every 0.5 s, a refit with fresh history every 20 s). Client threads
(each with its own keep-alive connection, like kube-scheduler) send a weighted mix for `--seconds` (default 180)
and stop by themselves: valid filter/prioritize calls, unannotated pods, unknown nodes, bad predictions, bodies
that are not JSON, wrongly typed fields, too deeply nested JSON, more node names than any cluster, bodies over the
size limit, and health/metrics reads. Every kind has an expected answer; anything else (a 5xx, a timeout, a
wrong shape) counts as unexpected.

Prints p50/p99 per kind, answer counts by kind, and the server's RSS before traffic, after a warm-up and at the
end. Aims (issue #16): end RSS within 10 % of the post-warm-up RSS, no unexpected answer. `--strict`: exit 1 on
a miss.

    .venv/bin/python bench/extender_soak.py [--seconds 180] [--clients 4] [--nodes 1000] [--strict]
"""

from __future__ import annotations

import argparse
import gc
import http.client
import json
import multiprocessing
import os
import random
import statistics
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path

import numpy as np
from aiohttp import web

sys.path.insert(0, str(Path(__file__).resolve().parent))
from extender_speed import NOW, bench_app, body, build_store  # noqa: E402
from loopback import counter_by_labels, free_port, rss_mib, wait_ready  # noqa: E402

REFIT_SECONDS = 20.0
WARMUP_SECONDS = 30.0  # covers the first refit: RSS "at start" is that of an extender past its first refresh
RSS_AIM = 0.10


def churn(store: object, n_nodes: int, stop: threading.Event) -> None:
    """What the informer and refresher do meanwhile: pod updates, and a refit with fresh history every 20 s."""
    from offpeak_extender.heap import trim_heap
    from offpeak_extender.store import ClusterStore

    assert isinstance(store, ClusterStore)
    rng = np.random.default_rng(1)
    t = np.arange(NOW - 14 * 86400, NOW, 300.0)
    next_refit = time.monotonic() + REFIT_SECONDS
    i = 0
    while not stop.wait(0.5):
        node = f"gpu-node-{int(rng.integers(n_nodes)):05d}"
        store.upsert_pod({"metadata": {"name": f"churn-{i % 50}", "namespace": "web", "uid": f"churn-{i % 50}",
                                       "labels": {"offpeak.io/workload": "online"}},
                          "spec": {"nodeName": node,
                                   "containers": [{"resources": {"limits": {"nvidia.com/gpu": 1}}}]},
                          "status": {"phase": "Running"}})
        i += 1
        if time.monotonic() >= next_refit:
            history = {f"gpu-node-{k:05d}": (t, np.clip(4 + rng.normal(0, 1.5, t.size), 0, 8)) for k in range(n_nodes)}
            store.set_history(history, now=NOW)
            del history
            gc.collect()
            gc.freeze()  # as the refresher does, and it hands the freed memory back
            trim_heap()
            next_refit = time.monotonic() + REFIT_SECONDS


def serve(n_nodes: int, port: int, ready: Connection) -> None:
    import logging

    logging.basicConfig(level=logging.WARNING, format="  server: %(levelname)s %(name)s: %(message)s")
    logging.getLogger("offpeak_extender.service").setLevel(logging.ERROR)  # one line per bad-prediction request
    store = build_store(n_nodes)
    gc.collect()
    gc.freeze()
    stop = threading.Event()
    threading.Thread(target=churn, args=(store, n_nodes, stop), daemon=True).start()
    ready.send(os.getpid())
    web.run_app(bench_app(store), host="127.0.0.1", port=port, print=None, access_log=None)


@dataclass(frozen=True)
class Kind:
    """One kind of request and the answer it must get."""

    name: str
    weight: int
    method: str
    path: str
    payload: bytes | None  # None: headers only (Content-Length announced, body never sent)
    expect: Callable[[int, bytes], bool]
    announced_length: int | None = None


def _filter_ok(status: int, raw: bytes) -> bool:
    reply = json.loads(raw)
    return status == 200 and reply["Error"] == "" and isinstance(reply["NodeNames"], list)


def server_outcomes(port: int) -> dict[str, float]:
    """offpeak_extender_requests_total by (verb, outcome), as the server counted them."""
    return counter_by_labels(port, "offpeak_extender_requests_total", ("verb", "outcome"))


def _filter_error(status: int, raw: bytes) -> bool:
    return status == 200 and json.loads(raw)["Error"].startswith("offpeak extender: ")


def _scores(status: int, raw: bytes) -> bool:
    reply = json.loads(raw)
    return status == 200 and isinstance(reply, list) and all(0 <= p["Score"] <= 10 for p in reply)


def _empty_scores(status: int, raw: bytes) -> bool:
    return status == 200 and json.loads(raw) == []


def _status(code: int) -> Callable[[int, bytes], bool]:
    return lambda status, _: status == code


def kinds(n_nodes: int) -> list[Kind]:
    names = [f"gpu-node-{i:05d}" for i in range(n_nodes)]
    managed = body(n_nodes)
    half = body(n_nodes, names[: n_nodes // 2])
    pod = json.loads(managed)["Pod"]
    plain = dict(pod, metadata={"name": "web-0", "namespace": "web"})
    nan = dict(pod, metadata={"name": "x", "annotations": {"offpeak.io/predicted-job-seconds": '{"T4": {"p50": NaN}}'}})
    unknown = json.dumps({"Pod": pod, "NodeNames": [f"new-{i}" for i in range(50)] + names[:50]}).encode()
    typed = json.dumps({"Pod": {"spec": {"containers": "abc"}}, "NodeNames": names[:10]}).encode()
    many = json.dumps({"Pod": pod, "NodeNames": ["n"] * 100_001}).encode()
    deep = b"[" * 50_000 + b"]" * 50_000
    return [
        Kind("filter", 30, "POST", "/filter", managed, _filter_ok),
        Kind("prioritize", 30, "POST", "/prioritize", half, _scores),
        Kind("unannotated pod", 5, "POST", "/filter", json.dumps({"Pod": plain, "NodeNames": names}).encode(),
             _filter_ok),
        Kind("unknown nodes", 5, "POST", "/prioritize", unknown, _scores),
        Kind("bad prediction", 3, "POST", "/filter", json.dumps({"Pod": nan, "NodeNames": names[:100]}).encode(),
             _filter_ok),
        Kind("not JSON", 5, "POST", "/filter", b'{"Pod": {', _filter_error),
        Kind("wrong types", 5, "POST", "/filter", typed, _filter_error),
        Kind("wrong types (prioritize)", 3, "POST", "/prioritize", typed, _empty_scores),
        Kind("too deep", 2, "POST", "/filter", deep, _filter_error),
        Kind("too many names", 1, "POST", "/filter", many, _filter_error),
        Kind("over 8 MiB", 1, "POST", "/filter", None, _status(413), announced_length=9 * 1024 * 1024),
        Kind("healthz", 1, "GET", "/healthz", None, _status(200)),
        Kind("readyz", 1, "GET", "/readyz", None, _status(200)),
        Kind("metrics", 1, "GET", "/metrics", None, _status(200)),
    ]


@dataclass
class Tally:
    latency_ms: dict[str, list[float]] = field(default_factory=dict)
    answers: Counter[str] = field(default_factory=Counter)
    unexpected: Counter[str] = field(default_factory=Counter)
    examples: dict[str, str] = field(default_factory=dict)  # one reply per unexpected answer
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, kind: str, ms: float, answer: str, ok: bool, reply: bytes = b"") -> None:
        with self.lock:
            self.latency_ms.setdefault(kind, []).append(ms)
            self.answers[f"{kind}: {answer}"] += 1
            if not ok:
                self.unexpected[f"{kind}: {answer}"] += 1
                self.examples.setdefault(f"{kind}: {answer}", reply[:160].decode(errors="replace"))


def call(conn: http.client.HTTPConnection, kind: Kind) -> tuple[int, bytes]:
    if kind.payload is None and kind.announced_length is not None:
        conn.putrequest(kind.method, kind.path)
        conn.putheader("Content-Type", "application/json")
        conn.putheader("Content-Length", str(kind.announced_length))
        conn.endheaders()  # the body never follows: the server must refuse on the header alone
    else:
        conn.request(kind.method, kind.path, body=kind.payload, headers={"Content-Type": "application/json"})
    resp = conn.getresponse()
    return resp.status, resp.read()


def client(port: int, mix: list[Kind], until: float, tally: Tally, seed: int) -> None:
    rnd = random.Random(seed)
    weights = [k.weight for k in mix]
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)  # a hang shows as a timeout
    while time.monotonic() < until:
        kind = rnd.choices(mix, weights)[0]
        t0 = time.perf_counter()
        try:
            status, raw = call(conn, kind)
            ms = (time.perf_counter() - t0) * 1000
            try:
                ok = kind.expect(status, raw)
            except (ValueError, KeyError, TypeError):
                ok = False
            tally.add(kind.name, ms, f"HTTP {status}" if ok or status != 200 else "HTTP 200, wrong shape", ok, raw)
            if kind.announced_length is not None or status >= 400:
                conn.close()  # a refused upload leaves the connection mid-request
        except (OSError, http.client.HTTPException) as e:
            tally.add(kind.name, (time.perf_counter() - t0) * 1000, type(e).__name__, False)
            conn.close()
    conn.close()


def run(seconds: float, clients: int, n_nodes: int) -> tuple[bool, str]:
    port = free_port()
    parent, child = multiprocessing.get_context("fork").Pipe()
    proc = multiprocessing.get_context("fork").Process(target=serve, args=(n_nodes, port, child), daemon=True)
    proc.start()
    try:
        pid = parent.recv()
        wait_ready(port)
        rss_idle = rss_mib(pid)
        mix = kinds(n_nodes)
        print(f"{n_nodes} nodes, {clients} clients, {seconds:g} s (+{WARMUP_SECONDS:g} s warm-up), "
              f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
        warm = Tally()
        run_clients(port, mix, WARMUP_SECONDS, clients, warm)
        rss_start = rss_mib(pid)
        before = server_outcomes(port)
        tally = Tally()
        samples = run_clients(port, mix, seconds, clients, tally, pid=pid)
        rss_end = rss_mib(pid)
        counted = {k: v - before.get(k, 0.0) for k, v in server_outcomes(port).items()}
    finally:
        proc.terminate()
        proc.join(10)
    total = sum(len(v) for v in tally.latency_ms.values())
    print(f"  {total} requests, {total / seconds:.0f}/s; warm-up {sum(warm.answers.values())} requests")
    print(f"  {'kind':26s} {'count':>7s} {'p50 ms':>8s} {'p99 ms':>8s}")
    for k in mix:
        lat = tally.latency_ms.get(k.name, [])
        if lat:
            print(f"  {k.name:26s} {len(lat):7d} {statistics.median(lat):8.2f} {float(np.percentile(lat, 99)):8.2f}")
    decisions = tally.latency_ms.get("filter", []) + tally.latency_ms.get("prioritize", [])
    if decisions:
        print(f"  valid filter/prioritize: p50 {statistics.median(decisions):.2f} ms, "
              f"p99 {float(np.percentile(decisions, 99)):.2f} ms")
    print("  answers by kind:")
    for answer, n in sorted(tally.answers.items()):
        print(f"    {answer:44s} {n:7d}")
    print("  server's offpeak_extender_requests_total over the run (verb outcome: count): " + ", ".join(
        f"{k}: {v:.0f}" for k, v in sorted(counted.items()) if v))
    print(f"  unexpected: {sum(tally.unexpected.values())}" + "".join(
        f"\n    {a}: {n}, e.g. {tally.examples.get(a, '')!r}" for a, n in sorted(tally.unexpected.items())))
    growth = (rss_end - rss_start) / rss_start
    print(f"  server RSS: {rss_idle:.1f} MiB before traffic, {rss_start:.1f} MiB after warm-up (start), "
          f"{rss_end:.1f} MiB at the end ({growth:+.1%}); over the run: " + ", ".join(f"{r:.0f}" for r in samples))
    misses = ([f"RSS grew {growth:+.1%} (> {RSS_AIM:.0%})"] if growth > RSS_AIM else []) + (
        [f"{sum(tally.unexpected.values())} unexpected answers"] if tally.unexpected else [])
    return not misses, "; ".join(misses)


def run_clients(port: int, mix: list[Kind], seconds: float, clients: int, tally: Tally,
                pid: int | None = None) -> list[float]:
    """Run the clients for `seconds`; returns RSS samples (MiB) every ~10 % of the run when `pid` is given."""
    until = time.monotonic() + seconds
    threads = [threading.Thread(target=client, args=(port, mix, until, tally, seed), daemon=True)
               for seed in range(clients)]
    for t in threads:
        t.start()
    samples: list[float] = []
    while alive := [t for t in threads if t.is_alive()]:
        if pid is not None:
            samples.append(rss_mib(pid))
        alive[0].join(timeout=max(0.1, seconds / 10))
    for t in threads:
        t.join(timeout=30)
    return samples


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=180.0, help="length of the measured run (default 3 minutes)")
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--strict", action="store_true", help="exit 1 when an aim is missed")
    args = ap.parse_args(argv)
    if args.seconds <= 0 or args.clients <= 0 or args.nodes <= 0:
        ap.error("--seconds, --clients and --nodes must be > 0")
    ok, why = run(args.seconds, args.clients, args.nodes)
    print(f"  {'ok' if ok else 'MISS: ' + why}")
    return 0 if ok or not args.strict else 1


if __name__ == "__main__":
    sys.exit(main())
