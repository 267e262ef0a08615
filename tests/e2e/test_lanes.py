"""The shared e2e cluster's lanes, the kubectl-style reads the scenarios poll with, port bands of parallel test
processes, and the per-test cost accounting: pure parts of the e2e harness, tested without a cluster."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from offpeak_e2e import lanes, procs, testclock
from offpeak_e2e.kube import GetArgs, KubeError, Resource
from offpeak_e2e.nodes import node_manifest


def test_every_lane_has_nodes_of_its_own() -> None:
    names = [n for lane in lanes.SHARED_LANES for n in lane.nodes]
    assert len(names) == len(set(names))
    assert len({lane.name for lane in lanes.SHARED_LANES}) == len(lanes.SHARED_LANES)
    assert lanes.POOLS.nodes == ["pools-a100-sxm4-40gb-0", "pools-a100-sxm4-40gb-1"]


def test_a_lanes_nodes_carry_its_label_and_pods_are_confined_to_them() -> None:
    (spec, *_) = lanes.SURGE.specs()
    assert node_manifest(spec)["metadata"]["labels"][lanes.LANE_LABEL] == "surge"
    job = lanes.confined({"spec": {"nodeSelector": {"team": "a"}}}, lanes.SURGE)
    assert job["spec"]["nodeSelector"] == {"team": "a", lanes.LANE_LABEL: "surge"}
    assert lanes.SURGE.nodes_of_type(lanes.V100) == ["surge-v100-sxm2-16gb-0", "surge-v100-sxm2-16gb-1"]
    assert lanes.SURGE.node_of_type(lanes.V100) == "surge-v100-sxm2-16gb-0"
    with pytest.raises(KeyError):
        lanes.SURGE.node_of_type(lanes.A100)


def test_a_planned_lane_is_idle_only_in_its_stretch_and_a_manual_one_never_busy() -> None:
    lane = lanes.Lane("y", (lanes.A100, lanes.H100), idle=((0, 120), (110, 235)))
    plan = lane.plan(day=240)
    first, second = lane.nodes
    assert plan[first][0] == 0 and plan[first][119] == 0 and plan[first][120] == lanes.ONLINE_GPUS
    assert plan[second][109] == lanes.ONLINE_GPUS and plan[second][110] == 0 and plan[second][235] == 8
    assert all(series == [0] for series in lanes.SURGE.plan().values())


def test_an_offset_shifts_the_lanes_day_and_its_phase_alike() -> None:
    lane = lanes.Lane("x", (lanes.A100,), idle=((0, 10),), offset=50)
    (series,) = lane.plan(day=240).values()
    assert series[49] == lanes.ONLINE_GPUS and series[50] == 0 and series[59] == 0 and series[60] == 8
    assert lane.phase(reference=1000.0, now=1000.0 + 55, day=240) == 5.0


def test_the_shared_settings_hold_every_lane_and_leave_own_operator_namespaces_alone() -> None:
    s = lanes.shared_settings("t")
    assert len(s.control_plane.node_specs) == sum(len(lane.gpu_types) for lane in lanes.SHARED_LANES)
    assert s.online_plan is not None and set(s.online_plan) == {n.name for n in s.control_plane.node_specs}
    assert s.operator_namespaces == (f"!{lanes.OWN_OPERATOR_PREFIX}*",)
    assert set(s.addons) == {"kueue", "training-operator"}


@pytest.mark.parametrize(("args", "expected"), [
    (("pods", "-n", "a", "-l", "x=y"), GetArgs(resource="pods", namespace="a", selector="x=y")),
    (("-n", "a", "pod", "holder"), GetArgs(resource="pod", name="holder", namespace="a")),
    (("events", "--field-selector", "involvedObject.name=p", "-n", "b"),
     GetArgs(resource="events", namespace="b", field_selector="involvedObject.name=p")),
    (("trainingjobs.offpeak.io", "-A"), GetArgs(resource="trainingjobs.offpeak.io", all_namespaces=True)),
    (("job/nightly", "--namespace=c"), GetArgs(resource="job", name="nightly", namespace="c")),
])
def test_kubectl_get_arguments_parse_as_kubectl_reads_them(args: tuple[str, ...], expected: GetArgs) -> None:
    assert GetArgs.parse(args) == expected


def test_unsupported_get_arguments_are_refused_by_name() -> None:
    with pytest.raises(KubeError, match="-o"):
        GetArgs.parse(("pods", "-o", "wide"))
    with pytest.raises(KubeError, match="RESOURCE"):
        GetArgs.parse(("pods", "a", "b"))


def test_resource_paths() -> None:
    pods = Resource(group="", version="v1", plural="pods", namespaced=True)
    assert pods.path(namespace="a", name="p") == "/api/v1/namespaces/a/pods/p"
    assert pods.path(namespace=None) == "/api/v1/pods"
    tjs = Resource(group="offpeak.io", version="v1alpha1", plural="trainingjobs", namespaced=True)
    assert tjs.path(namespace="a") == "/apis/offpeak.io/v1alpha1/namespaces/a/trainingjobs"
    nodes = Resource(group="", version="v1", plural="nodes", namespaced=False)
    assert nodes.path(namespace="a", name="n") == "/api/v1/nodes/n"


def test_parallel_test_processes_draw_ports_from_disjoint_bands(monkeypatch: pytest.MonkeyPatch) -> None:
    bands = [procs.port_band(i, ephemeral=(32768, 60999)) for i in range(4)]
    spans = [tuple(int(x) for x in b.split(":")) for b in bands]
    assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:]))
    monkeypatch.setenv(procs.PORT_BAND_ENV, bands[2])
    low, high = spans[2]
    assert all(low <= procs.free_port() < high for _ in range(20))


def test_a_tests_cpu_counts_its_children_but_not_a_shared_clusters(tmp_path: Path) -> None:
    burn = [sys.executable, "-c", "import time\nt=time.process_time()\nwhile time.process_time()-t<0.5: pass"]
    shared = subprocess.Popen([*burn[:2], burn[2] + "\nimport time; time.sleep(30)"])
    (tmp_path / "pids").mkdir()
    (tmp_path / "pids" / "svc.json").write_text(f'{{"pid": {shared.pid}}}')
    try:
        clock = testclock.Clock()
        clock.exclude_cluster(tmp_path)
        clock.start()
        subprocess.run(burn, check=True)
        while testclock.tree_cpu_seconds(shared.pid) < 0.45:
            pass  # the "cluster" process burns its CPU while the test runs
        clock.stop("t", "passed")
    finally:
        shared.kill()
        shared.wait()
    (cost,) = clock.costs
    assert 0.4 <= cost.cpu_s < 0.9, cost  # the child's 0.5 s, not the shared process's as well
    assert testclock.load(testclock.dump(clock.costs)) == clock.costs
    assert "total of 1 tests" in testclock.table(clock.costs)[-1]


def test_machine_cpu_reads_proc_stat(tmp_path: Path) -> None:
    stat = tmp_path / "stat"
    ticks = os.sysconf("SC_CLK_TCK")
    stat.write_text(f"cpu  {ticks} 0 {ticks} 999999 5 0 0 0 0 0\ncpu0 1 0 0 0 0 0 0 0 0 0\n")
    assert testclock.machine_cpu_seconds(stat) == 2.0


def test_every_lane_file_has_its_place_in_the_order() -> None:
    files = sorted(p.stem for p in (Path(__file__).resolve().parents[2] / "e2e" / "tests").glob("test_*.py"))
    assert sorted(lanes.FILE_ORDER) == files  # a new lane file is placed by its measured time, not left last
