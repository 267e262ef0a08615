from __future__ import annotations

import argparse

import pytest

from offpeak.cliargs import Parser
from offpeak.errors import UserError
from offpeak_operator import cli


def parse(argv: list[str]) -> argparse.Namespace:
    parser = Parser()
    cli.register(parser.add_subparsers())
    return parser.parse_args(["operator", *argv])


def test_flags_build_settings() -> None:
    args = parse(["-n", "a", "-n", "b", "--predictor-url", "http://p:8080", "--analysis-timeout-seconds", "90",
                  "--resync-seconds", "2", "--requeue-base-seconds", "3", "--image", "img:1"])
    s = cli.build_settings(args)
    assert cli.namespaces(args) == ["a", "b"]
    assert (s.predictor.url, s.analysis.timeout_seconds, s.analysis.image) == ("http://p:8080", 90, "img:1")
    assert (s.resync_seconds, s.requeue.base_seconds, s.requeue.backoff(3)) == (2.0, 3.0, 12.0)


def test_env_fallbacks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OFFPEAK_PREDICTOR_URL", "http://from-env:1")
    monkeypatch.setenv("OFFPEAK_METRICS_PORT", "9999")
    monkeypatch.setenv("OFFPEAK_NAMESPACE", "x,y")
    args = parse([])
    assert args.metrics_port == 9999 and cli.build_settings(args).predictor.url == "http://from-env:1"
    assert cli.namespaces(args) == ["x", "y"]
    assert cli.namespaces(parse(["-A"])) == []


def test_predictor_token_file_flag_and_env(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    token = tmp_path / "token"
    token.write_text("s3cret")
    assert cli.build_settings(parse(["-A", "--predictor-token-file", str(token)])).predictor.token_file == str(token)
    monkeypatch.setenv("OFFPEAK_PREDICTOR_TOKEN_FILE", str(token))
    assert cli.build_settings(parse(["-A"])).predictor.token_file == str(token)
    monkeypatch.delenv("OFFPEAK_PREDICTOR_TOKEN_FILE")
    assert cli.build_settings(parse(["-A"])).predictor.token_file is None
    with pytest.raises(UserError, match="does not exist"):
        cli.build_settings(parse(["-A", "--predictor-token-file", str(tmp_path / "absent")]))


def test_the_status_server_is_on_by_default_and_off_with_port_0(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    for name in ("OFFPEAK_STATUS_PORT", "OFFPEAK_STATUS_URL", "OFFPEAK_STATUS_TLS_DIR", "OFFPEAK_STATUS_KEY_FILE"):
        monkeypatch.delenv(name, raising=False)
    status = cli.build_settings(parse(["-A"])).status
    assert status is not None and (status.port, status.base_url, status.tls_dir, status.key_file) == (
        8443, "https://127.0.0.1:8443", None, None)
    assert cli.build_settings(parse(["-A", "--status-port", "0"])).status is None
    key = tmp_path / "key"
    key.write_text("k" * 32)
    monkeypatch.setenv("OFFPEAK_STATUS_PORT", "9443")
    monkeypatch.setenv("OFFPEAK_STATUS_URL", "https://offpeak-operator-status.offpeak.svc:9443/")
    monkeypatch.setenv("OFFPEAK_STATUS_TLS_DIR", str(tmp_path))
    monkeypatch.setenv("OFFPEAK_STATUS_KEY_FILE", str(key))
    status = cli.build_settings(parse(["-A", "--live-sample-steps", "20"])).status
    assert status is not None and (status.port, status.base_url, status.tls_dir, status.key_file) == (
        9443, "https://offpeak-operator-status.offpeak.svc:9443", str(tmp_path), str(key))
    assert cli.build_settings(parse(["-A", "--live-sample-steps", "20"])).live.sample_steps == 20


@pytest.mark.parametrize("argv,match", [
    (["-A", "--predictor-url", "ftp://x"], "predictor-url"),
    (["-A", "--analysis-timeout-seconds", "1"], "at least 10"),
    (["-A", "--status-port", "70000"], "--status-port"),
    (["-A", "--status-url", "http://op:8443"], "https://"),
    (["-A", "--status-tls-dir", "/nonexistent/tls"], "--status-tls-dir /nonexistent/tls: its folder does not exist"),
    (["-A", "--status-key-file", "/nonexistent/key"], "--status-key-file /nonexistent/key: its folder does not exist"),
    (["-A", "--live-sample-steps", "0"], "at least 1"),
])
def test_bad_flags_are_user_errors(argv: list[str], match: str) -> None:
    with pytest.raises(UserError, match=match):
        cli.build_settings(parse(argv))


def test_no_scope_is_a_user_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OFFPEAK_NAMESPACE", raising=False)
    with pytest.raises(UserError, match="--all-namespaces"):
        cli.namespaces(parse([]))


def test_peering_modes() -> None:
    assert cli.peering_kwargs(parse(["-A", "--standalone"])) == {"standalone": True}
    assert cli.peering_kwargs(parse(["-A"])) == {}  # kopf decides: peering only if its CRDs exist
    assert cli.peering_kwargs(parse(["-A", "--priority", "7"])) == {"priority": 7}
    peered = cli.peering_kwargs(parse(["-A", "--peering", "--priority", "20"]))
    assert (peered["peering_name"], peered["priority"]) == ("offpeak-operator", 20) and peered["identity"]
    with pytest.raises(SystemExit):
        parse(["-A", "--peering", "--standalone"])


def test_peered_replicas_draw_distinct_priorities() -> None:
    """Replicas share flags; equal priorities would make kopf pause every one of them."""
    import random

    args = parse(["-A", "--peering"])
    drawn = {cli.peering_kwargs(args, rng=random.Random(seed))["priority"] for seed in range(20)}
    assert len(drawn) == 20 and all(p > 0 for p in drawn)


def test_priority_env_fallback(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OFFPEAK_PEERING_PRIORITY", "42")
    assert cli.peering_kwargs(parse(["-A", "--peering"]))["priority"] == 42


def test_peering_puts_identity_and_priority_into_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POD_ID", "offpeak-operator-7d9f-abcde")
    args = parse(["-n", "ml", "--peering", "--priority", "5"])
    settings = cli.with_peering(cli.build_settings(args), cli.peering_kwargs(args), clusterwide=False)
    assert settings.peering is not None
    assert (settings.peering.identity, settings.peering.priority, settings.peering.clusterwide,
            settings.peering.name) == ("offpeak-operator-7d9f-abcde", 5, False, "offpeak-operator")
    standalone = parse(["-A", "--standalone"])
    assert cli.with_peering(cli.build_settings(standalone), cli.peering_kwargs(standalone),
                            clusterwide=True).peering is None
