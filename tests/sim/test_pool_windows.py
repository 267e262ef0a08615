"""Pool windows (`FeedSettings.pool_windows`): with pod-placed online demand, a node's windows end when its pool is
forecast full (`offpeak_core.poolrise`), counting the offline GPUs held on the pool's other nodes."""

from __future__ import annotations

import numpy as np
import pytest

from offpeak_core.windows import idle_windows
from offpeak_sim.engine import EngineSettings, simulate
from offpeak_sim.forecasting import FeedSettings, WindowFeed
from offpeak_sim.policies import POLICIES

from .conftest import windows_now
from .test_online_pods import RUN, pod_scenario

H = 3600.0


def pulsed_counts(days: int = 3) -> np.ndarray:
    """4 online pods, 16 for an hour from 06:00 and from 18:00 every day."""
    c = np.full(days * 1440 + 1, 4, dtype=np.int64)
    for d in range(days):
        for a in (360, 1080):
            c[d * 1440 + a : d * 1440 + a + 60] = 16
    return c


def window_left(feed: WindowFeed, node: int, gpus: int, now: float) -> float:
    """Seconds the node's window for `gpus` more GPUs lasts from `now` (0: none; inf: open-ended)."""
    held = int(feed.offline[node]) if feed.offline is not None else 0
    ws = [w for w in windows_now(feed, node, offline_gpus=held, now=now) if w.free_gpus >= gpus]
    return max((w.length(now) for w in ws), default=0.0)


def feeds(sc, used: np.ndarray) -> tuple[WindowFeed, WindowFeed]:
    pooled = WindowFeed(sc, FeedSettings(pool_windows=True), sc.demand.copy())
    alone = WindowFeed(sc, FeedSettings(), sc.demand.copy())
    for f in (pooled, alone):
        f.watch_offline(used)
    return pooled, alone


def test_a_nodes_window_ends_when_offline_pods_elsewhere_leave_its_pool_too_little_room() -> None:
    sc = pod_scenario(pulsed_counts(), [], nodes=3)
    now = (RUN + 120) * 60.0  # 02:00: the last pulse is 7 h ago, the next one 4 h ahead
    used = np.zeros(3, dtype=np.int64)
    pooled, alone = feeds(sc, used)
    for f in (pooled, alone):
        f.maybe_refresh(now)
    m = int(now // 60)
    own = int(8 - sc.demand[0, m])  # node 0's GPUs free now
    assert own >= 6
    # 24 GPUs, 4 online now, 16 at a pulse: room for node 0's GPUs until far ahead
    assert window_left(pooled, 0, own, now) > 10 * H
    assert window_left(pooled, 0, own + 1, now) == 0.0  # never more than the node has free
    # 6 offline GPUs on node 1: at the next pulse the pool has 24 - 16 - 6 = 2 GPUs of room
    used[1] = 6
    six = window_left(pooled, 0, 6, now)
    assert 0 < six < 5 * H
    assert window_left(pooled, 0, 2, now) > 10 * H
    # the node's own forecast knows nothing of node 1's pods
    before = windows_now(alone, 0, offline_gpus=0, now=now)
    used[1] = 0
    assert windows_now(alone, 0, offline_gpus=0, now=now) == before
    assert pooled.pool_keys()[0] == 0 and alone.pool_keys()[0] == -1


def test_held_windows_of_a_pooled_node_are_its_room_in_the_pool_its_own_offline_gpus_included() -> None:
    """What the engine's planned stops ask (`_window_end`): a pooled node's held GPUs keep their window while its
    pool has room for them, offline GPUs on the pool's other nodes taken out, its own not."""
    sc = pod_scenario(pulsed_counts(), [], nodes=3)
    now = (RUN + 120) * 60.0  # the next pulse (16 of 24 GPUs online) is 4 h ahead
    used = np.zeros(3, dtype=np.int64)
    pooled, alone = feeds(sc, used)
    for f in (pooled, alone):
        f.maybe_refresh(now)

    def held_left(feed: WindowFeed, gpus: int) -> float:
        room = feed.room(0, now)
        assert room is not None
        ws = [w for w in idle_windows(profile=room) if w.free_gpus >= gpus and w.start <= now]
        return max((w.length(now) for w in ws), default=0.0)

    used[0] = 6  # 6 GPUs held on node 0 itself: the pool's 8 of room at a pulse hold them
    assert held_left(pooled, 6) > 10 * H
    used[1] = 4  # 4 more on node 1: at the next pulse 24 - 16 - 4 = 4 are left for node 0's 6
    assert 0 < held_left(pooled, 6) < 5 * H and held_left(pooled, 4) > 10 * H
    assert alone.room(0, now) is alone._rooms[0]  # a node alone: its own forecast, as before


def test_gang_members_in_one_pool_share_its_room() -> None:
    # 4 pods, 16 at 06:00 and 18:00: a quiet pool's forecast has 24 - 16 = 8 GPUs of room beyond half an hour.
    # A 10-GPU job arrives at 02:00 and needs ~1.7 h: no node takes it alone; two members of 5 each fit the room,
    # both together do not, so it does not start (checked alone, the members would start it at 02:00)
    sc = pod_scenario(pulsed_counts(), [(2 * H, 3 * H, 10)], nodes=3)
    policy = POLICIES["offpeak-p90"]
    run = simulate(sc, [policy], feed=WindowFeed(sc, FeedSettings(pool_windows=True)),
                   settings=EngineSettings(check_invariants=True))[policy.name]
    assert run.t.evictions == 0 and run.placements == []
    # the nodes' own forecasts know nothing of the pool's room: there the job starts at once
    alone = simulate(sc, [policy], feed=WindowFeed(sc, FeedSettings()),
                     settings=EngineSettings(check_invariants=True))[policy.name]
    assert alone.first_start[0] == sc.start_s + 2 * H


def test_a_pooled_nodes_windows_are_judged_by_its_pools_room_for_the_survival_table() -> None:
    """What the survival table closes a pooled node's level-L window by: its GPUs less its pool's room (so level L
    closes when the pool has fewer than L GPUs free of online pods), not its own online pods."""
    counts = pulsed_counts()
    counts[counts == 16] = 20  # pulses of 20 pods: 4 of the pool's 24 GPUs free
    sc = pod_scenario(counts, [], nodes=3)
    now = (RUN + 120) * 60.0
    pooled, alone = feeds(sc, np.zeros(3, dtype=np.int64))
    for f in (pooled, alone):
        f.maybe_refresh(now)
    m = int(now // 60)
    pulse = m + int(np.argmax(sc.demand[:, m:].sum(axis=0)))
    nodes = np.arange(3)
    own = sc.demand[:, pulse].tolist()
    assert sum(own) == 20 and max(own) < 8  # the pulse's pods spread: no node's own GPUs all taken
    assert pooled._judged(nodes, pulse, pulse + 1)[:, 0].tolist() == [4, 4, 4]  # windows of 5+ GPUs close
    assert alone._judged(nodes, pulse, pulse + 1)[:, 0].tolist() == own
    quiet = pooled._judged(nodes, m, m + 1)[:, 0]  # 4 pods: 20 of 24 free, no window of a node's 8 GPUs closes
    assert quiet.tolist() == [0, 0, 0]


def test_the_exact_pool_forecast_sees_a_burst_its_history_never_showed_and_the_rise_forecast_does_not() -> None:
    """`pool_forecast="exact"` (the ceiling a perfect pool forecaster reaches): the pool's true future total ends a
    node's window at the step the pool fills, however unlike its past that is."""
    counts = np.full(3 * 1440 + 1, 4, dtype=np.int64)
    burst = RUN + 1440 + 240  # a first burst, on the run's second day at 04:00: 22 of the pool's 24 GPUs online
    counts[burst : burst + 60] = 22
    sc = pod_scenario(counts, [], nodes=3)
    now = (RUN + 1440 + 120) * 60.0  # 02:00 that day, two hours before it
    used = np.zeros(3, dtype=np.int64)
    exact = WindowFeed(sc, FeedSettings(pool_windows=True, pool_forecast="exact"), sc.demand.copy())
    rise, _ = feeds(sc, used)
    exact.watch_offline(used)
    for f in (exact, rise):
        f.maybe_refresh(now)
    own = int(8 - sc.demand[0, int(now // 60)])
    assert own >= 3
    # the burst leaves the pool 2 GPUs: a window of 3 or more closes at 04:00 (the 5-min step before it starts)
    left = window_left(exact, 0, 3, now)
    assert 2 * H - 300 <= left <= 2 * H
    assert window_left(exact, 0, 2, now) > 10 * H  # 2 GPUs stay free through it
    assert window_left(rise, 0, 3, now) > 10 * H  # a pool that never rose above 4 pods is forecast to stay there


def test_a_pool_lead_sees_a_burst_once_it_is_that_near_and_the_rises_start_from_it_beyond() -> None:
    """`pool_lead_seconds` (online owners announcing their scale-ups): the pool's true total is known that far ahead,
    so a burst its history never showed ends a window once it is within the lead, not before."""
    counts = np.full(3 * 1440 + 1, 4, dtype=np.int64)
    burst = RUN + 1440 + 240  # 22 of the pool's 24 GPUs online from 04:00 on the run's second day, for an hour
    counts[burst : burst + 60] = 22
    sc = pod_scenario(counts, [], nodes=3)
    used = np.zeros(3, dtype=np.int64)
    lead = WindowFeed(sc, FeedSettings(pool_windows=True, pool_lead_seconds=H), sc.demand.copy())
    lead.watch_offline(used)
    early = (RUN + 1440 + 120) * 60.0  # 02:00: the burst is 2 h ahead, past the 1-h lead
    lead.maybe_refresh(early)
    assert window_left(lead, 0, 3, early) > 10 * H
    near = (RUN + 1440 + 210) * 60.0  # 03:30: 30 min ahead
    lead.maybe_refresh(near)
    assert 30 * 60 - 300 <= window_left(lead, 0, 3, near) <= 30 * 60
    assert window_left(lead, 0, 2, near) > 10 * H  # 2 GPUs stay free through it
    p = int(lead.pool_of[0])
    assert lead.pool_free[p, :6].min() >= 20  # 4 pods until 04:00
    assert lead.pool_free[p, 12:].max() <= 2  # past the lead (04:30) the rises start from the burst's 22, not 4


def test_announced_demand_is_a_floor_within_its_lead_and_never_lowers_the_forecast() -> None:
    """`pool_announce_seconds`: the pool's true total within the lead is a floor under the rise forecast, so the
    burst closes windows once it is that near (at a fixed time, which a yield can meet), while a quiet stretch
    announced ahead does not open windows the rises would keep shut, and beyond the lead the rises are as without."""
    counts = np.full(3 * 1440 + 1, 4, dtype=np.int64)
    counts[RUN - 300 : RUN - 240] = 10  # the day before the run: up to 10 pods, so the rises sit above a quiet pool
    burst = RUN + 1440 + 240
    counts[burst : burst + 60] = 22
    sc = pod_scenario(counts, [], nodes=3)
    used = np.zeros(3, dtype=np.int64)
    feeds = {}
    for name, settings in (("plain", FeedSettings(pool_windows=True)),
                           ("announced", FeedSettings(pool_windows=True, pool_announce_seconds=H))):
        feeds[name] = WindowFeed(sc, settings, sc.demand.copy())
        feeds[name].watch_offline(used)
    early = (RUN + 1440 + 120) * 60.0  # the burst is 2 h ahead, past the 1-h lead: as without announcements
    near = (RUN + 1440 + 210) * 60.0  # 30 min ahead
    for feed in feeds.values():
        feed.maybe_refresh(early)
    p = int(feeds["plain"].pool_of[0])
    assert np.array_equal(feeds["announced"].pool_free[p], feeds["plain"].pool_free[p])
    for feed in feeds.values():
        feed.maybe_refresh(near)
    plain, announced = feeds["plain"].pool_free[p], feeds["announced"].pool_free[p]
    assert (announced <= plain).all()  # a floor: never more room than the rises give
    assert announced[6:12].max() <= 2 < plain[6:12].min()  # 04:00-04:30: the burst, announced
    assert np.array_equal(announced[12:], plain[12:])  # past the lead, as without
    left = window_left(feeds["announced"], 0, 3, near)
    assert 30 * 60 - 300 <= left <= 30 * 60 < window_left(feeds["plain"], 0, 3, near)
    # the announced end is known to hold (the goodput rule judges it so) and is not noted in the survival table
    ending = [w for w in windows_now(feeds["announced"], 0, offline_gpus=0, now=near)
              if w.free_gpus >= 3 and w.length(near) == left]
    assert ending and all(w.end_certain for w in ending)
    assert not any(w.end_certain for w in windows_now(feeds["plain"], 0, offline_gpus=0, now=near))
    noted = {name: {int(lv) for n, lv, st in zip(*f._open[:3]) if n == 0 and st == near} for name, f in feeds.items()}
    assert 3 in noted["plain"] and 3 not in noted["announced"]


def announced_pool_free(sc, now: float, **settings) -> tuple[np.ndarray, int]:
    """With no offline pods and a fresh pool feed (`pool_look_back_seconds` 30 min, announcements 1 h ahead, and
    `settings`) refreshed at `now`: node 0's pool's free GPUs per forecast step, and the pool's GPUs."""
    feed = WindowFeed(sc, FeedSettings(pool_windows=True, pool_look_back_seconds=1800.0, pool_announce_seconds=H,
                                       **settings), sc.demand.copy())
    feed.watch_offline(np.zeros(sc.fleet.size, dtype=np.int64))
    feed.maybe_refresh(now)
    p = int(feed.pool_of[0])
    return feed.pool_free[p], int(feed.pool_cap[p])


def test_an_announced_ceiling_makes_the_forecast_the_announced_total_within_the_lead_and_no_further() -> None:
    """`pool_announce_ceiling`: the announcements also say the most the pool holds, so within the lead its forecast
    is the true total: the room the rises take (the pool went from 4 to 10 pods for 10 minutes every two hours)
    opens up, the burst still closes the pool, and beyond the lead all is as without."""
    counts = np.full(3 * 1440 + 1, 4, dtype=np.int64)
    minute = np.arange(counts.size)
    counts[(minute % 120 < 10) & (minute < RUN + 1440 + 120)] = 10  # quiet for the last 90 min before 03:30
    burst = RUN + 1440 + 240
    counts[burst : burst + 30] = 22
    sc = pod_scenario(counts, [], nodes=3)
    now = (RUN + 1440 + 210) * 60.0  # 03:30, 30 min before the burst
    floor, cap = announced_pool_free(sc, now)
    ceiling, _ = announced_pool_free(sc, now, pool_announce_ceiling=True)
    assert (ceiling >= floor).all() and floor[:6].min() < cap - 4  # the rises take room before the burst...
    assert ceiling[:6].tolist() == [cap - 4] * 6  # ...which the ceiling gives back: what the 4 pods leave
    assert ceiling[6:12].max() <= 2  # 04:00-04:30: the burst still closes the pool
    assert np.array_equal(ceiling[12:], floor[12:])  # past the 1-h lead, as without


def test_a_ceiling_stated_per_hour_caps_every_step_of_the_hour_at_its_busiest_minute() -> None:
    """`pool_ceiling_block_seconds`: the ceiling is stated once per clock-aligned hour, so within the lead it gives
    back room the rises take, but less than a ceiling per step (the hour's busiest minute caps all of it); the floor
    stays per step, so the burst still closes the pool when it comes, and only then."""
    counts = np.full(3 * 1440 + 1, 4, dtype=np.int64)
    minute = np.arange(counts.size)
    counts[(minute % 120 < 10) & (minute < RUN + 1440 + 120)] = 10  # quiet for the last 90 min before 03:30
    burst = RUN + 1440 + 240  # 04:00 on the hour: 22 pods for 10 minutes of the hour 04:00-05:00
    counts[burst : burst + 10] = 22
    counts[RUN + 1440 + 215 : RUN + 1440 + 220] = 6  # 03:35-03:40: 6 pods, the hour 03:00-04:00's most
    sc = pod_scenario(counts, [], nodes=3)
    now = (RUN + 1440 + 210) * 60.0  # 03:30, 30 min before the burst
    floor, cap = announced_pool_free(sc, now)
    exact, _ = announced_pool_free(sc, now, pool_announce_ceiling=True)
    hourly, _ = announced_pool_free(sc, now, pool_announce_ceiling=True, pool_ceiling_block_seconds=H)
    assert exact[:6].tolist() == [cap - 4, cap - 6, cap - 4, cap - 4, cap - 4, cap - 4]  # the true total per step
    assert floor[:6].min() < cap - 6  # the rises take more room than the hour's most...
    assert hourly[:6].min() == cap - 6 and (hourly[:6] >= cap - 6).all()  # ...which the hourly ceiling gives back...
    assert hourly[:6].sum() < exact[:6].sum()  # ...but less than a ceiling per step would
    assert exact[6:8].max() <= 2 and exact[8:12].min() == cap - 4  # the burst, then the pool quiet again
    assert hourly[6:8].max() <= 2  # the floor, per step, closes the pool for the burst...
    assert np.array_equal(hourly[8:12], floor[8:12]) and floor[8:12].max() < cap - 4  # ...and after it the hour's
    assert (hourly >= floor).all()  # ceiling, 22, does not bind: the rises stand, as with a floor alone
    assert np.array_equal(hourly[12:], exact[12:]) and np.array_equal(hourly[12:], floor[12:])  # past the lead


def test_a_floor_stated_per_hour_holds_the_hours_peak_for_all_of_it() -> None:
    """`pool_floor_block_seconds`: a replica plan per clock hour (floor and ceiling both the hour's busiest minute)
    holds each hour at its peak: 03:30-04:00 at the 6 pods of 03:35, and the whole hour 04:00-05:00 closed by the
    10-minute burst at its start, where a floor per step reopens the pool at 04:10."""
    counts = np.full(3 * 1440 + 1, 4, dtype=np.int64)
    burst = RUN + 1440 + 240
    counts[burst : burst + 10] = 22
    counts[RUN + 1440 + 215 : RUN + 1440 + 220] = 6
    sc = pod_scenario(counts, [], nodes=3)
    now = (RUN + 1440 + 210) * 60.0
    per_step, cap = announced_pool_free(sc, now, pool_announce_ceiling=True, pool_ceiling_block_seconds=H)
    planned, _ = announced_pool_free(sc, now, pool_announce_ceiling=True, pool_ceiling_block_seconds=H,
                                     pool_floor_block_seconds=H)
    assert planned[:6].tolist() == [cap - 6] * 6  # the hour 03:00-04:00 held at its peak
    assert planned[6:12].max() <= 2  # the hour of the burst, all of it
    assert per_step[6:8].max() <= 2 and per_step[8:12].min() > 2  # per step: the burst's 10 minutes only
    assert np.array_equal(planned[12:], per_step[12:])  # past the lead, as without


def test_an_announcement_entering_the_lead_between_refreshes_is_seen_the_next_minute() -> None:
    """The extender's informer sees an OnlineDemand the moment it is made; the feed's announced lead moves on every
    minute, not only at a refresh or when the pool's demand changes."""
    counts = np.full(3 * 1440 + 1, 4, dtype=np.int64)
    burst = RUN + 1440 + 240
    counts[burst : burst + 60] = 22
    sc = pod_scenario(counts, [], nodes=3)
    feed = WindowFeed(sc, FeedSettings(pool_windows=True, pool_announce_seconds=H, refresh_seconds=3600.0),
                      sc.demand.copy())
    feed.watch_offline(np.zeros(3, dtype=np.int64))
    feed.maybe_refresh((burst - 70) * 60.0)  # 70 min ahead: beyond the lead
    assert window_left(feed, 0, 3, (burst - 70) * 60.0) > 70 * 60
    later = (burst - 55) * 60.0  # no refresh due, the pool's demand unchanged
    assert not feed.maybe_refresh(later)
    assert window_left(feed, 0, 3, later) <= 55 * 60
    assert any(w.end_certain for w in windows_now(feed, 0, offline_gpus=0, now=later))


def pool_refusal(tmp_path, pools: str) -> str:
    """Why a scenario file with these `pools` settings on Helios (pod-placed online demand) is refused."""
    from offpeak.errors import UserError
    from offpeak_sim.scenariofile import load

    path = tmp_path / "pools.yaml"
    path.write_text(f"online_trace: helios-earth-vc-2020-05\npools: {pools}\n")
    with pytest.raises(UserError) as e:
        load([path])
    return str(e.value)


@pytest.mark.parametrize("pools", ["{windows: true, lead_minutes: -1}",
                                   "{windows: true, lead_minutes: 10, forecast: exact}"])
def test_a_pool_lead_is_refused_when_negative_or_with_the_exact_forecast(tmp_path, pools: str) -> None:
    assert "pools.lead_minutes" in pool_refusal(tmp_path, pools)


@pytest.mark.parametrize("pools", ["{windows: true, announce: {minutes: -1}}",
                                   "{windows: true, forecast: exact, announce: {minutes: 10}}",
                                   "{windows: true, lead_minutes: 10, announce: {minutes: 10}}"])
def test_announced_demand_is_refused_when_negative_with_the_exact_forecast_or_with_a_lead(tmp_path,
                                                                                          pools: str) -> None:
    assert "pools.announce.minutes" in pool_refusal(tmp_path, pools)
    assert "pools.announce.ceiling needs pools.announce.minutes > 0" in pool_refusal(
        tmp_path, "{windows: true, announce: {ceiling: true}}")
    for block in ("-60", "1.5"):  # negative, not whole minutes
        assert "pools.announce.floor_block_minutes" in pool_refusal(
            tmp_path, f"{{windows: true, announce: {{minutes: 10, floor_block_minutes: {block}}}}}")
    assert "pools.announce.floor_block_minutes needs pools.announce.minutes > 0" in pool_refusal(
        tmp_path, "{windows: true, announce: {floor_block_minutes: 60}}")  # without announcements
    for block, ceiling in (("-60", "true"), ("1.5", "true"), ("60", "false")):  # negative, not whole, no ceiling
        assert "pools.announce.ceiling_block_minutes" in pool_refusal(
            tmp_path, f"{{windows: true, announce: {{minutes: 10, ceiling: {ceiling}, "
                      f"ceiling_block_minutes: {block}}}}}")


def test_the_exact_pool_forecast_is_refused_with_an_unknown_name(tmp_path) -> None:
    assert "pools.forecast: invalid enum value 'perfect'; one of rise, exact" in pool_refusal(
        tmp_path, "{windows: true, forecast: perfect}")


def test_a_gang_stops_where_any_members_window_ends_though_another_members_is_open_ended() -> None:
    """The evictor judges each pod by its own node's window and a member stopped stops its gang, so the simulated
    planned stop takes the earliest end any member's window has; one member in an open-ended window (or on a stale
    node) must not hide it. Before, such gangs across VCs were never told to stop, and Helios's lost GPU-hours with
    announced ceilings were all theirs."""
    from types import SimpleNamespace

    from offpeak_sim.attempts import Run
    from offpeak_sim.engine import PolicyRun

    ends = {0: None, 1: 5_000.0, 2: 4_000.0, 3: None}
    engine = SimpleNamespace(_window_end=lambda r, n, now: ends[n])
    gang = Run(job=7, node=0, start=0.0, gpus=16, slowdown=1.0, end=9e9, members=((0, 8), (1, 4), (2, 4)))
    assert PolicyRun._run_window_end(engine, gang, 1_000.0) == 4_000.0
    lone = Run(job=8, node=3, start=0.0, gpus=8, slowdown=1.0, end=9e9, members=((3, 8),))
    assert PolicyRun._run_window_end(engine, lone, 1_000.0) is None  # nothing ends: it runs on
