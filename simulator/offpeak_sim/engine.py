"""Discrete-event core: one `PolicyRun` per policy, all advanced minute by minute in lockstep.

Online demand changes on minute boundaries (the traces are per minute), so evictions and scheduling passes
happen there; job completions are exact event times from a heap and free their GPUs at once, and the next
pass (batched, at the next minute) can reuse them. Decisions are the extender's pure functions; this module
only keeps state and does the accounting:

- ran GPU-seconds = harvested + lost (work thrown away at evictions: since the last checkpoint);
- a completed job's useful work, in reference seconds, equals its duration (conservation, checked by tests);
- online demand always gets its GPUs: after the eviction step, online + offline <= capacity on every node.

Wide jobs: a job that no single node can take (too few GPUs free, or no window that fits) may run as a gang of
pods on several nodes of one GPU type (`gangs`), all or nothing: every member passes `filter_nodes` for its
own GPU count on its node, and when online work takes any member's GPUs the whole gang is evicted (work since
the last checkpoint lost on every member). Gangs run at the speed of a single node (no communication cost).

Elastic width (`EngineSettings.elastic_min_fraction`, off by default): a checkpointing job of N GPUs may start on
the widest k >= ceil(fraction × N) that fits now (a node, else a gang), its work taking N / k as long; with
`elastic_join` its waiting workers join later when GPUs of its type pass the filter, restarting the job from its last
checkpoint. Off, every decision is the rigid engine's.

Where a pod or a gang goes is `offpeak_sim.placement`'s (`Placer`), which width and which joins
`offpeak_sim.elastic`'s (`ElasticWidth`); this module starts and stops the attempts (`offpeak_sim.attempts.Run`).

Restarts and planned stops: every attempt of a job spends its first `restart_seconds` starting (image, restore
from checkpoint) with no useful work, and checkpoints fall every `checkpoint_seconds` after that. Policies that
yield (`Policy.yields`, with `EngineSettings.yield_at_checkpoints`) check each running job at each of its
checkpoints against the node's live forecast (`offpeak_core.yielding.should_yield`): a job whose next checkpoint
would land after its window's forecast end stops there, losing no work and making no online pod wait; it is
counted as a yield, not an eviction, and requeued like an evicted job. With `EngineSettings.save_on_stop_seconds`
jobs save when told to stop (the TrainingJob `checkpoint` contract): each minute every running job is looked at, and
one whose window's end would come within the next minute plus its save is stopped `save_on_stop_seconds` before it,
keeping all its work (`should_yield(save_seconds=)`), not at its last periodic checkpoint. Evictions still lose the
work since the last periodic checkpoint: the evictor's grace period is too short to count on a save.

Online demand is either pinned to nodes (the scenario's demand, the same for every policy) or pod-placed
(`Scenario.online_pods`): then each policy carries on its own placement of online pods (`offpeak_sim.onlinepods`),
a pod that finds no room makes the evictor's `plan_for_pending` choose what goes, and each windowed policy has its
own feed over its own per-node demand.

Why over ~500 lines: the attempts' life cycle (start, checkpoint, yield, evict, join, finish) and its accounting
are one state machine over the same arrays; placement and widths are already elsewhere (`placement`, `elastic`).
"""

from __future__ import annotations

import heapq
import math
import time
from dataclasses import dataclass, field, replace

import numpy as np

from offpeak_core.decisions import choose_victims
from offpeak_core.evictions import NodeState, plan_for_pending
from offpeak_core.livepace import LiveProgress
from offpeak_core.model import NodeView, OfflinePod
from offpeak_core.windows import profile_window
from offpeak_core.yielding import checkpoints_done, should_yield, since_checkpoint

from offpeak_sim.attempts import Run
from offpeak_sim.elastic import ElasticWidth
from offpeak_sim.forecasting import WindowFeed
from offpeak_sim.placement import Placer, Plan
from offpeak_sim.policies import Policy, believed_p50_p90
from offpeak_sim.scenario import Scenario
from offpeak_sim.settings import EngineSettings

__all__ = ["EngineSettings", "PolicyRun", "Run", "Tally", "simulate"]


COMPLETE, YIELD, SAVE_YIELD = 0, 1, 2  # kinds of timed events on a policy's heap (SAVE_YIELD: at the save's end)
LIVE_STEPS = 10_000  # an attempt's work in steps, for its live progress (only the share done matters)


@dataclass
class Tally:
    """What a policy did; metrics are derived from it."""

    ran_gpu_s: float = 0.0
    lost_gpu_s: float = 0.0
    evictions: int = 0
    joins: int = 0  # restarts of elastic jobs to take on waiting workers (the work since the last checkpoint lost)
    narrowings: int = 0  # evictions after which an elastic gang went on with the members left (`elastic_narrow`)
    yields: int = 0  # planned stops at a checkpoint before the forecast window ends (no work lost, no online wait)
    # GPU-seconds spent (re)starting by attempts that kept work (finished, yielded, checkpointed, or running at the
    # end); an attempt evicted before its first checkpoint counts its start-up in lost_gpu_s
    startup_gpu_s: float = 0.0
    online_delay_gpu_s: float = 0.0
    online_delay_events: int = 0
    online_gpu_requests: int = 0  # GPUs online demand added, over every node and minute (one online pod each)
    online_waits: dict[float, int] = field(default_factory=dict)  # seconds waited -> online GPUs that waited so
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
        self.s = settings
        # pod-placed online demand: this policy's own placement, per-node demand (filled minute by minute) and feed
        self.placement = None if scenario.online_pods is None else scenario.online_pods.clone()
        self.demand = scenario.demand if self.placement is None else scenario.demand.copy()
        self.own_feed = self.placement is not None and feed is not None
        self.feed = feed.fork(self.demand) if self.own_feed and feed is not None else feed
        fl = scenario.fleet
        n_jobs = len(scenario.jobs)
        self.used = np.zeros(fl.size, dtype=np.int64)
        if self.own_feed and self.feed is not None:
            self.feed.watch_offline(self.used)
        self.on_node: list[dict[int, Run]] = [{} for _ in range(fl.size)]
        self.runs: dict[int, Run] = {}
        self.heap: list[tuple[float, int, int, int]] = []  # (time, job, attempt, COMPLETE | YIELD | SAVE_YIELD)
        self.checkpoints: list[tuple[float, int, int]] = []  # (time, job, attempt): next checkpoint to look at
        self.saving: set[tuple[int, int]] = set()  # (job, attempt) told to stop and saving (save_on_stop_seconds)
        self.yields = (policy.yields and policy.windowed and settings.yield_at_checkpoints
                       and settings.checkpoint_seconds > 0)
        self.attempt = np.zeros(n_jobs, dtype=np.int64)
        self.queue: list[int] = []
        self.remaining_ref = scenario.jobs.duration_s.astype(float).copy()
        # [job, GPU type]: an attempt of the job timed its steps there (ran past its start-up): the rest of the job
        # is then believed at that pace (`believed_p50_p90`), as the operator does with a pod's progress reports
        self.measured = np.zeros((n_jobs, len(fl.types)), dtype=bool)
        self.useful_ref = np.zeros(n_jobs)  # reference seconds of work kept (checkpointed or finished)
        self.first_start = np.full(n_jobs, np.nan)
        self.finish = np.full(n_jobs, np.nan)
        self.job_evictions = np.zeros(n_jobs, dtype=np.int64)
        self.job_yields = np.zeros(n_jobs, dtype=np.int64)
        self.placements: list[tuple[int, int, float]] = []  # (job, node, time) of every start
        minutes = scenario.end_minute - scenario.start_minute
        self.t = Tally(occupancy=np.zeros(minutes), lost_by_minute=np.zeros(minutes))
        self._type_index = {t: i for i, t in enumerate(fl.types)}
        self.node_type = np.array([self._type_index[t] for t in fl.gpu_types])
        self.slow = np.array([fl.slowdown(n) for n in range(fl.size)])
        self.gang_starts = 0
        self.narrow_starts = 0  # attempts started on fewer GPUs than their job's (elastic width)
        self.placer = Placer(policy, scenario, self.feed, settings, self.used, self.node_type)
        self.width = ElasticWidth(policy, scenario, settings, self.placer, self.node_type)
        self.elastic = self.width.on  # reports then count narrow starts and joins
        self.min_gpus = self.width.min_gpus  # fewest GPUs each job may run on

    # ---- events ------------------------------------------------------------------------------------------------

    def arrive(self, jobs: np.ndarray) -> None:
        self.queue.extend(int(j) for j in jobs)

    def _complete_until(self, now: float) -> None:
        """Completions and planned stops (yields) up to `now`, in time order."""
        while self.heap and self.heap[0][0] <= now:
            end, job, attempt, kind = heapq.heappop(self.heap)
            if attempt != self.attempt[job] or job not in self.runs:
                continue
            if kind in (YIELD, SAVE_YIELD):
                saved_until = end - self.s.save_on_stop_seconds if kind == SAVE_YIELD else None
                self._yield(self.runs[job], end, saved_until)
                continue
            r = self.runs.pop(job)
            self._release(r)
            self.t.ran_gpu_s += (end - r.start) * r.gpus
            self.t.startup_gpu_s += r.startup * r.gpus
            self.useful_ref[job] += self.remaining_ref[job]
            self.remaining_ref[job] = 0.0
            self.finish[job] = end

    def _release(self, r: Run) -> None:
        for n, g in r.members:
            del self.on_node[n][r.job]
            self.used[n] -= g

    def _start(self, job: int, node: int, now: float, members: Plan = (),
               believed: float | None = None, gpus: int | None = None) -> None:
        """Start an attempt: `restart_seconds` of start-up, then the remaining work (`believed`: the policy's p90
        of it on this node's GPU type at this width, seconds; None for runtime-blind policies). `gpus`: the width,
        fewer than the job's GPUs for an elastic job run narrower (its work then takes job GPUs / gpus as long)."""
        full = int(self.sc.jobs.gpus[job])
        g = full if gpus is None else int(gpus)
        assert self.min_gpus[job] <= g <= full
        members = members or ((node, g),)
        assert sum(w for _, w in members) == g
        startup = self.s.restart_seconds
        slowdown = float(self.slow[node]) if g == full else float(self.slow[node]) * full / g
        end = now + startup + self.remaining_ref[job] * slowdown
        self.attempt[job] += 1
        expected = None if believed is None else now + startup + believed
        r = Run(job, node, now, g, slowdown, end, members, startup, expected)
        self.runs[job] = r
        for n, w in members:
            self.on_node[n][job] = r
            self.used[n] += w
        heapq.heappush(self.heap, (end, job, int(self.attempt[job]), COMPLETE))
        first = now + startup + self.s.checkpoint_seconds
        if self.yields and not self.s.save_on_stop_seconds and first < end:  # a saving job is looked at each minute
            heapq.heappush(self.checkpoints, (first, job, int(self.attempt[job])))
        self.placements.append((job, node, now))
        if len(members) > 1:
            self.gang_starts += 1
        if g < full:
            self.narrow_starts += 1
        if math.isnan(self.first_start[job]):
            self.first_start[job] = now

    def _saved(self, r: Run, now: float) -> float:
        """Seconds of the attempt's work kept at its last checkpoint by `now` (none during start-up)."""
        c = self.s.checkpoint_seconds
        return checkpoints_done(now=now, started_at=r.start, interval=c or None, startup_seconds=r.startup) * c

    def _stop(self, r: Run, now: float, requeue: bool = True, saved_until: float | None = None) -> float:
        """End an attempt at `now` (eviction, yield, or a join's restart with `requeue` False): free its GPUs, keep
        its checkpointed work, requeue the job;
        return the GPU-seconds lost: since the last checkpoint, or since the start when the attempt kept nothing
        (its start-up then went for nothing too; an attempt that kept work counts its start-up apart).
        `saved_until`: the attempt saved all its work up to then when told to stop (a planned stop with a save);
        the GPU time from then to `now` went on the save; one stopped before any work (in its start-up) lost it all."""
        elapsed = now - r.start
        saved = self._saved(r, now) if saved_until is None else max(0.0, saved_until - r.start - r.startup)
        if elapsed > r.startup:
            self._measure(r)
        if saved_until is not None:
            lost = 0.0 if saved > 0 else elapsed * r.gpus
        else:
            lost = max(0.0, self._since_checkpoint(r, now)) * r.gpus
        self.runs.pop(r.job)
        self._release(r)
        self.attempt[r.job] += 1  # invalidates its completion event
        self.t.ran_gpu_s += elapsed * r.gpus
        if saved > 0:
            self.t.startup_gpu_s += r.startup * r.gpus
        kept_ref = saved / r.slowdown
        self.useful_ref[r.job] += kept_ref
        self.remaining_ref[r.job] = max(0.0, self.remaining_ref[r.job] - kept_ref)
        if requeue:
            self.queue.append(r.job)
        return lost

    def _measure(self, r: Run) -> None:
        """Run r timed its steps: on its GPU type when all its members share one (a gang's pace is its slowest)."""
        types = {int(self.node_type[n]) for n, _ in r.members}
        if len(types) == 1:
            self.measured[r.job, types.pop()] = True

    def _beliefs(self, jobs: np.ndarray, remaining_ref: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The policy's (p50, p90) of the jobs' remaining runs per GPU type, paces measured so far included."""
        return believed_p50_p90(self.p, scenario=self.sc, jobs=jobs, remaining_ref_s=remaining_ref,
                                measured=self.measured)

    def _evict(self, r: Run, now: float, minute_index: int, node: int | None = None) -> Plan:
        """Evict run r for online work on `node` (None: all of it goes); return the (node, GPUs) it let go of.

        With `elastic_narrow`, a gang that keeps its first member (worker 0) and its least width on the other nodes
        goes on there, narrower, from its last checkpoint (`_go_on_narrower`) instead of being requeued."""
        keep = self._narrower(r, node)
        lost = self._stop(r, now, requeue=keep is None)
        self.t.lost_gpu_s += lost
        self.t.lost_by_minute[minute_index] += lost
        self.t.evictions += 1
        self.job_evictions[r.job] += 1
        if keep is None:
            return r.members
        self._go_on_narrower(r, keep, now)
        return tuple((n, w) for n, w in r.members if n == node)

    def _narrower(self, r: Run, node: int | None) -> Plan | None:
        """The members run r goes on with when online work takes its GPUs on `node`; None when it cannot (not
        elastic narrowing, a lone pod, worker 0 lost, fewer GPUs left than the job's least width)."""
        if not (self.s.elastic_narrow and self.elastic) or node is None or len(r.members) < 2:
            return None
        if node == r.members[0][0]:
            return None
        keep = tuple((n, w) for n, w in r.members if n != node)
        return keep if sum(w for _, w in keep) >= self.min_gpus[r.job] else None

    def _go_on_narrower(self, r: Run, keep: Plan, now: float) -> None:
        """Restart run r's job at once on `keep` (its remaining work at that width, with the policy's p90 of it)."""
        full = int(self.sc.jobs.gpus[r.job])
        gpus = sum(w for _, w in keep)
        believed = None
        if self.p.windowed:
            _, p90 = self._beliefs(np.array([r.job]), self.remaining_ref)
            believed = self._believed(p90, 0, r.node, scale=full / gpus)
        self._start(r.job, r.node, now, keep if len(keep) > 1 else (), believed, gpus=gpus)
        self.t.narrowings += 1

    def _yield(self, r: Run, at: float, saved_until: float | None = None) -> None:
        """A planned stop at a checkpoint, or after a save begun at `saved_until`: nothing lost (but a start-up cut
        short by a save), no online pod waits; the job is requeued."""
        lost = self._stop(r, at, saved_until=saved_until)
        if saved_until is None:
            assert abs(lost) < 1e-6 * max(1.0, at), "a yield happens at a checkpoint"
        elif lost > 0:
            i = min(max(int(at // 60) - self.sc.start_minute, 0), len(self.t.lost_by_minute) - 1)
            self.t.lost_gpu_s += lost
            self.t.lost_by_minute[i] += lost
        self.t.yields += 1
        self.job_yields[r.job] += 1

    def _window_end(self, r: Run, n: int, now: float) -> float | None:
        """Forecast end of the window run r's GPUs on node n are in: the window for its GPUs on top of those of the
        node's offline pods that started before it (a pod started later was admitted into what was left, so its
        GPUs are the first the forecast takes back; a pooled node's, by its room in the pool). None when open-ended or
        the node's forecast is stale; `now` when the forecast leaves them no window at all."""
        assert self.feed is not None
        room = self.feed.room(n, now)
        if room is None:
            return None
        held = sum(w for o in self.on_node[n].values() if o.start <= r.start for m, w in o.members if m == n)
        return profile_window(room, held=held, now=now)[0]

    def _run_window_end(self, r: Run, now: float) -> float | None:
        """The earliest forecast end over the windows run r's members are in (None: none ends, each being
        open-ended or stale). Any member's end counts: the evictor judges each pod by its own node's window, and a
        member stopped stops its gang, so a gang with one member in an open-ended window still stops where another
        member's window ends."""
        ends = [e for e in (self._window_end(r, n, now) for n, _ in r.members) if e is not None]
        return min(ends) if ends else None

    def _plan_saving_yields(self, now: float) -> None:
        """Jobs that save when stopped: each running job whose window ends before the next minute's look plus its
        save gets a stop begun `save_on_stop_seconds` before that end (not before now), its save-yield event at the
        save's end."""
        save = self.s.save_on_stop_seconds
        look = replace(self.s.yielding, at_checkpoint_seconds=60.0)
        for job, r in list(self.runs.items()):
            if (job, int(self.attempt[job])) in self.saving:
                continue
            window_end = self._run_window_end(r, now)
            if not should_yield(now=now, started_at=r.start, interval=self.s.checkpoint_seconds,
                                window_end=window_end, startup_seconds=r.startup, finish_by=self._expected_end(r, now),
                                save_seconds=save, settings=look):
                continue
            assert window_end is not None
            begin = min(max(now, window_end - self.s.yielding.margin_seconds - save), now + 60.0)
            if begin + save < r.end:
                self.saving.add((job, int(self.attempt[job])))
                heapq.heappush(self.heap, (begin + save, job, int(self.attempt[job]), SAVE_YIELD))

    def _plan_yields(self, now: float) -> None:
        """Look at every checkpoint falling in this minute [now, now + 60) with the forecast as of now; a job that
        should stop there gets a yield event at that checkpoint (processed before the next minute's evictions)."""
        if self.s.save_on_stop_seconds > 0:
            self._plan_saving_yields(now)
            return
        c = self.s.checkpoint_seconds
        while self.checkpoints and self.checkpoints[0][0] < now + 60.0:
            at, job, attempt = heapq.heappop(self.checkpoints)
            r = self.runs.get(job)
            if r is None or attempt != self.attempt[job] or at >= r.end:
                continue
            window_end = self._run_window_end(r, now)
            if should_yield(now=at, started_at=r.start, interval=c, window_end=window_end, startup_seconds=r.startup,
                            finish_by=self._expected_end(r, at), settings=self.s.yielding):
                heapq.heappush(self.heap, (at, job, attempt, YIELD))
            elif at + c < r.end:
                heapq.heappush(self.checkpoints, (at + c, job, attempt))

    def _expected_end(self, r: Run, now: float) -> float | None:
        """When the policy expects attempt `r` to end, as of `now`: its belief (start + start-up + p90) until its pace
        is measured (`live_pace_seconds` after its start-up), then that pace's finish, as the extender and evictor
        read a pod's live progress (`LiveProgress.finish_by`). A runtime-blind policy expects nothing."""
        lp = self.s.live_pace_seconds
        measured_at = r.start + r.startup + (lp or 0.0)
        if lp is None or r.expected_end is None or now < measured_at:
            return r.expected_end
        work = max(r.end - r.start - r.startup, 1e-9)  # the attempt's true seconds of work: its pace is exact here
        step = work / LIVE_STEPS
        live = LiveProgress(at=measured_at, step_seconds=step, steps=min(LIVE_STEPS, int(lp / step)),
                            total_steps=LIVE_STEPS)
        return live.finish_by()

    def _since_checkpoint(self, r: Run, now: float) -> float:
        """Seconds since the attempt's last checkpoint, or since its start when it has none yet (as the extender's
        store counts a pod's work at risk: `yielding.since_checkpoint`)."""
        return since_checkpoint(now=now, started_at=r.start, interval=self.s.checkpoint_seconds or None,
                                startup_seconds=r.startup)

    def _online_wait_seconds(self) -> float:
        """How long an online GPU held by offline work waits for it: the victim's exit, at most the grace period."""
        grace = self.s.eviction_grace_seconds
        ex = self.s.offline_exit_seconds
        return grace if ex is None else min(grace, max(0.0, ex))

    def _offline_pods(self, n: int, now: float) -> list[OfflinePod]:
        """Node n's offline pods as the eviction choice sees them (a gang member: its GPUs here, its gang's work)."""
        c = self.s.checkpoint_seconds
        return [
            OfflinePod(
                name=str(j),
                gpus=next(w for m, w in r.members if m == n),
                checkpointing=c > 0,
                elapsed_seconds=now - r.start,
                seconds_since_checkpoint=self._since_checkpoint(r, now) if c > 0 else None,
                gang_gpus=r.gpus if len(r.members) > 1 else 0,  # an evicted member stops its whole gang
            )
            for j, r in self.on_node[n].items()
        ]

    def _place_online(self, minute: int, now: float, minute_index: int) -> None:
        """Pod-placed online demand: end and start this minute's online pods, evicting as the evictor would.

        Ends first (pools in order), then each new pod: to the pool node with most unallocated GPUs (ties at
        random); when no pool node has room, `plan_for_pending` over the pool's nodes, with GPUs of pods evicted
        this minute counted as releasing; the pod then waits for the evicted pod to go (`_online_wait_seconds`)."""
        pl = self.placement
        assert pl is not None
        fl = self.sc.fleet
        want = pl.pools.pods[:, minute]
        for p in range(want.size):
            have = pl.count(p)
            if want[p] < have:
                pl.end(p, have - int(want[p]))
        releasing = np.zeros(fl.size, dtype=np.int64)
        for p in range(want.size):
            for k in range(int(want[p]) - pl.count(p)):
                self._start_online_pod(p, f"online-{p}-{minute}-{k}", now, minute_index, releasing)
        pl.minute = minute
        self.demand[:, minute] = pl.online_gpus

    def _start_online_pod(self, pool: int, key: str, now: float, minute_index: int, releasing: np.ndarray) -> None:
        """Place one online pod of `pool`; evict for it when no pool node has room; tally its wait."""
        pl = self.placement
        assert pl is not None
        fl = self.sc.fleet
        g = int(pl.pools.pod_gpus[pool])
        self.t.online_gpu_requests += g
        unallocated = fl.gpus - pl.online_gpus - self.used - releasing
        node = pl.pick(pool, unallocated)
        if node is not None:
            pl.put(node)
            return
        nodes = pl.pools.nodes[pool]
        states = {
            fl.names[n]: NodeState(
                NodeView(fl.names[n], fl.gpu_types[n], int(fl.gpus[n]), max(0, int(unallocated[n]))),
                tuple(self._offline_pods(int(n), now)),
                int(releasing[n]),
            )
            for n in nodes
        }
        names = [fl.names[n] for n in nodes]
        plan = plan_for_pending(pod_key=key, gpus=g, candidates=names, nodes=states)
        if plan is not None:
            node = fl.names.index(plan.node)
            for v in plan.victims:
                r = self.on_node[node].get(int(v.name))
                if r is None:  # already gone with a gang evicted for an earlier victim
                    continue
                for n, w in self._evict(r, now, minute_index, node=node):
                    releasing[n] += w
            self.t.online_delay_events += 1
        else:  # room is on its way on a candidate (GPUs of pods evicted this minute): the pod waits for it there
            room = [int(n) for n in nodes if max(0, int(unallocated[n])) + int(releasing[n]) >= g]
            if not room:
                raise AssertionError(f"online pod {key} finds no room and nothing to evict in pool {pool}")
            node = room[0]
        take_free = min(max(0, int(fl.gpus[node] - pl.online_gpus[node] - self.used[node] - releasing[node])), g)
        releasing[node] -= g - take_free
        pl.put(node)
        self.t.online_delay_gpu_s += float(g) * self.s.eviction_grace_seconds
        wait = self._online_wait_seconds()
        self.t.online_waits[wait] = self.t.online_waits.get(wait, 0) + g

    def _evict_for_online(self, minute: int, now: float, minute_index: int) -> None:
        """Evict for online demand that rose since the last minute; tally how long each online GPU waited.

        Every GPU online demand adds on a node is one online pod's request: it waits 0 s when the node has it free,
        else until an evicted offline pod lets go of it (`_online_wait_seconds`)."""
        fl = self.sc.fleet
        d_now = self.sc.demand[:, minute]
        if minute > 0:
            rise = d_now.astype(np.int64) - self.sc.demand[:, minute - 1]
            self.t.online_gpu_requests += int(rise[rise > 0].sum())
        over = d_now + self.used - fl.gpus
        for n in np.flatnonzero(over > 0):
            short = int(d_now[n] + self.used[n] - fl.gpus[n])  # an evicted gang may already have freed this node
            if short <= 0:
                continue
            d_prev = int(self.sc.demand[n, minute - 1]) if minute > 0 else 0
            view = NodeView(fl.names[n], fl.gpu_types[n], int(fl.gpus[n]), max(0, int(fl.gpus[n] - self.used[n] - d_prev)))
            pods = self._offline_pods(int(n), now)
            victims = choose_victims(node=view, online_gpus_needed=int(d_now[n]) - d_prev, offline_pods=pods)
            for v in victims:
                self._evict(self.on_node[n][int(v.name)], now, minute_index, node=int(n))
            self.t.online_delay_gpu_s += float(short) * self.s.eviction_grace_seconds
            self.t.online_delay_events += 1
            wait = self._online_wait_seconds()
            self.t.online_waits[wait] = self.t.online_waits.get(wait, 0) + short
            if d_now[n] + self.used[n] > fl.gpus[n]:
                raise AssertionError(f"eviction left node {n} over capacity")  # choose_victims returns all if short

    # ---- scheduling --------------------------------------------------------------------------------------------

    def _believed(self, p90: np.ndarray | None, k: int, node: int, scale: float = 1.0) -> float | None:
        """The policy's p90 of queued job k's remaining run on node's GPU type, × `scale` for a narrower width
        (None: runtime-blind)."""
        return None if p90 is None else float(p90[k, self.node_type[node]]) * scale

    def schedule(self, minute: int, now: float) -> None:
        if not self.queue:
            return
        fl = self.sc.fleet
        free = fl.gpus - self.demand[:, minute] - self.used
        if free.max() <= 0:
            return
        q = np.array(self.queue, dtype=np.int64)
        g = self.sc.jobs.gpus[q]
        fmax = int(free.max())
        gangs = self.s.gangs
        cand_mask = self.min_gpus[q] <= (int(np.maximum(free, 0).sum()) if gangs else fmax)
        need = p50 = p90 = None
        levels = None
        if self.p.windowed:
            assert self.feed is not None
            p50, p90 = self._beliefs(q, self.remaining_ref)
            need = np.full(p90.shape, np.inf)
            idx = np.flatnonzero(cand_mask)
            need[idx] = self.placer.needs(p90[idx], 1)
            levels = self.feed.left_bounds(now=now, offline=self.used, levels=int(fl.gpus.max()))
            if self.s.prune:
                fits = np.zeros(len(q), dtype=bool)
                for gv in np.unique(g[cand_mask & (g <= fmax)]):
                    left = levels[int(gv)].copy()
                    left[free < gv] = -np.inf
                    best = np.full(len(fl.types), -np.inf)
                    np.maximum.at(best, self.node_type, left)
                    sel = g == gv
                    fits[sel] = (need[sel] <= best[None, :]).any(axis=1)
                gang = np.zeros(len(q), dtype=bool)
                if gangs:  # jobs no node takes alone that a gang may hold (elastic ones are bounded per width)
                    idx = np.flatnonzero(cand_mask & ~fits & (g > 1))
                    gang[idx] = self.placer.gang_room(p90[idx], g[idx], free, now)
                cand_mask &= fits | gang | (self.min_gpus[q] < g)
        placed: set[int] = set()
        names = {name: i for i, name in enumerate(fl.names)}
        for k in np.flatnonzero(cand_mask):
            j = int(q[k])
            gj = int(g[k])
            t0 = time.perf_counter()
            width, chosen, plan = self.width.place(int(k), j, gj, free, now, p50, p90, need, levels)  # widest first
            self.t.decision_s.append(time.perf_counter() - t0)
            self.t.decisions += 1
            scale = 1.0 if width == gj else gj / width
            if chosen is not None:
                n = names[chosen]
                self._start(j, n, now, believed=self._believed(p90, int(k), n, scale), gpus=width)
                free[n] -= width
                placed.add(j)
            elif plan is not None:
                self._start(j, plan[0][0], now, plan, believed=self._believed(p90, int(k), plan[0][0], scale),
                            gpus=width)
                for n, w in plan:
                    free[n] -= w
                placed.add(j)
        if placed:
            self.queue = [j for j in self.queue if j not in placed]

    # ---- elastic joins -----------------------------------------------------------------------------------------

    def _join_pass(self, minute: int, now: float, minute_index: int) -> None:
        """Running jobs narrower than their GPUs: let waiting workers join where the filter passes them now (the
        choice is `ElasticWidth.plan_join`'s; here the restarts, one after another, and their accounting)."""
        narrow = self.width.narrow(self.runs.values())  # the oldest waiting workers first
        if not narrow:
            return
        fl = self.sc.fleet
        free = fl.gpus - self.demand[:, minute] - self.used
        levels = None
        for r in narrow:
            if not self.width.room_on_type(r, free):
                continue
            if self.p.windowed and levels is None:
                assert self.feed is not None
                levels = self.feed.left_bounds(now=now, offline=self.used, levels=int(fl.gpus.max()))
            t0 = time.perf_counter()
            got = self.width.plan_join(r, free, now, levels, self.remaining_ref, self._saved(r, now),
                                       self.measured)
            self.t.decision_s.append(time.perf_counter() - t0)
            self.t.decisions += 1
            if got is None:
                continue
            plan, believed = got
            self._join(r, plan, now, minute_index, believed)
            for n, w in plan:
                free[n] -= w

    def _join(self, r: Run, plan: Plan, now: float, minute_index: int, believed: float | None) -> None:
        """Restart run r from its last checkpoint on its GPUs plus `plan`'s: the work since then is lost."""
        lost = self._stop(r, now, requeue=False)
        self.t.lost_gpu_s += lost
        self.t.lost_by_minute[minute_index] += lost
        self.t.joins += 1
        members, gpus = self.width.joined(r, plan)
        self._start(r.job, r.node, now, members if len(members) > 1 else (), believed, gpus=gpus)

    # ---- driver hooks ------------------------------------------------------------------------------------------

    def step(self, minute: int, new_jobs: np.ndarray) -> None:
        """Advance to the start of `minute`: completions, arrivals, evictions, one scheduling pass."""
        now = minute * 60.0
        i = minute - self.sc.start_minute
        self._complete_until(now)
        self.arrive(new_jobs)
        if self.placement is None:
            self._evict_for_online(minute, now, i)
        else:
            self._place_online(minute, now, i)
        if self.own_feed:
            assert self.feed is not None
            self.feed.maybe_refresh(now)  # this policy's own online demand, as its extender would see it
        if self.yields:
            self._plan_yields(now)
        self.schedule(minute, now)
        if self.width.joins:
            self._join_pass(minute, now, i)
        self.t.occupancy[i] = float(self.used.sum())
        if self.s.check_invariants:
            assert (self.demand[:, minute] + self.used <= self.sc.fleet.gpus).all(), "capacity exceeded"
            assert (self.used >= 0).all()

    def __getstate__(self) -> dict[str, object]:
        """A finished run as it crosses from a worker process (`offpeak_sim.workers`): its results and settings,
        not what made them (the scenario, which the parent has and sets back, the feed, the placer, the heap)."""
        state = self.__dict__.copy()
        for name in ("sc", "feed", "placer", "width", "placement", "demand", "heap", "checkpoints", "on_node"):
            state[name] = None
        return state

    def close(self, end_s: float) -> None:
        """Finish the run at `end_s`: completions up to then; still-running work counts as ran, not lost."""
        self._complete_until(end_s)
        for r in self.runs.values():
            self.t.ran_gpu_s += (end_s - r.start) * r.gpus
            self.t.startup_gpu_s += min(end_s - r.start, r.startup) * r.gpus


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
    # pod-placed online demand: each policy refreshes its own feed in its step (the shared one is only a template)
    needs_feed = feed is not None and scenario.online_pods is None and any(p.windowed for p in policies)
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
