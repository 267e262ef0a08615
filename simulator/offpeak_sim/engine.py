"""Discrete-event core: one `PolicyRun` per policy, all advanced minute by minute in lockstep.

Online demand changes on minute boundaries (the traces are per minute), so evictions and scheduling passes
happen there; job completions are exact event times from a heap and free their GPUs at once, and the next
pass (batched, at the next minute) can reuse them. Decisions are the extender's pure functions; this module
only keeps state and does the accounting:

- ran GPU-seconds = harvested + lost (work thrown away at evictions: since the last checkpoint);
- a completed job's useful work, in reference seconds, equals its duration (conservation, checked by tests);
- online demand always gets its GPUs: after the eviction step, online + offline <= capacity on every node.
"""

from __future__ import annotations

import heapq
import math
import time
from dataclasses import dataclass, field

import numpy as np

from offpeak_core.decisions import DEFAULT_MARGIN, choose_victims, filter_nodes, prioritize_nodes
from offpeak_core.model import NodeView, OfflinePod, PodRequest

from offpeak_sim.forecasting import WindowFeed
from offpeak_sim.policies import Policy, believed_p50_p90, predictions
from offpeak_sim.scenario import Scenario


@dataclass(frozen=True)
class EngineSettings:
    """Offline-side knobs."""

    checkpoint_seconds: float = 1800.0  # 0: jobs do not checkpoint (an eviction loses all work of the attempt)
    eviction_grace_seconds: float = 30.0  # online work waits this long for an evicted pod to go
    margin: float = DEFAULT_MARGIN  # extender filter margin on p90
    prune: bool = True  # skip jobs/nodes whose forecast bound already rules them out (same decisions, faster)
    check_invariants: bool = False  # assert capacity after every step (tests)


@dataclass(slots=True)
class Run:
    job: int
    node: int
    start: float
    gpus: int
    slowdown: float
    end: float


@dataclass
class Tally:
    """What a policy did; metrics are derived from it."""

    ran_gpu_s: float = 0.0
    lost_gpu_s: float = 0.0
    evictions: int = 0
    online_delay_gpu_s: float = 0.0
    online_delay_events: int = 0
    decisions: int = 0
    decision_s: list[float] = field(default_factory=list)
    occupancy: np.ndarray = field(default_factory=lambda: np.zeros(0))  # offline GPUs per run minute
    lost_by_minute: np.ndarray = field(default_factory=lambda: np.zeros(0))


class PolicyRun:
    """State of the simulated cluster under one policy."""

    def __init__(self, policy: Policy, scenario: Scenario, feed: WindowFeed | None, settings: EngineSettings):
        if policy.windowed and feed is None:
            raise ValueError(f"policy {policy.name} needs a window feed")
        self.p = policy
        self.sc = scenario
        self.feed = feed
        self.s = settings
        fl = scenario.fleet
        n_jobs = len(scenario.jobs)
        self.used = np.zeros(fl.size, dtype=np.int64)
        self.on_node: list[dict[int, Run]] = [{} for _ in range(fl.size)]
        self.runs: dict[int, Run] = {}
        self.heap: list[tuple[float, int, int]] = []
        self.attempt = np.zeros(n_jobs, dtype=np.int64)
        self.queue: list[int] = []
        self.remaining_ref = scenario.jobs.duration_s.astype(float).copy()
        self.useful_ref = np.zeros(n_jobs)  # reference seconds of work kept (checkpointed or finished)
        self.first_start = np.full(n_jobs, np.nan)
        self.finish = np.full(n_jobs, np.nan)
        self.job_evictions = np.zeros(n_jobs, dtype=np.int64)
        self.placements: list[tuple[int, int, float]] = []  # (job, node, time) of every start
        minutes = scenario.end_minute - scenario.start_minute
        self.t = Tally(occupancy=np.zeros(minutes), lost_by_minute=np.zeros(minutes))
        self._type_index = {t: i for i, t in enumerate(fl.types)}
        self.node_type = np.array([self._type_index[t] for t in fl.gpu_types])
        self.slow = np.array([fl.slowdown(n) for n in range(fl.size)])
        self._views: dict[tuple[int, int, int], NodeView] = {}

    # ---- events ------------------------------------------------------------------------------------------------

    def arrive(self, jobs: np.ndarray) -> None:
        self.queue.extend(int(j) for j in jobs)

    def _complete_until(self, now: float) -> None:
        while self.heap and self.heap[0][0] <= now:
            end, job, attempt = heapq.heappop(self.heap)
            if attempt != self.attempt[job] or job not in self.runs:
                continue
            r = self.runs.pop(job)
            del self.on_node[r.node][job]
            self.used[r.node] -= r.gpus
            self.t.ran_gpu_s += (end - r.start) * r.gpus
            self.useful_ref[job] += self.remaining_ref[job]
            self.remaining_ref[job] = 0.0
            self.finish[job] = end

    def _start(self, job: int, node: int, now: float) -> None:
        g = int(self.sc.jobs.gpus[job])
        end = now + self.remaining_ref[job] * self.slow[node]
        self.attempt[job] += 1
        r = Run(job, node, now, g, float(self.slow[node]), end)
        self.runs[job] = r
        self.on_node[node][job] = r
        self.used[node] += g
        heapq.heappush(self.heap, (end, job, int(self.attempt[job])))
        self.placements.append((job, node, now))
        if math.isnan(self.first_start[job]):
            self.first_start[job] = now

    def _evict(self, r: Run, now: float, minute_index: int) -> None:
        elapsed = now - r.start
        c = self.s.checkpoint_seconds
        saved = math.floor(elapsed / c) * c if c > 0 else 0.0
        lost = (elapsed - saved) * r.gpus
        self.runs.pop(r.job)
        del self.on_node[r.node][r.job]
        self.used[r.node] -= r.gpus
        self.attempt[r.job] += 1  # invalidates its completion event
        self.t.ran_gpu_s += elapsed * r.gpus
        self.t.lost_gpu_s += lost
        self.t.lost_by_minute[minute_index] += lost
        self.t.evictions += 1
        self.job_evictions[r.job] += 1
        kept_ref = saved / r.slowdown
        self.useful_ref[r.job] += kept_ref
        self.remaining_ref[r.job] = max(0.0, self.remaining_ref[r.job] - kept_ref)
        self.queue.append(r.job)

    def _evict_for_online(self, minute: int, now: float, minute_index: int) -> None:
        fl = self.sc.fleet
        d_now = self.sc.demand[:, minute]
        over = d_now + self.used - fl.gpus
        for n in np.flatnonzero(over > 0):
            d_prev = int(self.sc.demand[n, minute - 1]) if minute > 0 else 0
            view = NodeView(fl.names[n], fl.gpu_types[n], int(fl.gpus[n]), max(0, int(fl.gpus[n] - self.used[n] - d_prev)))
            c = self.s.checkpoint_seconds
            pods = [
                OfflinePod(
                    name=str(j),
                    gpus=r.gpus,
                    checkpointing=c > 0,
                    elapsed_seconds=now - r.start,
                    seconds_since_checkpoint=((now - r.start) % c) if c > 0 else None,
                )
                for j, r in self.on_node[n].items()
            ]
            victims = choose_victims(node=view, online_gpus_needed=int(d_now[n]) - d_prev, offline_pods=pods)
            for v in victims:
                self._evict(self.on_node[n][int(v.name)], now, minute_index)
            self.t.online_delay_gpu_s += float(over[n]) * self.s.eviction_grace_seconds
            self.t.online_delay_events += 1
            if d_now[n] + self.used[n] > fl.gpus[n]:
                raise AssertionError(f"eviction left node {n} over capacity")  # choose_victims returns all if short

    # ---- scheduling --------------------------------------------------------------------------------------------

    def _view(self, n: int, free_now: int, now: float) -> NodeView:
        fl = self.sc.fleet
        if not self.p.windowed:
            return NodeView(fl.names[n], fl.gpu_types[n], int(fl.gpus[n]), free_now)
        assert self.feed is not None
        key = (n, int(self.used[n]), free_now)
        v = self._views.get(key)
        if v is None:
            v = NodeView(
                fl.names[n],
                fl.gpu_types[n],
                int(fl.gpus[n]),
                free_now,
                windows=self.feed.windows_for(n, offline_gpus=int(self.used[n]), now=now),
                data_stale=bool(self.feed.stale[n]),
            )
            self._views[key] = v
        return v

    def _pick(self, pod: PodRequest, views: list[NodeView], passed: tuple[str, ...], now: float) -> str:
        if self.p.pick == "first":
            return passed[0]
        keep = set(passed)
        ok = [v for v in views if v.name in keep]
        if self.p.pick == "spread":
            return max(ok, key=lambda v: v.gpus_free_now).name
        scores = prioritize_nodes(
            pod=pod, nodes=ok, now=now, margin=self.s.margin, checkpoint_intervals=self.p.checkpoint_intervals
        )
        return max(ok, key=lambda v: scores.get(v.name, 0)).name

    def schedule(self, minute: int, now: float) -> None:
        if not self.queue:
            return
        fl = self.sc.fleet
        free = fl.gpus - self.sc.demand[:, minute] - self.used
        if free.max() <= 0:
            return
        q = np.array(self.queue, dtype=np.int64)
        g = self.sc.jobs.gpus[q]
        cand_mask = g <= free.max()
        need = p50 = p90 = None
        bound: dict[int, np.ndarray] = {}
        if self.p.windowed:
            assert self.feed is not None
            p50, p90 = believed_p50_p90(self.p, scenario=self.sc, jobs=q, remaining_ref_s=self.remaining_ref)
            need = p90 * (1.0 + self.s.margin)
            if self.p.checkpoint_intervals > 0 and self.s.checkpoint_seconds > 0:
                # the extender's checkpoint-aware rule caps the window a checkpointing pod needs; the bound must too
                need = np.minimum(need, self.p.checkpoint_intervals * self.s.checkpoint_seconds)
            if self.s.prune:
                fits = np.zeros(len(q), dtype=bool)
                for gv in np.unique(g[cand_mask]):
                    left = self.feed.left_upper_bound(now=now, gpus_needed=self.used + gv)
                    left[free < gv] = -np.inf
                    bound[int(gv)] = left
                    best = np.full(len(fl.types), -np.inf)
                    np.maximum.at(best, self.node_type, left)
                    sel = g == gv
                    fits[sel] = (need[sel] <= best[None, :]).any(axis=1)
                cand_mask &= fits
        placed: set[int] = set()
        names = {name: i for i, name in enumerate(fl.names)}
        for k in np.flatnonzero(cand_mask):
            j = int(q[k])
            gj = int(g[k])
            nodes = np.flatnonzero(free >= gj)
            if self.p.windowed and self.s.prune and nodes.size:
                assert need is not None
                nodes = nodes[bound[gj][nodes] >= need[k][self.node_type[nodes]]]
            if nodes.size == 0:
                continue
            views = [self._view(int(n), int(free[n]), now) for n in nodes]
            predicted = None
            if self.p.windowed:
                assert p50 is not None and p90 is not None
                predicted = predictions(fl.types, p50[k], p90[k])
            pod = PodRequest(
                name=str(j),
                gpus=gj,
                predicted=predicted,
                checkpointing=self.s.checkpoint_seconds > 0,
                checkpoint_interval_seconds=self.s.checkpoint_seconds or None,
            )
            t0 = time.perf_counter()
            res = filter_nodes(
                pod=pod, nodes=views, now=now, margin=self.s.margin, checkpoint_intervals=self.p.checkpoint_intervals
            )
            chosen = self._pick(pod, views, res.passed, now) if res.passed else None
            self.t.decision_s.append(time.perf_counter() - t0)
            self.t.decisions += 1
            if chosen is None:
                continue
            n = names[chosen]
            self._start(j, n, now)
            free[n] -= gj
            placed.add(j)
        if placed:
            self.queue = [j for j in self.queue if j not in placed]

    # ---- driver hooks ------------------------------------------------------------------------------------------

    def step(self, minute: int, new_jobs: np.ndarray) -> None:
        """Advance to the start of `minute`: completions, arrivals, evictions, one scheduling pass."""
        now = minute * 60.0
        i = minute - self.sc.start_minute
        self._complete_until(now)
        self.arrive(new_jobs)
        self._evict_for_online(minute, now, i)
        self._views.clear()  # views hold the windows open now: valid for this minute only
        self.schedule(minute, now)
        self.t.occupancy[i] = float(self.used.sum())
        if self.s.check_invariants:
            assert (self.sc.demand[:, minute] + self.used <= self.sc.fleet.gpus).all(), "capacity exceeded"
            assert (self.used >= 0).all()

    def close(self, end_s: float) -> None:
        """Finish the run at `end_s`: completions up to then; still-running work counts as ran, not lost."""
        self._complete_until(end_s)
        for r in self.runs.values():
            self.t.ran_gpu_s += (end_s - r.start) * r.gpus


def simulate(
    scenario: Scenario,
    policies: list[Policy],
    *,
    feed: WindowFeed | None,
    settings: EngineSettings = EngineSettings(),
    progress: object | None = None,
) -> dict[str, PolicyRun]:
    """Run every policy over the scenario in lockstep; return their final states."""
    runs = {p.name: PolicyRun(p, scenario, feed if p.windowed else None, settings) for p in policies}
    arrivals = scenario.jobs.arrival_s
    ptr = 0
    needs_feed = feed is not None and any(p.windowed for p in policies)
    for minute in range(scenario.start_minute, scenario.end_minute):
        now = minute * 60.0
        hi = int(np.searchsorted(arrivals, now, side="right"))
        new = np.arange(ptr, hi)
        ptr = hi
        if needs_feed:
            assert feed is not None
            feed.maybe_refresh(now)
        for r in runs.values():
            r.step(minute, new)
        if progress is not None:
            progress(minute - scenario.start_minute + 1)  # type: ignore[operator]
    for r in runs.values():
        r.close(scenario.end_s)
    return runs
