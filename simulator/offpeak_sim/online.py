"""Per-node online GPU demand (GPUs held by online work, per node per minute) from real traces.

Three layouts are recognised by the files in the folder (any time slice in the same layout works):

- Alibaba GenAI serving (`pod_gpu_duty_cycle_anon.csv`): each inference pod is one GPU, busy by offpeak's one
  rule (`offpeak_core.traces.alibaba`: duty cycle >= 10 %, held 5 minutes either side). The ~23 h trace is
  folded onto a 24 h clock (minute of day of the anonymised UTC timestamp; gaps filled circularly) and tiled:
  every GPU slot of every node gets a pod (seeded permutation, repeated when there are more slots than pods) and
  each day a fresh random shift of +-`day_jitter_minutes`, so days are alike but not identical (a forecaster has
  something to learn, and something to miss).
- Helios Earth per-VC occupancy (`earth_vc_running_gpu_num.csv` + `earth_vc_total_gpu_num.csv`): each VC is a
  group of nodes (node counts proportional to the VC's GPUs); the VC's occupied fraction, scaled to the group's
  GPUs, is its online GPU count per minute. The minute series is tiled when the run is longer than the trace.
- Philly busy nodes (`philly_node_sequence.csv`): the busy fraction of the 420-node cluster, scaled to the fleet,
  is a count of busy nodes per minute; a busy node is fully held by online work.

How a count becomes per-node demand (`OnlineSettings.placement`):

- `pods` (default; Helios and Philly): the count is online pods (Helios: 1 GPU each, a VC is a pool of its nodes;
  Philly: a whole node each, the fleet is one pool) placed the way the default kube-scheduler would
  (`offpeak_sim.onlinepods`); what a policy's offline pods hold changes where they go, so every policy carries on
  its own placement from the end of the history, and the history is that placement with no offline pods.
- `pinned` (the model before): Helios VCs' GPUs packed onto their nodes in order, Philly's busy nodes in a seeded
  random order. Alibaba is always pinned: each serving pod is one GPU whose utilisation rises and falls in place.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
import pandas as pd

from offpeak.errors import UserError
from offpeak_core.traces import alibaba, helios
from offpeak_sim.fleet import Fleet
from offpeak_sim.onlinepods import OnlinePlacement, OnlinePools, reference_demand

MINUTES_PER_DAY = 1440

ALIBABA_FILE = alibaba.FILE
HELIOS_RUNNING = helios.RUNNING_FILE
HELIOS_TOTAL = helios.TOTAL_FILE
PHILLY_FILE = "philly_node_sequence.csv"


@dataclass(frozen=True)
class OnlineSettings:
    """How a trace becomes per-node online demand."""

    busy_util_pct: float = alibaba.BUSY_UTIL_PCT  # Alibaba: duty cycle at or above this serves online work
    hold_minutes: int = alibaba.HOLD_MINUTES  # Alibaba: a busy minute holds the GPU this many minutes either side
    day_jitter_minutes: int = 30  # Alibaba: per-slot, per-day random shift of the daily profile
    placement: Literal["pods", "pinned"] = "pods"  # Helios/Philly: placed by the default scheduler's rule, or packed


@dataclass(frozen=True)
class OnlineDemand:
    """Per-node online demand, and (pod-placed layouts) the online pods' placement where the run starts."""

    demand: np.ndarray  # int16 [nodes, minutes]; pod-placed: the placement with no offline pods (history + run)
    placement: OnlinePlacement | None = None  # None: the demand is pinned to nodes, the same for every policy


def detect_layout(folder: Path) -> str:
    """Return 'alibaba', 'helios' or 'philly' from the files present, or raise a UserError."""
    if (folder / ALIBABA_FILE).is_file():
        return "alibaba"
    if (folder / HELIOS_RUNNING).is_file() and (folder / HELIOS_TOTAL).is_file():
        return "helios"
    if (folder / PHILLY_FILE).is_file():
        return "philly"
    raise UserError(
        f"{folder} is not an online trace folder: expected {ALIBABA_FILE} (Alibaba GenAI), "
        f"{HELIOS_RUNNING}+{HELIOS_TOTAL} (Helios) or {PHILLY_FILE} (Philly)"
    )


def load_online_demand(
    folder: Path, *, fleet: Fleet, minutes: int, seed: int, settings: OnlineSettings = OnlineSettings()
) -> np.ndarray:
    """Return int16 array [nodes, minutes]: GPUs held by online work on each node, never above its GPUs.

    Pod-placed layouts: the placement with no offline pods (`load_online` gives the placement too)."""
    return load_online(folder, fleet=fleet, minutes=minutes, seed=seed, settings=settings, start_minute=minutes).demand


def load_online(
    folder: Path, *, fleet: Fleet, minutes: int, seed: int, start_minute: int,
    settings: OnlineSettings = OnlineSettings(),
) -> OnlineDemand:
    """Per-node online demand; for pod-placed layouts also the placement at `start_minute` (the run's start)."""
    layout = detect_layout(folder)
    rng = np.random.default_rng(seed)
    pools: OnlinePools | None = None
    if layout == "alibaba":
        demand = _alibaba(folder, fleet=fleet, minutes=minutes, rng=rng, settings=settings)
    elif layout == "helios":
        vc_of_node, want = _helios_counts(folder, fleet=fleet, minutes=minutes, rng=rng)
        if settings.placement == "pods":
            pools = _helios_pools(vc_of_node, want)
        else:
            demand = _helios_packed(vc_of_node, want, fleet=fleet)
    else:
        busy_nodes = _philly_counts(folder, fleet=fleet, minutes=minutes)
        if settings.placement == "pods" and np.unique(fleet.gpus).size == 1:
            nodes = np.arange(fleet.size)
            pools = OnlinePools((nodes,), busy_nodes[None, :].astype(np.int64), np.array([int(fleet.gpus[0])]))
        else:
            demand = _philly_packed(busy_nodes, fleet=fleet, rng=rng)
    if pools is None:
        return OnlineDemand(np.minimum(demand, fleet.gpus[:, None]).astype(np.int16))
    ref, at_start = reference_demand(pools, fleet.gpus, seed=seed, minutes=minutes, start_minute=start_minute)
    return OnlineDemand(ref, at_start)


def _read_csv(path: Path, **kw: object) -> pd.DataFrame:
    try:
        return pd.read_csv(path, **kw)  # type: ignore[call-overload]
    except (ValueError, pd.errors.ParserError) as e:
        raise UserError(f"cannot read {path}: {e}") from e


# ---- Alibaba GenAI -------------------------------------------------------------------------------------------


def alibaba_daily_profiles(path: Path, *, busy_util_pct: float) -> np.ndarray:
    """Return bool [pods, 1440]: pod busy in each minute of the (anonymised UTC) day, gaps filled circularly."""
    df = alibaba.read_duty_cycle(path)
    minute = ((df["timestamp_anon"].to_numpy(dtype=np.int64) % 86400) // 60).astype(np.int64)
    pods, pod_idx = np.unique(df["container_ip"].astype(str).to_numpy(), return_inverse=True)
    seen = np.zeros((len(pods), MINUTES_PER_DAY), dtype=bool)
    busy = np.zeros((len(pods), MINUTES_PER_DAY), dtype=bool)
    seen[pod_idx, minute] = True
    hot = alibaba.busy_samples(df["value"].to_numpy(), busy_util_pct=busy_util_pct)
    np.logical_or.at(busy, (pod_idx, minute), hot)
    # Minutes never sampled (the trace is ~23 h, samples every 57 s): take the last sampled minute before them,
    # circularly. A pod absent from the whole trace at some time counts as idle there (its GPU is not held).
    any_seen: np.ndarray = np.asarray(seen.any(axis=0))
    if not any_seen.any():
        raise UserError(f"{path}: no usable samples")
    src = np.arange(MINUTES_PER_DAY)
    last = -1
    for m in list(range(MINUTES_PER_DAY)) * 2:
        if any_seen[m]:
            last = m
        elif last >= 0:
            src[m] = last
    return busy[:, src]


def _alibaba(
    folder: Path, *, fleet: Fleet, minutes: int, rng: np.random.Generator, settings: OnlineSettings
) -> np.ndarray:
    profiles = alibaba_daily_profiles(folder / ALIBABA_FILE, busy_util_pct=settings.busy_util_pct)
    n_pods = profiles.shape[0]
    slots = int(fleet.gpus.sum())
    reps = -(-slots // n_pods)
    pod_of_slot = np.concatenate([rng.permutation(n_pods) for _ in range(reps)])[:slots]
    days = -(-minutes // MINUTES_PER_DAY)
    jit = settings.day_jitter_minutes
    shifts = rng.integers(-jit, jit + 1, size=(slots, days)) if jit > 0 else np.zeros((slots, days), dtype=int)
    m = np.arange(MINUTES_PER_DAY)
    busy = np.empty((slots, days * MINUTES_PER_DAY), dtype=bool)
    for d in range(days):
        idx = (m[None, :] - shifts[:, d : d + 1]) % MINUTES_PER_DAY
        busy[:, d * MINUTES_PER_DAY : (d + 1) * MINUTES_PER_DAY] = profiles[pod_of_slot[:, None], idx]
    busy = busy[:, :minutes]
    busy = alibaba.hold(busy, minutes=settings.hold_minutes, axis=1)
    node_of_slot = np.repeat(np.arange(fleet.size), fleet.gpus)
    demand = np.zeros((fleet.size, minutes), dtype=np.int16)
    np.add.at(demand, node_of_slot, busy.astype(np.int16))
    return demand


# ---- Helios --------------------------------------------------------------------------------------------------


def _helios_counts(
    folder: Path, *, fleet: Fleet, minutes: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """Each node's VC (nodes per VC in proportion to its GPUs, VCs in a seeded order) and each VC's online GPUs
    per minute [VCs, minutes] (its occupied fraction of the group's GPUs)."""
    running, total = helios.read_vc_gpus(folder)
    tot = total.to_numpy(dtype=float)
    frac = np.clip(np.divide(running.to_numpy(dtype=float), tot, out=np.zeros_like(tot), where=tot > 0), 0, 1)
    size = tot.mean(axis=0)
    keep = size > 0
    frac, size = frac[:, keep], size[keep]
    share = size / size.sum() * fleet.size  # nodes per VC in proportion to VC size (largest remainder)
    count = np.floor(share).astype(int)
    for i in np.argsort(-(share - count))[: fleet.size - count.sum()]:
        count[i] += 1
    vc_of_node = rng.permutation(np.repeat(np.arange(len(size)), count))
    t = np.arange(minutes) % frac.shape[0]
    group = np.array([int(fleet.gpus[vc_of_node == v].sum()) for v in range(len(size))])
    want = np.rint(frac[t, :].T * group[:, None]).astype(np.int64)
    return vc_of_node, want


def _helios_pools(vc_of_node: np.ndarray, want: np.ndarray) -> OnlinePools:
    """Each VC with nodes is a pool of 1-GPU online pods (the trace counts GPUs, not jobs)."""
    vcs = [v for v in range(want.shape[0]) if np.any(vc_of_node == v)]
    nodes = tuple(np.flatnonzero(vc_of_node == v) for v in vcs)
    return OnlinePools(nodes, want[vcs], np.ones(len(vcs), dtype=np.int64))


def _helios_packed(vc_of_node: np.ndarray, want: np.ndarray, *, fleet: Fleet) -> np.ndarray:
    """The pinned model: a VC's online GPUs packed onto its nodes in order."""
    demand = np.zeros((fleet.size, want.shape[1]), dtype=np.int16)
    for v in range(want.shape[0]):
        nodes = np.flatnonzero(vc_of_node == v)
        if nodes.size == 0:
            continue
        gpus = fleet.gpus[nodes]
        before = np.concatenate([[0], np.cumsum(gpus)[:-1]])
        demand[nodes] = np.clip(want[v][None, :] - before[:, None], 0, gpus[:, None])
    return demand


# ---- Philly --------------------------------------------------------------------------------------------------


def _philly_counts(folder: Path, *, fleet: Fleet, minutes: int) -> np.ndarray:
    """Busy nodes per minute: the trace's busy fraction scaled to the fleet."""
    df = _read_csv(folder / PHILLY_FILE)
    if df.empty or not {"active", "total"} <= set(df.columns):
        raise UserError(f"{folder / PHILLY_FILE}: want columns time, active, total with rows")
    frac = np.clip(df["active"].to_numpy(dtype=float) / df["total"].to_numpy(dtype=float), 0, 1)
    return np.rint(frac[np.arange(minutes) % len(frac)] * fleet.size).astype(np.int64)


def _philly_packed(busy_nodes: np.ndarray, *, fleet: Fleet, rng: np.random.Generator) -> np.ndarray:
    """The pinned model: busy nodes fully held, nodes in a seeded random order."""
    rank = rng.permutation(fleet.size)
    return np.where(rank[:, None] < busy_nodes[None, :], fleet.gpus[:, None], 0).astype(np.int16)
