"""The `offpeak` command as users type it: the help of every subcommand, the failures they meet (no kubeconfig,
an unreachable API server, bad arguments and environment variables, missing files, unreachable services) and
`-o json|yaml` round trips. Each failure is one line on stderr that says what to do, with its documented exit
code (docs/cli.md), and never a traceback. All in this process through `main(argv)` (torch is never imported),
with `jobs` and `explain` against a fake API server on loopback, plus two runs of the real entry point.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from offpeak.cli import build_parser, main
from support.fakekube import fake_cluster

REPO = Path(__file__).resolve().parents[2]
GPT2 = REPO / "tests" / "predictor" / "data" / "gpt2_large_lm_b1_train.json.gz"  # train, seq_len 1024
CREATED = "2026-11-21T05:00:00Z"
SAID = "0/4 nodes are available: 1 gang of 2 worker(s) x 8 GPU(s) needs 2 place(s) in fitting windows; 1 found."


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of `offpeak ARGV`; no traceback, whatever happened."""
    try:
        code = main(list(argv))
    except SystemExit as e:  # argparse's --help, --version and usage errors
        code = int(e.code or 0)
    out, err = capsys.readouterr()
    assert "Traceback" not in err, err
    return code, out, err


def failed(capsys: pytest.CaptureFixture[str], code: int, *argv: str) -> str:
    """Run a command that must fail with `code`; its stderr is one line, `offpeak [COMMAND]: error: ...`. The line."""
    got, out, err = run(capsys, *argv)
    lines = err.strip().splitlines()
    assert (got, len(lines)) == (code, 1), (got, err)
    assert lines[0].startswith("offpeak") and ": error: " in lines[0], lines[0]
    return lines[0]


@pytest.fixture(autouse=True)
def no_cluster(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No kubeconfig, not in a pod, a wide terminal for tables, no OFFPEAK_* leaking in from the caller."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("COLUMNS", "250")
    for name in [n for n in os.environ if n.startswith("OFFPEAK_") and n != "OFFPEAK_SHARED_DATA"]:
        monkeypatch.delenv(name)
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)


def _commands(parser: argparse.ArgumentParser, prefix: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    for action in parser._actions:  # noqa: SLF001 - argparse keeps its subcommands only there
        if isinstance(action, argparse._SubParsersAction):  # noqa: SLF001
            for name, sub in action.choices.items():
                yield (*prefix, name)
                yield from _commands(sub, (*prefix, name))


COMMANDS = [(), *_commands(build_parser())]


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c) or "offpeak")
def test_every_command_has_help(capsys: pytest.CaptureFixture[str], command: tuple[str, ...]) -> None:
    code, out, err = run(capsys, *command, "--help")
    assert (code, err) == (0, "") and out.startswith(f"usage: {' '.join(('offpeak', *command))}"), out[:200]


def test_the_help_lists_the_subcommands_users_look_for() -> None:
    names = {c[0] for c in COMMANDS if c}
    assert {"jobs", "explain", "predict", "simulate", "extract", "operator", "extender", "cluster"} <= names
    assert ("cluster", "build") in COMMANDS and len(COMMANDS) >= 25


# ------------------------------------------------------------------------------ environment and arguments


def test_a_bad_environment_variable_fails_only_the_commands_that_read_it(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    monkeypatch.setenv("OFFPEAK_EXTENDER_PORT", "abc")
    monkeypatch.setenv("OFFPEAK_MARGIN", "x")
    assert run(capsys, "predict", "--help")[0] == 0
    code, out, _ = run(capsys, "--version")
    assert code == 0 and out.startswith("offpeak ")
    line = failed(capsys, 2, "extender")
    assert "$OFFPEAK_EXTENDER_PORT='abc'" in line and "fix or unset OFFPEAK_EXTENDER_PORT" in line
    monkeypatch.setenv("OFFPEAK_BATCH_JOBS", "maybe")
    assert "$OFFPEAK_BATCH_JOBS='maybe'" in failed(capsys, 2, "operator", "-A")
    monkeypatch.setenv("OFFPEAK_AGENT_INTERVAL", "soon")
    assert "$OFFPEAK_AGENT_INTERVAL='soon' (the default of --interval) is not a number" in failed(capsys, 2, "agent")


def test_bad_arguments_are_one_line_that_points_at_the_help(capsys: pytest.CaptureFixture[str]) -> None:
    line = failed(capsys, 2, "jobs", "-o", "table")
    assert line.startswith("offpeak jobs: error: ") and "invalid choice: 'table'" in line
    assert line.endswith("(see `offpeak jobs --help`)")
    assert "invalid choice: 'nosuch'" in failed(capsys, 2, "nosuch")
    assert "invalid int value: 'many'" in failed(capsys, 2, "simulate", "--nodes", "many", "--report", "r.json")
    assert "one of the arguments --graph" in failed(capsys, 2, "predict", "--gpu", "T4")
    assert "-A/--all-namespaces: not allowed with argument -n" in failed(capsys, 2, "jobs", "-n", "a", "-A")
    assert "say NAME (a TrainingJob), job/NAME or pytorchjob/NAME" in failed(capsys, 2, "explain", "deploy/x")
    assert "use helm,kwok,etcd,kubernetes,kueue,training-operator" in failed(
        capsys, 2, "cluster", "build", "--only", "nope")


def test_missing_files_say_which(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert "graph file not found" in failed(capsys, 2, "predict", "--graph", str(tmp_path / "g.json"), "--gpu", "T4")
    assert "predictor model file not found" in failed(capsys, 2, "predict", "--graph", str(GPT2), "--gpu", "T4",
                                                      "--model", str(tmp_path / "m.lgbm"))
    assert "online trace folder not found" in failed(capsys, 2, "simulate", "--online-trace", str(tmp_path / "t"),
                                                     "--report", str(tmp_path / "r.json"))
    assert "--token-file" in failed(capsys, 2, "predictor", "refit", "--url", "http://127.0.0.1:9",
                                    "--token-file", str(tmp_path / "token"))


def test_an_unreachable_predictor_is_exit_4(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    (tmp_path / "token").write_text("s3cret")
    line = failed(capsys, 4, "predictor", "rollback", "--url", f"http://127.0.0.1:{_closed_port()}",
                  "--token-file", str(tmp_path / "token"), "--timeout", "5")
    assert "unreachable" in line and "is --url right, and the predictor up?" in line


def test_predict_says_what_it_assumed(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "predict", "--graph", str(GPT2), "--gpu", "A100", "--optimizer", "adam",
                         "--steps", "100")
    assert (code, err) == (0, "")  # no progress drawn when stderr is not a terminal
    assert out.startswith("gpt2_large_lm bs=1 seq_len=1024 on A100 = A100-SXM4-40GB (train, fp32, adam optimizer): ")
    assert "job of 100 steps" in out and "with 60 s start-up" in out
    code, out, _ = run(capsys, "predict", "--graph", str(GPT2), "--gpu", "H100-SXM5-80GB", "--json")
    answer = json.loads(out)
    assert (answer["gpu"], answer["optimizer"], answer["seq_len"]) == ("H100-SXM5-80GB", "none", 1024)


def test_debug_adds_the_traceback_to_the_line(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["jobs", "--debug"])
    err = capsys.readouterr().err
    assert code == 3 and "Traceback" in err and "ConfigError" in err
    assert err.strip().splitlines()[-1].startswith("offpeak jobs: error: no Kubernetes configuration")


# ----------------------------------------------------------------------------------------- jobs and explain


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])  # closed again when the block ends: connections are refused


def test_no_or_a_bad_kubeconfig_is_exit_3(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    line = failed(capsys, 3, "jobs")
    assert "~/.kube/config does not exist and this is not a pod; pass --kubeconfig FILE or set KUBECONFIG" in line
    assert "does not exist (pass --kubeconfig FILE)" in failed(capsys, 3, "explain", "vit", "--kubeconfig",
                                                               str(tmp_path / "none"))
    (tmp_path / "notes.txt").write_text("just some text\n")
    assert "is not a kubeconfig file" in failed(capsys, 3, "jobs", "--kubeconfig", str(tmp_path / "notes.txt"))
    with fake_cluster({}, tmp_path / "kc") as kc:
        assert "no context 'prod' in" in failed(capsys, 3, "explain", "vit", "--kubeconfig", str(kc),
                                                "--context", "prod")


def test_an_unreachable_api_server_is_exit_4(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    from support.fakekube import kubeconfig

    port = _closed_port()
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig(tmp_path / "kc", port=port)))  # as kubectl users set it
    for command in (["jobs"], ["explain", "vit"]):
        line = failed(capsys, 4, *command)
        assert f"cannot reach the Kubernetes API server at http://127.0.0.1:{port} (connection refused)" in line
        assert "--context" in line


def test_refused_credentials_and_a_cluster_without_offpeak_are_exit_3(capsys: pytest.CaptureFixture[str],
                                                                      tmp_path: Path) -> None:  # fmt: skip
    with fake_cluster({"offpeak.io/v1alpha1/trainingjobs": []}, tmp_path / "kc",
                      refuse=["offpeak.io/v1alpha1/trainingjobs"]) as kc:
        line = failed(capsys, 3, "jobs", "--kubeconfig", str(kc))
        assert "refused: 403 Forbidden" in line and "is forbidden" in line
    with fake_cluster({}, tmp_path / "kc") as kc:
        assert "knows no TrainingJobs: install offpeak's chart" in failed(capsys, 3, "jobs", "--kubeconfig", str(kc))
    with fake_cluster({"offpeak.io/v1alpha1/trainingjobs": [], "batch/v1/jobs": []}, tmp_path / "kc",
                      refuse=["batch/v1/jobs"]) as kc:
        assert run(capsys, "jobs", "--kubeconfig", str(kc))[0] == 0  # the Jobs it may not list are left out ...
        assert "refused: 403" in failed(capsys, 3, "explain", "job/nightly", "--kubeconfig", str(kc))  # ... not here


def _trainingjob(name: str, namespace: str = "team") -> dict:
    return {"apiVersion": "offpeak.io/v1alpha1", "kind": "TrainingJob",
            "metadata": {"name": name, "namespace": namespace, "creationTimestamp": CREATED},
            "spec": {"workers": 2, "gpusPerWorker": 8, "gpuTypes": ["H100"]},
            "status": {"phase": "Waiting", "reason": "Unschedulable", "message": f"attempt 1/3: waiting: {SAID}",
                       "attempts": 1, "totalSteps": 1000, "predictedSeconds": 3600.0, "prediction": {
                           "source": "predictor", "steps": 1000,
                           "gpus": [{"gpuType": "H100-SXM5-80GB", "jobSeconds": 3600.0, "jobSecondsP90": 4000.0}]}}}


def _batch_job() -> dict:
    return {"metadata": {"name": "nightly", "namespace": "team", "creationTimestamp": CREATED,
                         "labels": {"kueue.x-k8s.io/queue-name": "team-q"}, "annotations": {
                             "offpeak.io/state": "Predicted: predicted 600s",
                             "offpeak.io/prediction": '{"H100-SXM5-80GB":{"p50":600,"p90":900},"source":"predictor"}'}},
            "spec": {"suspend": True, "template": {
                "metadata": {"labels": {"offpeak.io/offline": "true"}, "annotations": {"offpeak.io/gpu-types": "H100"}},
                "spec": {"containers": [{"name": "train", "resources": {"limits": {"nvidia.com/gpu": "4"}}}]}}},
            "status": {}}


def _pod(name: str, labels: dict) -> dict:
    return {"metadata": {"name": name, "namespace": "team", "labels": labels}, "spec": {}, "status": {
        "phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False", "message": SAID}]}}


OBJECTS = {
    "offpeak.io/v1alpha1/trainingjobs": [_trainingjob("vit"), _trainingjob("bert", "research")],
    "batch/v1/jobs": [_batch_job(), {"metadata": {"name": "plain", "namespace": "team"}, "spec": {}}],  # no opt-in
    "kueue.x-k8s.io/v1beta1/workloads": [{"metadata": {
        "name": "job-nightly", "namespace": "team", "ownerReferences": [{"kind": "Job", "name": "nightly"}]},
        "status": {"admissionChecks": [{"name": "offpeak-window", "state": "Pending", "message": "no window fits"}]}}],
    "v1/pods": [_pod("vit-a1-w0", {"offpeak.io/trainingjob": "vit", "offpeak.io/role": "training",
                                   "offpeak.io/attempt": "1"}),
                _pod("nightly-x", {"batch.kubernetes.io/job-name": "nightly"})],
}  # no PyTorchJobs: a cluster without training-operator


@pytest.fixture
def kc(tmp_path: Path) -> Iterator[str]:
    with fake_cluster(OBJECTS, tmp_path / "kc") as path:
        yield str(path)


def test_jobs_lists_the_contexts_namespace_as_a_table_wide_or_data(capsys: pytest.CaptureFixture[str],
                                                                   kc: str) -> None:  # fmt: skip
    code, table, _ = run(capsys, "jobs", "--kubeconfig", kc)
    header, *rows = table.splitlines()
    assert code == 0 and header.split()[:3] == ["NAME", "PHASE", "REASON"] and "WHY" not in header
    assert [r.split()[0] for r in rows[:2]] == ["job/nightly", "vit"]  # team only; the Job without opt-in left out
    assert "job/nightly waits: Kueue check offpeak-window Pending: no window fits" in table
    code, wide, _ = run(capsys, "jobs", "--kubeconfig", kc, "-o", "wide")
    assert wide.splitlines()[0].split()[-1] == "WHY" and " waits: " not in wide
    code, listed, _ = run(capsys, "jobs", "--kubeconfig", kc, "-A")
    assert listed.splitlines()[0].split()[0] == "NAMESPACE" and "research" in listed and "bert" in listed
    assert "no offline work" in run(capsys, "jobs", "--kubeconfig", kc, "-n", "empty")[1]


def test_jobs_json_and_yaml_round_trip_with_stable_keys(capsys: pytest.CaptureFixture[str], kc: str) -> None:
    code, out, _ = run(capsys, "jobs", "--kubeconfig", kc, "-o", "json")
    data = json.loads(out)
    assert code == 0 and [i["name"] for i in data["items"]] == ["job/nightly", "vit"]
    keys = ["kind", "namespace", "name", "phase", "reason", "gpus", "predictedSeconds", "predictedP90Seconds",
            "actualSeconds", "error", "needsWindowSeconds", "created", "why"]
    assert all(list(item) == keys for item in data["items"])
    assert data["items"][1]["predictedSeconds"] == 3600.0 and data["items"][0]["kind"] == "Job"
    assert yaml.safe_load(run(capsys, "jobs", "--kubeconfig", kc, "-o", "yaml")[1]) == data
    assert json.loads(run(capsys, "jobs", "--kubeconfig", kc, "-n", "empty", "-o", "json")[1]) == {"items": []}


def test_explain_takes_every_kind_jobs_lists(capsys: pytest.CaptureFixture[str], kc: str) -> None:
    code, text, _ = run(capsys, "explain", "vit", "--kubeconfig", kc)
    assert code == 0 and text.startswith("TrainingJob team/vit: Waiting (Unschedulable)")
    assert "Pod vit-a1-w0: Pending\n  0/4 nodes are available\n  1 gang of 2 worker(s)" in text
    code, text, _ = run(capsys, "explain", "job/nightly", "--kubeconfig", kc)
    assert code == 0 and text.startswith("Job team/nightly: Queued (Kueue team-q)")
    assert "Kueue check offpeak-window Pending: no window fits" in text and "Pod nightly-x: Pending" in text
    data = json.loads(run(capsys, "explain", "job/nightly", "--kubeconfig", kc, "-o", "json")[1])
    assert (data["kind"], data["name"], data["pods"][0]["name"]) == ("Job", "nightly", "nightly-x")
    assert yaml.safe_load(run(capsys, "explain", "job/nightly", "--kubeconfig", kc, "-o", "yaml")[1]) == data
    code, text, _ = run(capsys, "explain", "bert", "-A", "--kubeconfig", kc)  # found in the namespace it is in
    assert code == 0 and text.startswith("TrainingJob research/bert: ")


def test_explain_says_what_to_type_when_nothing_is_there(capsys: pytest.CaptureFixture[str], kc: str) -> None:
    line = failed(capsys, 2, "explain", "ghost", "--kubeconfig", kc)
    assert "TrainingJob ghost not found in namespace team" in line and "job/NAME or pytorchjob/NAME" in line
    assert "PyTorchJob ddp not found" in failed(capsys, 2, "explain", "pytorchjob/ddp", "--kubeconfig", kc)
    assert "Job vit not found" in failed(capsys, 2, "explain", "job/vit", "--kubeconfig", kc)


# ----------------------------------------------------------------------------------- the real entry point


def test_the_installed_command_prints_one_line_too(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OFFPEAK_", "KUBE"))}
    env.update(HOME=str(tmp_path), OFFPEAK_MARGIN="x")  # a bad variable `jobs` does not read
    jobs = subprocess.run([sys.executable, "-m", "offpeak", "jobs"], env=env, capture_output=True, text=True,
                          timeout=120)  # fmt: skip
    assert jobs.returncode == 3 and jobs.stdout == "" and len(jobs.stderr.splitlines()) == 1, jobs.stderr
    assert jobs.stderr.startswith("offpeak jobs: error: no Kubernetes configuration"), jobs.stderr


def test_a_bad_gpu_catalogue_fails_the_commands_that_read_gpu_types_only(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:  # fmt: skip
    monkeypatch.setenv("OFFPEAK_GPU_CATALOGUE", str(tmp_path / "gpus.yaml"))
    assert "($OFFPEAK_GPU_CATALOGUE)" in failed(capsys, 2, "predict", "--graph", str(GPT2), "--gpu", "T4")
    assert "no Kubernetes configuration" in failed(capsys, 3, "jobs")  # not the catalogue's error
