"""The offline side's knobs for one simulation (`EngineSettings`), shared by the engine and its deciding modules."""

from __future__ import annotations

from dataclasses import dataclass, replace

from offpeak_core.decisions import DEFAULT_MARGIN
from offpeak_core.goodput import GoodputSettings
from offpeak_core.yielding import YieldSettings


@dataclass(frozen=True)
class EngineSettings:
    """Offline-side knobs. Ranges and the rules between them are checked where settings come from,
    `offpeak_sim.scenariofile`, not again here."""

    checkpoint_seconds: float = 1800.0  # 0: jobs do not checkpoint (an eviction loses all work of the attempt)
    eviction_grace_seconds: float = 30.0  # online work waits this long for an evicted pod to go
    # seconds an evicted offline pod takes to let go of its GPUs; None: the whole grace period (the worst case:
    # the kubelet kills it then). An online GPU that needs it waits min(this, grace).
    offline_exit_seconds: float | None = None
    margin: float = DEFAULT_MARGIN  # extender filter margin on p90
    prune: bool = True  # skip jobs/nodes whose forecast bound already rules them out (same decisions, faster)
    check_invariants: bool = False  # assert capacity after every step (tests)
    gangs: bool = True  # a job no single node can take may run across several nodes (all or nothing)
    gang_max_nodes: int | None = None  # most nodes one gang may span (None: the extender's, `gangplans.most_nodes`)
    # every attempt of every job does no useful work for its first restart_seconds (image pull, restore); the goodput
    # rule weighs the same figure (goodput.startup_seconds is set from it)
    restart_seconds: float = 60.0
    goodput: GoodputSettings = GoodputSettings()
    # policies with Policy.yields stop a job at a checkpoint whose successor would land past its forecast window's end;
    # off by default: on seed 0 of both traces it cost more (restarts, evictions on Alibaba) than it saved
    # (docs/simulator.md, "Restart cost and yielding")
    yield_at_checkpoints: bool = False
    yielding: YieldSettings = YieldSettings()
    # with yielding: jobs save when told to stop (the TrainingJob `checkpoint` contract: SIGTERM, save, exit) within
    # this many seconds, so a planned stop comes this long before the window's end, not at the last periodic
    # checkpoint; 0: jobs keep only their periodic checkpoints. Evictions never count on it (grace too short).
    save_on_stop_seconds: float = 0.0
    # live pace (a TrainingJob's progress reports): this many seconds after an attempt's start-up its pace is measured,
    # and from then on decisions time the rest of it by that pace (`offpeak_core.livepace.LiveProgress`, its narrow
    # p90) instead of the prediction, whose error no longer applies; None: by the prediction until it ends (jobs that
    # report nothing). Two minutes is about what the operator's steady steps take at a typical pace.
    live_pace_seconds: float | None = None
    # elastic width (a TrainingJob's minWorkers): a checkpointing job of N >= 2 GPUs may start on k of them,
    # ceil(fraction × N) <= k <= N, the widest k that fits now, its remaining runtime scaled by N / k; None or 0: off
    elastic_min_fraction: float | None = None
    elastic_from_gpus: int = 2  # only jobs of at least this many GPUs are elastic (9 on 8-GPU nodes: wide jobs only)
    # with elastic width: a running job's waiting workers join when GPUs that pass the filter open for them (on the
    # job's GPU type), the widest such set; the whole job restarts from its last checkpoint (the work since then
    # lost, the start-up paid again) and runs wider. Joins are planned after the queued jobs each minute.
    elastic_join: bool = False
    # with elastic width: a gang that loses members to online work goes on with the others when they still hold its
    # least width and its first member (worker 0, the rendezvous host) is not among the lost: the whole job restarts
    # from its last checkpoint on them (work since then lost, start-up paid again) instead of being requeued
    # (the operator's `_narrow`; joins, when on, bring it back to full width later)
    elastic_narrow: bool = False

    def __post_init__(self) -> None:
        if self.goodput.startup_seconds != self.restart_seconds:  # one figure for the engine and the rule
            object.__setattr__(self, "goodput", replace(self.goodput, startup_seconds=self.restart_seconds))
