"""The five policies: what each one knows about runtimes and how it picks among the nodes the extender passes.

All of them go through `offpeak_core.decisions.filter_nodes`; they differ in the `PodRequest.predicted` they
hand it (None = runtime-blind: fits-now only) and in how the final node is chosen:

| policy | runtime it knows | node choice |
|---|---|---|
| default | none | most free GPUs (kube-scheduler's LeastAllocated spread) |
| backfill | none | first node in order with enough free GPUs (first fit) |
| user-estimate | user's wall-time estimate (p50 = p90) | extender `prioritize_nodes` |
| offpeak | predictor p50, p90 = p50 × profile p90 ratio | extender `prioritize_nodes` |
| oracle | true remaining runtime (p50 = p90) | extender `prioritize_nodes` |

The windowed policies admit checkpointing jobs by expected goodput (`offpeak_core.goodput`, with the window
survival the feed has learnt so far): a window shorter than the job is taken when the useful work expected
before it closes is at least `GoodputSettings.min_efficiency` of the GPU time held.

The offpeak policies (both rules) also yield: a checkpointing job stops at a checkpoint whose successor would land
after its node's live forecast window ends (`offpeak_core.yielding`), with no work lost and no online pod waiting.
user-estimate and oracle do not: they stay the runtime-knowledge comparisons they were.

What-ifs, not in the default set: `offpeak-p90` is offpeak without the goodput rule (every job needs a window
of p90 × (1 + margin), the rule before issue 18); `offpeak-ckpt` is that plus the older checkpoint cap
(`checkpoint_intervals=4`: a checkpointing job only needs min(p90 × (1 + margin), 4 checkpoint intervals)).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from offpeak.errors import UserError
from offpeak_core.model import Prediction
from offpeak_core.pace import MEASURED_P90_RATIO

from offpeak_sim.scenario import Scenario


@dataclass(frozen=True)
class Policy:
    name: str
    knows: str  # "blind" | "user" | "predicted" | "true"
    pick: str  # "spread" | "first" | "score"
    checkpoint_intervals: int = 0  # >0: the extender's checkpoint-aware rule with this k
    goodput: bool = True  # windowed: admit checkpointing jobs into shorter windows by expected goodput
    # windowed: stop a checkpointing job at a checkpoint whose successor would land past its forecast window's end
    # (`offpeak_core.yielding`; the engine's `yield_at_checkpoints` turns it off for every policy)
    yields: bool = False

    @property
    def windowed(self) -> bool:
        return self.knows != "blind"


POLICIES: dict[str, Policy] = {
    p.name: p
    for p in (
        Policy("default", "blind", "spread"),
        Policy("backfill", "blind", "first"),
        Policy("user-estimate", "user", "score"),
        Policy("offpeak", "predicted", "score", yields=True),
        Policy("oracle", "true", "score"),
        Policy("offpeak-p90", "predicted", "score", goodput=False, yields=True),
        Policy("offpeak-ckpt", "predicted", "score", checkpoint_intervals=4, goodput=False, yields=True),
    )
}
DEFAULT_SET = ("default", "backfill", "user-estimate", "offpeak", "oracle")


def parse_policies(text: str) -> list[Policy]:
    """Parse `a,b,...` (or `all`) into known policies, in the order given."""
    names = [n.strip() for n in text.split(",") if n.strip()]
    if names == ["all"]:
        return [POLICIES[n] for n in DEFAULT_SET]
    unknown = [n for n in names if n not in POLICIES]
    if unknown or not names:
        raise UserError(f"unknown policy {', '.join(unknown) or '(none)'}; choose from {', '.join(POLICIES)}")
    return [POLICIES[n] for n in dict.fromkeys(names)]


def believed_p50_p90(
    policy: Policy, *, scenario: Scenario, jobs: np.ndarray, remaining_ref_s: np.ndarray,
    measured: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Believed remaining seconds [len(jobs), types] (p50, p90) on each GPU type of the fleet.

    `measured` [jobs in the run, types]: where a job's earlier attempt timed its steps. The predictor-led policy
    then times the rest of it there at that pace (the true one: the engine's runtimes do not vary) with the narrow
    p90 of a measured pace (`offpeak_core.pace`), as the operator does for a resumed job; elsewhere the prediction."""
    slow = scenario.slowdowns()[None, :]
    rem = remaining_ref_s[jobs][:, None]
    if policy.knows == "true":
        p50 = rem * slow
        return p50, p50
    if policy.knows == "predicted":
        p50 = rem * slow * scenario.pred_ratio[jobs]
        p90 = p50 * scenario.p90_ratio
        if measured is not None:
            known = measured[jobs]
            p50 = np.where(known, rem * slow, p50)
            p90 = np.where(known, p50 * MEASURED_P90_RATIO, p90)
        return p50, p90
    if policy.knows == "user":
        frac = rem / scenario.jobs.duration_s[jobs][:, None]
        est = scenario.user_est_ref_s[jobs][:, None] * frac * slow
        return est, est
    raise ValueError(f"policy {policy.name} is runtime-blind")


def predictions(types: tuple[str, ...], p50: np.ndarray, p90: np.ndarray) -> dict[str, Prediction]:
    """The `PodRequest.predicted` mapping for one job (what the operator would annotate)."""
    return {t: Prediction(float(a), float(b)) for t, a, b in zip(types, p50, p90)}
