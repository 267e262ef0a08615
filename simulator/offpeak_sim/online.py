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
  GPUs, is packed onto its nodes in order. The minute series is tiled when the run is longer than the trace.
- Philly busy nodes (`philly_node_sequence.csv`): the busy fraction of the 420-node cluster, scaled to the fleet;
  busy nodes are fully held by online work (nodes in a seeded random order, packed).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from offpeak.errors import UserError
from offpeak_core.traces import alibaba, helios
from offpeak_sim.fleet import Fleet

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
    """Return int16 array [nodes, minutes]: GPUs held by online work on each node, never above its GPUs."""
    layout = detect_layout(folder)
    rng = np.random.default_rng(seed)
    if layout == "alibaba":
        demand = _alibaba(folder, fleet=fleet, minutes=minutes, rng=rng, settings=settings)
    elif layout == "helios":
        demand = _helios(folder, fleet=fleet, minutes=minutes, rng=rng)
    else:
        demand = _philly(folder, fleet=fleet, minutes=minutes, rng=rng)
    return np.minimum(demand, fleet.gpus[:, None]).astype(np.int16)


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


def _helios(folder: Path, *, fleet: Fleet, minutes: int, rng: np.random.Generator) -> np.ndarray:
    running, total = helios.read_vc_gpus(folder)
    tot = total.to_numpy(dtype=float)
    frac = np.clip(np.divide(running.to_numpy(dtype=float), tot, out=np.zeros_like(tot), where=tot > 0), 0, 1)
    size = tot.mean(axis=0)
    keep = size > 0
    frac, size = frac[:, keep], size[keep]
    # nodes per VC in proportion to VC size (largest remainder), VCs in a seeded order
    share = size / size.sum() * fleet.size
    count = np.floor(share).astype(int)
    for i in np.argsort(-(share - count))[: fleet.size - count.sum()]:
        count[i] += 1
    vc_of_node = rng.permutation(np.repeat(np.arange(len(size)), count))
    t = np.arange(minutes) % frac.shape[0]
    demand = np.zeros((fleet.size, minutes), dtype=np.int16)
    for v in range(len(size)):
        nodes = np.flatnonzero(vc_of_node == v)
        if nodes.size == 0:
            continue
        gpus = fleet.gpus[nodes]
        want = np.rint(frac[t, v] * gpus.sum())  # GPUs the VC holds in the group, per minute
        before = np.concatenate([[0], np.cumsum(gpus)[:-1]])
        demand[nodes] = np.clip(want[None, :] - before[:, None], 0, gpus[:, None])
    return demand


# ---- Philly --------------------------------------------------------------------------------------------------


def _philly(folder: Path, *, fleet: Fleet, minutes: int, rng: np.random.Generator) -> np.ndarray:
    df = _read_csv(folder / PHILLY_FILE)
    if df.empty or not {"active", "total"} <= set(df.columns):
        raise UserError(f"{folder / PHILLY_FILE}: want columns time, active, total with rows")
    frac = np.clip(df["active"].to_numpy(dtype=float) / df["total"].to_numpy(dtype=float), 0, 1)
    busy_nodes = np.rint(frac[np.arange(minutes) % len(frac)] * fleet.size)
    rank = rng.permutation(fleet.size)
    return np.where(rank[:, None] < busy_nodes[None, :], fleet.gpus[:, None], 0).astype(np.int16)
