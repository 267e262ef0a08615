"""The shared pieces under every command: which failures are expected (and their exit codes), how an
environment default is read and converted, and progress that only a terminal sees."""

from __future__ import annotations

import argparse
import errno
import io

import pytest
from rich.console import Console

from offpeak.cliargs import Parser, env
from offpeak.errors import ConfigError, ExitCode, Unreachable, UserError, failure, network_reason
from offpeak.terminal import steps


def test_expected_failures_get_their_code_and_bugs_none() -> None:
    assert failure(UserError("bad")) == (ExitCode.USAGE, "bad")
    assert failure(ConfigError("no kubeconfig")) == (ExitCode.CONFIG, "no kubeconfig")
    assert failure(Unreachable("down")) == (ExitCode.UNREACHABLE, "down")
    missing = FileNotFoundError(errno.ENOENT, "No such file or directory", "/x/model.lgbm")
    assert failure(missing) == (ExitCode.USAGE, "cannot use /x/model.lgbm: No such file or directory")
    code, line = failure(OSError(errno.EADDRINUSE, "Address already in use"))  # type: ignore[misc]
    assert code == ExitCode.USAGE and "--port" in line
    assert failure(ConnectionRefusedError(errno.ECONNREFUSED, "Connection refused")) == (
        ExitCode.UNREACHABLE, "a service did not answer: connection refused")
    for bug in (KeyError("x"), TypeError("y"), ValueError("z"), OSError("no errno, no file")):
        assert failure(bug) is None


def test_the_kubernetes_clients_own_errors_are_expected_too() -> None:
    from kubernetes.client.exceptions import ApiException
    from kubernetes.config import ConfigException
    from urllib3.exceptions import MaxRetryError, NewConnectionError

    code, line = failure(ConfigException("Invalid kube-config file. No configuration found."))
    assert code == ExitCode.CONFIG and "--kubeconfig" in line
    assert failure(ApiException(status=403, reason="Forbidden"))[0] == ExitCode.CONFIG  # type: ignore[index]
    assert failure(ApiException(status=503, reason="Unavailable"))[0] == ExitCode.UNREACHABLE  # type: ignore[index]
    refused = NewConnectionError(None, "Failed to establish a new connection: [Errno 111] Connection refused")
    refused.__cause__ = ConnectionRefusedError(errno.ECONNREFUSED, "Connection refused")
    wrapped = MaxRetryError(None, "/api/v1/pods", refused)  # type: ignore[arg-type]
    assert network_reason(wrapped) == "connection refused"
    assert failure(wrapped) == (ExitCode.UNREACHABLE, "cannot reach the server: connection refused")


def _parser() -> argparse.ArgumentParser:
    parser = Parser(prog="offpeak")
    sub = parser.add_subparsers(dest="command")
    run = sub.add_parser("run")
    run.add_argument("--port", type=int, default=env("OFFPEAK_T_PORT", 80))
    run.add_argument("--mode", choices=["a", "b"], default=env("OFFPEAK_T_MODE", "a"))
    run.add_argument("--watch", action=argparse.BooleanOptionalAction, default=env("OFFPEAK_T_WATCH", False))
    sub.add_parser("other")
    return parser


def test_an_environment_default_is_read_at_parse_time_and_a_flag_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    parser = _parser()  # built before the variables are set: they are read when `run` is parsed
    assert vars(parser.parse_args(["run"])) | {"_prog": None} == {
        "command": "run", "port": 80, "mode": "a", "watch": False, "_prog": None}
    monkeypatch.setenv("OFFPEAK_T_PORT", "8080")
    monkeypatch.setenv("OFFPEAK_T_WATCH", "yes")
    args = parser.parse_args(["run"])
    assert (args.port, args.watch, args._prog) == (8080, True, "offpeak run")
    args = parser.parse_args(["run", "--port", "9", "--no-watch"])
    assert (args.port, args.watch) == (9, False)
    monkeypatch.setenv("OFFPEAK_T_WATCH", "")  # empty: unset
    assert parser.parse_args(["run"]).watch is False


@pytest.mark.parametrize("name,value,said", [
    ("OFFPEAK_T_PORT", "http", "$OFFPEAK_T_PORT='http' (the default of --port) is not an integer"),
    ("OFFPEAK_T_MODE", "c", "$OFFPEAK_T_MODE='c' (the default of --mode) is not one of a, b"),
    ("OFFPEAK_T_WATCH", "sometimes", "is not true or false"),
])
def test_a_bad_environment_value_fails_only_its_command(monkeypatch: pytest.MonkeyPatch,
                                                        capsys: pytest.CaptureFixture[str], name: str, value: str,
                                                        said: str) -> None:  # fmt: skip
    monkeypatch.setenv(name, value)
    parser = _parser()
    assert parser.parse_args(["other"]).command == "other"
    with pytest.raises(SystemExit) as exit_:
        parser.parse_args(["run"])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and len(err.splitlines()) == 1
    assert err.startswith("offpeak run: error: ") and said in err and f"fix or unset {name}" in err


def test_progress_is_drawn_on_a_terminal_only() -> None:
    shown = io.StringIO()
    with steps("reading the graph", console=Console(file=shown, force_terminal=True)) as step:
        step("predicting")
    assert "predicting" in shown.getvalue()  # the step shown when the block ended
    piped = io.StringIO()
    with steps("reading the graph", console=Console(file=piped, force_terminal=False)) as step:
        step("predicting")
    assert piped.getvalue() == ""
