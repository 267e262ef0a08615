"""Bounded soak of the predictor: mixed valid and invalid traffic from several clients on 127.0.0.1.

A child process runs the real `offpeak predictor serve` (the embedded default model, a fresh sample DB, a token
file, the API and the metrics listener on two loopback ports). Client threads (each with its own keep-alive
connection) send a weighted mix for `--seconds` (default 180; issue #16 suggests 600 for the full run) and stop by
themselves: predictions for graphs the server has seen (a pool of distinct graphs: cache hits), for graphs it has
never seen (one new graph per request: cache misses and evictions), for a few 5,000-op graphs; invalid graphs
(NaN and infinite FLOPs, a negative batch, `mode: "bogus"`, no ops), unknown GPUs, `graph_url`, bodies that are
not JSON or not an object, a body announced over the size limit; POST /v1/samples without a token, with a wrong
one, with the right one (valid and invalid samples); /healthz, /readyz, /openapi.json; /metrics on the metrics
port, and the API kept off it. Every kind has its expected answers; anything else (a 5xx, a timeout, a wrong
shape) counts as unexpected.

Prints a progress line every ~10 s, then p50/p99 per kind and per endpoint, answers by kind and status (marked
expected or not), the server's own error counters and its RSS before traffic, after the warm-up (start) and at
the end. Aims (issue #16): end RSS within 10 % of the start, no unexpected answer. `--strict`: exit 1 on a miss.

The server runs with `--cache-mib 4` (default here; the service's is 256) so that its caches, the model's per-op
prices included, are full before the measured run and every new graph evicts: RSS growth then means a leak, not a
cache still filling (at the service's 256 MiB a new distinct graph of ~40 ops adds ~7 KiB until the bound;
`--cache-mib 256` shows that).

    .venv/bin/python bench/predictor_soak.py [--seconds 180] [--clients 4] [--cache-mib 4] [--strict]
"""

from __future__ import annotations

import argparse
import http.client
import itertools
import json
import math
import os
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from offpeak_graph.schema import ModelGraph, Op

sys.path.insert(0, str(Path(__file__).resolve().parent))
from loopback import counter_by_labels, free_port, pct, rss_mib, wait_ready  # noqa: E402

WARMUP_SECONDS = 30.0  # after one pass over the graph pool: RSS "at start" is that of a predictor in use
RSS_AIM = 0.10
PROGRESS_SECONDS = 10.0
POOL_GRAPHS = 200
TOKEN = "soak-token"
GPUS = ["T4", "V100", "A100", "H100", "L4", "A10"]
OVER_LIMIT = 9 * 1024 * 1024  # the default --max-body-bytes is 8 MiB


def graph(seed: int, *, layers: int | None = None) -> dict[str, Any]:
    """A distinct MLP-like graph per seed (batch, width, depth, precision, mode and norm/activation vary)."""
    rnd = random.Random(seed)
    batch = rnd.choice([1, 2, 4, 8, 16, 32, 48, 64, 96, 128, 256]) + seed % 7
    width = rnd.choice([128, 256, 512, 768, 1024, 2048, 4096])
    depth = layers if layers is not None else rnd.randint(2, 40)
    precision = rnd.choice(["fp32", "fp16", "bf16"])
    mode = rnd.choice(["train", "train", "inference"])
    size = 4 if precision == "fp32" else 2
    act = rnd.choice(["relu", "gelu"])
    ops = [Op(id=0, type="input", output_shapes=[[batch, width]])]
    for _ in range(depth):
        shape = [[batch, width]]
        ops.append(Op(id=len(ops), type="linear", inputs=[len(ops) - 1], input_shapes=shape, output_shapes=shape,
                      flops=2.0 * batch * width * width, bytes_read=size * (batch * width + width * width),
                      bytes_written=size * batch * width, params=width * width + width))  # fmt: skip
        ops.append(Op(id=len(ops), type=act, inputs=[len(ops) - 1], input_shapes=shape, output_shapes=shape,
                      flops=float(batch * width), bytes_read=size * batch * width,
                      bytes_written=size * batch * width))  # fmt: skip
    return ModelGraph(framework="synthetic", model_name=f"soak-{seed}", batch_size=batch, ops=ops,
                      precision=precision, mode=mode, optimizer="adam" if mode == "train" else "none",
                      model_family="mlp").to_dict()  # fmt: skip


def _predict_body(g: dict[str, Any], rnd: random.Random) -> bytes:
    gpus = rnd.sample(GPUS, rnd.randint(1, 3))
    return json.dumps({"graph": g, "gpus": gpus, "steps": rnd.randint(100, 100_000)}).encode()


def _predict_ok(status: int, raw: bytes) -> bool:
    if status != 200:
        return False
    preds = json.loads(raw)["predictions"]  # json.loads refuses nothing, so check finiteness ourselves
    return bool(preds) and all(math.isfinite(p["step_seconds"]) and p["step_seconds"] > 0 for p in preds)


def _sample_ok(status: int, raw: bytes) -> bool:
    return status in (201, 202, 422) and json.loads(raw)["status"] in ("accepted", "unverified", "quarantined")


def _status(*codes: int) -> Callable[[int, bytes], bool]:
    return lambda status, _: status in codes


@dataclass(frozen=True)
class Kind:
    """One kind of request, how to make its body, and the answer it must get."""

    name: str
    weight: int
    method: str
    path: str
    body: Callable[[random.Random], bytes | None]  # None: no body
    expect: Callable[[int, bytes], bool]
    metrics_port: bool = False  # sent to the metrics listener instead of the API
    token: str | None = None
    announced_length: int | None = None  # headers only: Content-Length announced, body never sent


def _broken(mutate: Callable[[dict[str, Any]], None]) -> Callable[[random.Random], bytes]:
    def body(rnd: random.Random) -> bytes:
        g = graph(rnd.randrange(POOL_GRAPHS))
        mutate(g)
        return json.dumps({"graph": g, "gpus": ["T4"], "steps": 100}).encode()  # NaN/Infinity literals allowed

    return body


def _set_op(column: str, value: float) -> Callable[[dict[str, Any]], None]:
    def mutate(g: dict[str, Any]) -> None:
        g["ops"][column][1] = value

    return mutate


def kinds(pool_hashes: list[str]) -> list[Kind]:
    fresh = itertools.count(1_000_000)  # a graph no request has sent before (thread-safe enough: GIL-atomic next)
    big = [graph(900_000 + i, layers=2_500) for i in range(3)]  # 5,001 ops each
    ok = _status(400)

    def sample(rnd: random.Random) -> bytes:
        return json.dumps({"graph_hash": rnd.choice(pool_hashes), "gpu": rnd.choice(GPUS), "job": "soak/job",
                           "job_seconds": rnd.uniform(60, 3600), "steps": 1000}).encode()  # fmt: skip

    def sample_with_graph(rnd: random.Random) -> bytes:
        return json.dumps({"graph": graph(rnd.randrange(POOL_GRAPHS)), "gpu": rnd.choice(GPUS),
                           "step_seconds": rnd.uniform(0.001, 2.0), "job": "soak/job"}).encode()  # fmt: skip

    return [
        Kind("predict (seen graph)", 30, "POST", "/v1/predict",
             lambda r: _predict_body(graph(r.randrange(POOL_GRAPHS)), r), _predict_ok),
        Kind("predict (new graph)", 10, "POST", "/v1/predict", lambda r: _predict_body(graph(next(fresh)), r),
             _predict_ok),
        Kind("predict (5,000 ops)", 1, "POST", "/v1/predict", lambda r: _predict_body(r.choice(big), r), _predict_ok),
        Kind("NaN FLOPs", 3, "POST", "/v1/predict", _broken(_set_op("flops", float("nan"))), ok),
        Kind("infinite FLOPs", 2, "POST", "/v1/predict", _broken(_set_op("flops", float("inf"))), ok),
        Kind("negative batch", 2, "POST", "/v1/predict", _broken(lambda g: g.update(batch_size=-8)), ok),
        Kind("bogus mode", 2, "POST", "/v1/predict", _broken(lambda g: g.update(mode="bogus")), ok),
        Kind("empty ops", 2, "POST", "/v1/predict",
             _broken(lambda g: g.update(ops={k: [] for k in g["ops"]})), ok),
        Kind("unknown GPU", 2, "POST", "/v1/predict",
             lambda r: json.dumps({"graph": graph(0), "gpus": ["Voodoo-5"]}).encode(), ok),
        Kind("graph_url", 1, "POST", "/v1/predict",
             lambda r: b'{"graph_url": "http://169.254.169.254/latest/meta-data", "gpus": ["T4"]}', ok),
        Kind("not JSON", 2, "POST", "/v1/predict", lambda r: b'{"graph": {', ok),
        Kind("not an object", 1, "POST", "/v1/predict", lambda r: b"[1, 2, 3]", ok),
        Kind("over the body limit", 1, "POST", "/v1/predict", lambda r: None, _status(413),
             announced_length=OVER_LIMIT),
        Kind("sample, no token", 3, "POST", "/v1/samples", sample, _status(401)),
        Kind("sample, wrong token", 2, "POST", "/v1/samples", sample, _status(403), token="not-the-token"),
        Kind("sample", 4, "POST", "/v1/samples", sample, _sample_ok, token=TOKEN),
        Kind("sample with graph", 2, "POST", "/v1/samples", sample_with_graph, _sample_ok, token=TOKEN),
        Kind("bad sample", 1, "POST", "/v1/samples",
             lambda r: json.dumps({"graph_hash": "sha256:x", "gpu": "T4", "job_seconds": -1}).encode(), ok,
             token=TOKEN),
        Kind("healthz", 2, "GET", "/healthz", lambda r: None, _status(200)),
        Kind("readyz", 1, "GET", "/readyz", lambda r: None, _status(200)),
        Kind("openapi", 1, "GET", "/openapi.json", lambda r: None, _status(200)),
        Kind("metrics (metrics port)", 1, "GET", "/metrics", lambda r: None, _status(200), metrics_port=True),
        Kind("metrics on the API port", 1, "GET", "/metrics", lambda r: None, _status(404)),
        Kind("predict on the metrics port", 1, "POST", "/v1/predict",
             lambda r: _predict_body(graph(0), r), _status(404), metrics_port=True),
    ]  # fmt: skip


@dataclass
class Tally:
    latency_ms: dict[str, list[float]] = field(default_factory=dict)
    answers: Counter[tuple[str, str, bool]] = field(default_factory=Counter)  # (kind, answer, expected)
    examples: dict[str, str] = field(default_factory=dict)  # one reply per unexpected answer
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, kind: str, ms: float, answer: str, ok: bool, reply: bytes = b"") -> None:
        with self.lock:
            self.latency_ms.setdefault(kind, []).append(ms)
            self.answers[(kind, answer, ok)] += 1
            if not ok:
                self.examples.setdefault(f"{kind}: {answer}", reply[:160].decode(errors="replace"))

    def count(self) -> int:
        with self.lock:
            return sum(self.answers.values())

    def unexpected(self) -> int:
        with self.lock:
            return sum(n for (_, _, ok), n in self.answers.items() if not ok)


def call(conn: http.client.HTTPConnection, kind: Kind, rnd: random.Random) -> tuple[int, bytes]:
    headers = {"Content-Type": "application/json"}
    if kind.token is not None:
        headers["Authorization"] = f"Bearer {kind.token}"
    if kind.announced_length is not None:
        conn.putrequest(kind.method, kind.path)
        for k, v in headers.items():
            conn.putheader(k, v)
        conn.putheader("Content-Length", str(kind.announced_length))
        conn.endheaders()  # the body never follows: the server must refuse on the header alone
    else:
        conn.request(kind.method, kind.path, body=kind.body(rnd), headers=headers)
    resp = conn.getresponse()
    return resp.status, resp.read()


def client(ports: tuple[int, int], mix: list[Kind], until: float, tally: Tally, seed: int) -> None:
    rnd = random.Random(seed)
    weights = [k.weight for k in mix]
    conns = {p: http.client.HTTPConnection("127.0.0.1", p, timeout=10) for p in ports}  # a hang shows as a timeout
    while time.monotonic() < until:
        kind = rnd.choices(mix, weights)[0]
        conn = conns[ports[1] if kind.metrics_port else ports[0]]
        t0 = time.perf_counter()
        try:
            status, raw = call(conn, kind, rnd)
            ms = (time.perf_counter() - t0) * 1000
            try:
                ok = kind.expect(status, raw)
            except (ValueError, KeyError, TypeError):
                ok = False
            tally.add(kind.name, ms, f"HTTP {status}", ok, raw)
            if kind.announced_length is not None or status >= 400:
                conn.close()  # a refused request may leave the connection mid-body
        except (OSError, http.client.HTTPException) as e:
            tally.add(kind.name, (time.perf_counter() - t0) * 1000, type(e).__name__, False)
            conn.close()
    for conn in conns.values():
        conn.close()


def run_clients(ports: tuple[int, int], mix: list[Kind], seconds: float, clients: int, tally: Tally,
                pid: int, progress: bool) -> list[float]:  # fmt: skip
    """Run the clients for `seconds`; a progress line and an RSS sample (MiB) every ~10 s."""
    started = time.monotonic()
    until = started + seconds
    threads = [threading.Thread(target=client, args=(ports, mix, until, tally, seed), daemon=True)
               for seed in range(clients)]  # fmt: skip
    for t in threads:
        t.start()
    samples = [rss_mib(pid)]
    while alive := [t for t in threads if t.is_alive()]:
        alive[0].join(timeout=PROGRESS_SECONDS)
        if any(t.is_alive() for t in threads):
            samples.append(rss_mib(pid))
            if progress:
                elapsed = time.monotonic() - started
                print(f"  [{elapsed:5.0f}/{seconds:.0f} s] {tally.count():7d} requests, {tally.unexpected()} "
                      f"unexpected, server RSS {samples[-1]:.1f} MiB", flush=True)  # fmt: skip
    for t in threads:
        t.join(timeout=30)
    return samples


def server_errors(metrics_port: int) -> dict[str, float]:
    """offpeak_predictor_errors_total by (endpoint status), as the server counted them."""
    return counter_by_labels(metrics_port, "offpeak_predictor_errors_total", ("endpoint", "status"))


def run(seconds: float, clients: int, warmup: float = WARMUP_SECONDS, cache_mib: float = 4.0) -> tuple[bool, str]:
    port, metrics_port = free_port(), free_port()
    with tempfile.TemporaryDirectory(prefix="predictor-soak-") as tmp:
        token, log = Path(tmp) / "token", Path(tmp) / "predictor.log"
        token.write_text(TOKEN + "\n")
        with log.open("wb") as out:
            proc = subprocess.Popen(
                [sys.executable, "-m", "offpeak.cli", "predictor", "serve", "--host", "127.0.0.1",
                 "--port", str(port), "--metrics-host", "127.0.0.1", "--metrics-port", str(metrics_port),
                 "--db", str(Path(tmp) / "samples.sqlite"), "--token-file", str(token), "--cache-mib", str(cache_mib)],
                env={**os.environ, "PYTHONUNBUFFERED": "1", "OFFPEAK_LOG_LEVEL": "WARNING"},
                stdout=out, stderr=subprocess.STDOUT,
            )  # fmt: skip
        try:
            wait_ready(port, proc=proc, log=log)
            rss_idle = rss_mib(proc.pid)
            pool = [graph(i) for i in range(POOL_GRAPHS)]
            pool_hashes = [g["content_hash"] for g in pool]
            print(f"predictor pid {proc.pid}, {clients} clients, {seconds:g} s (+ one pass over {POOL_GRAPHS} graphs "
                  f"and {warmup:g} s warm-up), load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} "
                  f"CPUs, --cache-mib {cache_mib:g}", flush=True)  # fmt: skip
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            rnd = random.Random(0)
            for g in pool:  # every pool graph once: "seen" from here on
                conn.request("POST", "/v1/predict", body=_predict_body(g, rnd))
                conn.getresponse().read()
            conn.close()
            mix = kinds(pool_hashes)
            warm = Tally()
            run_clients((port, metrics_port), mix, warmup, clients, warm, proc.pid, progress=False)
            rss_start = rss_mib(proc.pid)
            before = server_errors(metrics_port)
            tally = Tally()
            samples = run_clients((port, metrics_port), mix, seconds, clients, tally, proc.pid, progress=True)
            rss_end = rss_mib(proc.pid)
            counted = {k: v - before.get(k, 0.0) for k, v in server_errors(metrics_port).items()}
        finally:
            proc.terminate()
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
            server_log = log.read_text()
    total = tally.count()
    print(f"  {total} requests, {total / seconds:.0f}/s; warm-up {warm.count()} requests "
          f"({warm.unexpected()} unexpected)")
    print(f"  {'kind':30s} {'count':>7s} {'p50 ms':>8s} {'p99 ms':>8s}")
    for k in mix:
        lat = tally.latency_ms.get(k.name, [])
        if lat:
            print(f"  {k.name:30s} {len(lat):7d} {statistics.median(lat):8.2f} {pct(lat, 99):8.2f}")
    by_endpoint: dict[str, list[float]] = {}
    for k in mix:
        endpoint = f"{k.method} {k.path}" + (" (metrics port)" if k.metrics_port else "")
        by_endpoint.setdefault(endpoint, []).extend(tally.latency_ms.get(k.name, []))
    print(f"  {'endpoint':30s} {'count':>7s} {'p50 ms':>8s} {'p99 ms':>8s}")
    for endpoint, lat in by_endpoint.items():
        if lat:
            print(f"  {endpoint:30s} {len(lat):7d} {statistics.median(lat):8.2f} {pct(lat, 99):8.2f}")
    print("  answers by kind and status:")
    for (kind, answer, ok), n in sorted(tally.answers.items()):
        print(f"    {kind:30s} {answer:22s} {n:7d}  {'expected' if ok else 'UNEXPECTED'}")
    statuses: Counter[tuple[str, bool]] = Counter()
    for (_, answer, ok), n in tally.answers.items():
        statuses[(answer, ok)] += n
    print("  answers by status: " + ", ".join(
        f"{answer} {'expected' if ok else 'UNEXPECTED'}: {n}" for (answer, ok), n in sorted(statuses.items())))
    print("  server's offpeak_predictor_errors_total over the run (endpoint status: count): " + ", ".join(
        f"{k}: {v:.0f}" for k, v in sorted(counted.items()) if v))
    unexpected = tally.unexpected()
    print(f"  unexpected: {unexpected}" + "".join(
        f"\n    {a}: e.g. {reply!r}" for a, reply in sorted(tally.examples.items())))
    tracebacks = server_log.count("Traceback")
    if tracebacks:
        print(f"  server log: {tracebacks} tracebacks; last lines:\n{server_log[-1500:]}")
    growth = (rss_end - rss_start) / rss_start
    print(f"  server RSS: {rss_idle:.1f} MiB before traffic, {rss_start:.1f} MiB after warm-up (start), "
          f"{rss_end:.1f} MiB at the end ({growth:+.1%}); every ~10 s: " + ", ".join(f"{r:.0f}" for r in samples))
    misses = ([f"RSS grew {growth:+.1%} (> {RSS_AIM:.0%})"] if growth > RSS_AIM else []) + (
        [f"{unexpected} unexpected answers"] if unexpected else []) + (
        [f"{tracebacks} tracebacks in the server log"] if tracebacks else [])  # fmt: skip
    return not misses, "; ".join(misses)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=180.0, help="length of the measured run (default 3 minutes)")
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--cache-mib", type=float, default=4.0, help="the server's graph cache budget (default 4)")
    ap.add_argument("--warmup-seconds", type=float, default=WARMUP_SECONDS, help="traffic before RSS 'at start'")
    ap.add_argument("--strict", action="store_true", help="exit 1 when an aim is missed")
    args = ap.parse_args(argv)
    if args.seconds <= 0 or args.clients <= 0 or args.warmup_seconds < 0:
        ap.error("--seconds and --clients must be > 0, --warmup-seconds >= 0")
    ok, why = run(args.seconds, args.clients, args.warmup_seconds, args.cache_mib)
    print(f"  {'ok' if ok else 'MISS: ' + why}")
    return 0 if ok or not args.strict else 1


if __name__ == "__main__":
    sys.exit(main())
