"""`offpeak cluster` / `offpeak demo` argument handling (no cluster started)."""

from __future__ import annotations

import pytest

from offpeak.cli import build_parser, main
from offpeak.errors import UserError
from offpeak_e2e.cli import settings_from_args


def test_cluster_up_options_become_settings() -> None:
    args = build_parser().parse_args(
        ["cluster", "up", "--name", "x", "--nodes", "6", "--gpu-types", "L4,H100-SXM5-80GB", "--without",
         "operator,evictor", "--day-seconds", "120", "--no-online-load"])
    s = settings_from_args(args)
    assert s.control_plane.name == "x" and s.control_plane.nodes == 6
    assert s.control_plane.gpu_types == ("L4", "H100-SXM5-80GB")
    assert "operator" not in s.services and "evictor" not in s.services and "extender" in s.services
    assert s.day_seconds == 120 and s.online_load is False


def test_unknown_gpu_type_and_service_are_user_errors() -> None:
    args = build_parser().parse_args(["cluster", "up", "--gpu-types", "NoSuchGPU"])
    with pytest.raises(UserError, match="NoSuchGPU"):
        settings_from_args(args)
    args = build_parser().parse_args(["cluster", "up", "--without", "kubelet"])
    with pytest.raises(UserError, match="kubelet"):
        settings_from_args(args)


def test_bad_numbers_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        main(["cluster", "up", "--nodes", "0"])
    assert e.value.code == 2
    assert "--nodes" in capsys.readouterr().err
    assert main(["cluster", "up", "--gpu-types", "Bogus"]) == 2


def test_demo_defaults_to_its_own_cluster_name() -> None:
    args = build_parser().parse_args(["demo", "--jobs", "2", "--duration", "30"])
    assert args.name == "demo" and args.jobs == 2 and args.duration == 30.0
