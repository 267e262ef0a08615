"""`offpeak operator`: run the TrainingJob operator (kopf). Parses flags, builds settings, wires, runs.
(`offpeak jobs` and `offpeak explain`, the user's side, are in `cli_jobs`.)"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import random
import socket
from typing import Any

from offpeak.cliargs import env
from offpeak.errors import ConfigError, UserError
from offpeak_operator import cli_jobs


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "operator", help="run the TrainingJob operator (kopf)",
        description="Watch TrainingJobs: extract model graphs, predict runtimes, create and track training pods.",
    )  # fmt: skip
    scope = p.add_mutually_exclusive_group()
    scope.add_argument("--namespace", "-n", action="append", default=None,
                       help="namespace to watch (repeatable; env OFFPEAK_NAMESPACE, comma-separated)")
    scope.add_argument("--all-namespaces", "-A", action="store_true", help="watch every namespace")
    p.add_argument("--predictor-url", default=env("OFFPEAK_PREDICTOR_URL", "http://offpeak-predictor:8080"),
                   help="predictor service base URL (env OFFPEAK_PREDICTOR_URL)")
    p.add_argument("--predictor-token-file", default=env("OFFPEAK_PREDICTOR_TOKEN_FILE"),
                   help="shared secret sent as a bearer token with job samples; the predictor refuses samples "
                        "without it (env OFFPEAK_PREDICTOR_TOKEN_FILE)")
    p.add_argument("--metrics-port", type=int, default=env("OFFPEAK_METRICS_PORT", 9090),
                   help="Prometheus /metrics port, 0 to disable (env OFFPEAK_METRICS_PORT)")
    p.add_argument("--liveness-port", type=int, default=env("OFFPEAK_LIVENESS_PORT", 8081),
                   help="kopf liveness /healthz port, 0 to disable")
    p.add_argument("--image", default=env("OFFPEAK_IMAGE", "ghcr.io/offpeak/offpeak:0.1.0"),
                   help="offpeak image for the analysis pod's bundle and emit steps (env OFFPEAK_IMAGE)")
    p.add_argument("--extract-image", default=env("OFFPEAK_EXTRACT_IMAGE", ""),
                   help="offpeak's extract image: torchvision/HF graphs are extracted in an analysis pod running it "
                        "(default: in the operator's process, which needs the [extract] extra; env "
                        "OFFPEAK_EXTRACT_IMAGE)")
    peer = p.add_mutually_exclusive_group()
    peer.add_argument("--standalone", action="store_true", help="no peering (single operator, tests)")
    peer.add_argument("--peering", action="store_true",
                      help="HA: require kopf peering (object `offpeak-operator`); wait, paused, until it shows this "
                           "operator is the highest-priority live one (without either flag kopf uses peering only if "
                           "its CRDs exist)")
    p.add_argument("--priority", type=int, default=env("OFFPEAK_PEERING_PRIORITY"),
                   help="peering priority; the highest live operator works (default with --peering: random, since "
                        "kopf pauses every operator when two share a priority; env OFFPEAK_PEERING_PRIORITY)")
    p.add_argument("--analysis-timeout-seconds", type=int,
                   default=env("OFFPEAK_ANALYSIS_TIMEOUT_SECONDS", 600),
                   help="deadline of the analysis pod before falling back to a prediction without graph")
    p.add_argument("--resync-seconds", type=float, default=env("OFFPEAK_RESYNC_SECONDS", 5.0),
                   help="re-check every TrainingJob this often")
    p.add_argument("--requeue-base-seconds", type=float, default=env("OFFPEAK_REQUEUE_BASE_SECONDS", 10.0),
                   help="backoff before the 2nd attempt; doubles per attempt")
    p.add_argument("--kubeconfig", default=env("KUBECONFIG"),
                   help="kubeconfig file (default: in-cluster, then ~/.kube/config)")
    p.add_argument("--batch-jobs", action=argparse.BooleanOptionalAction,
                   default=env("OFFPEAK_BATCH_JOBS", True),
                   help="also predict and admit batch/v1 Jobs whose pod template has the label "
                        "offpeak.io/offline=true (docs/trainingjob.md; env OFFPEAK_BATCH_JOBS)")
    p.add_argument("--pytorch-jobs", action=argparse.BooleanOptionalAction,
                   default=env("OFFPEAK_PYTORCH_JOBS", False),
                   help="also predict and admit Kubeflow PyTorchJobs whose Master template has the label "
                        "offpeak.io/offline=true (needs training-operator's CRD; env OFFPEAK_PYTORCH_JOBS)")
    p.add_argument("--kueue", action=argparse.BooleanOptionalAction,
                   default=env("OFFPEAK_KUEUE", False),
                   help="TrainingJobs labelled kueue.x-k8s.io/queue-name run only while Kueue admits the Workload "
                        "the operator makes for them (docs/trainingjob.md; env OFFPEAK_KUEUE)")
    p.add_argument("--status-port", type=int, default=env("OFFPEAK_STATUS_PORT", 8443),
                   help="HTTPS port training pods report their live progress to (Kubeflow Trainer's protocol); 0: "
                        "no live progress, pods report only when they end (env OFFPEAK_STATUS_PORT)")
    p.add_argument("--status-url", default=env("OFFPEAK_STATUS_URL", ""),
                   help="base URL pods reach that port at, e.g. https://offpeak-operator-status.offpeak.svc:8443 "
                        "(default https://127.0.0.1:PORT, an operator beside a local cluster; env OFFPEAK_STATUS_URL)")
    p.add_argument("--status-tls-dir", default=env("OFFPEAK_STATUS_TLS_DIR"),
                   help="folder with tls.crt, tls.key and ca.crt for that port, made there on the first start when it "
                        "has none (default: made at start-up and kept in memory, so a restarted operator's pods "
                        "distrust it; env OFFPEAK_STATUS_TLS_DIR)")
    p.add_argument("--status-key-file", default=env("OFFPEAK_STATUS_KEY_FILE"),
                   help="key the pods' report tokens are derived with, made there on the first start when absent "
                        "(default: a random one per process, so a restart voids the tokens of running pods; env "
                        "OFFPEAK_STATUS_KEY_FILE)")
    p.add_argument("--live-sample-steps", type=int, default=env("OFFPEAK_LIVE_SAMPLE_STEPS", 50),
                   help="steady steps of a running job before its measured pace goes to the predictor as a sample "
                        "(the final one replaces it; env OFFPEAK_LIVE_SAMPLE_STEPS)")
    p.add_argument("--verbose", "-v", action="store_true")
    p.set_defaults(func=run_operator)
    cli_jobs.register(subparsers)


def status_settings(args: argparse.Namespace) -> Any:
    """The status server's settings from the flags; None with --status-port 0."""
    from offpeak_operator.settings import StatusServerSettings

    port = int(getattr(args, "status_port", 0) or 0)
    if port == 0:
        return None
    if not 0 < port < 65536:
        raise UserError(f"--status-port must be a TCP port (1-65535) or 0, got {port}")
    url = str(getattr(args, "status_url", "") or "")
    if url and not url.startswith("https://"):
        raise UserError(f"--status-url must be an https:// URL (pods check the server's certificate), got {url!r}")
    for flag, path in (("--status-tls-dir", args.status_tls_dir), ("--status-key-file", args.status_key_file)):
        if path and not os.path.isdir(os.path.dirname(os.path.abspath(path))):
            raise UserError(f"{flag} {path}: its folder does not exist (mount the Secret there, or name a folder "
                            "where the operator keeps what it makes)")
    return StatusServerSettings(port=port, url=url, tls_dir=args.status_tls_dir or None,
                                key_file=args.status_key_file or None)


def build_settings(args: argparse.Namespace) -> Any:
    from offpeak_operator.settings import (AnalysisSettings, LiveSettings, OperatorSettings, PredictorSettings,
                                           RequeueSettings)

    if args.analysis_timeout_seconds < 10:
        raise UserError("--analysis-timeout-seconds must be at least 10")
    if args.resync_seconds <= 0:
        raise UserError("--resync-seconds must be positive")
    if not args.predictor_url.startswith(("http://", "https://")):
        raise UserError(f"--predictor-url must be an http(s) URL, got {args.predictor_url!r}")
    token = args.predictor_token_file
    if token and not os.path.isfile(token):
        raise UserError(f"--predictor-token-file {token} does not exist (mount the shared secret there)")
    raw = getattr(args, "live_sample_steps", None)
    sample_steps = LiveSettings().sample_steps if raw is None else int(raw)
    if sample_steps < 1:
        raise UserError("--live-sample-steps must be at least 1")
    return OperatorSettings(
        predictor=PredictorSettings(url=args.predictor_url, token_file=token),
        live=LiveSettings(sample_steps=sample_steps),
        status=status_settings(args) if hasattr(args, "status_port") else None,
        analysis=AnalysisSettings(image=args.image, extract_image=args.extract_image,
                                  timeout_seconds=args.analysis_timeout_seconds),
        requeue=RequeueSettings(base_seconds=args.requeue_base_seconds),
        resync_seconds=args.resync_seconds,
        watch_batch_jobs=bool(getattr(args, "batch_jobs", True)),
        watch_pytorch_jobs=bool(getattr(args, "pytorch_jobs", False)),
        kueue=bool(getattr(args, "kueue", False)),
    )


def namespaces(args: argparse.Namespace) -> list[str]:
    if args.all_namespaces:
        return []
    given = args.namespace or [n for n in os.environ.get("OFFPEAK_NAMESPACE", "").split(",") if n]
    if not given:
        raise UserError("say which namespaces to watch: --namespace NS (repeatable) or --all-namespaces")
    return given


def peering_kwargs(args: argparse.Namespace, *, rng: random.Random | None = None) -> dict[str, Any]:
    """kopf.run arguments for the peering mode. Replicas of one Deployment share their flags, so with `--peering`
    and no `--priority` each draws a random one: kopf pauses *all* operators that tie on priority. The identity
    is ours (kopf's convention: $POD_ID, else host/pid/random) so the resync loop can find itself on the object."""
    from offpeak_operator.handlers import PEERING_NAME

    if args.standalone:
        return {"standalone": True}
    if not args.peering:
        return {"priority": args.priority} if args.priority is not None else {}
    rng = rng or random.SystemRandom()
    priority = args.priority if args.priority is not None else rng.randint(1, 2**31 - 1)
    identity = os.environ.get("POD_ID") or f"{socket.gethostname()}/{os.getpid()}/{rng.randrange(16**6):06x}"
    # a peering name makes kopf's peering mandatory: paused until the peering object says this one leads
    return {"peering_name": PEERING_NAME, "priority": priority, "identity": identity}


def with_peering(settings: Any, kopf_kwargs: dict[str, Any], *, clusterwide: bool) -> Any:
    """Settings whose resync loop pauses with kopf when `kopf_kwargs` ask for mandatory peering."""
    from offpeak_operator.settings import PeeringSettings

    if "peering_name" not in kopf_kwargs:
        return settings
    peering = PeeringSettings(identity=kopf_kwargs["identity"], priority=kopf_kwargs["priority"],
                              clusterwide=clusterwide, name=kopf_kwargs["peering_name"])
    return dataclasses.replace(settings, peering=peering)


def run_operator(args: argparse.Namespace) -> int:
    import kopf
    from kubernetes.config import ConfigException
    from prometheus_client import start_http_server

    from offpeak_operator.wiring import build_operator

    watched = namespaces(args)
    kopf_kwargs = peering_kwargs(args)
    settings = with_peering(build_settings(args), kopf_kwargs, clusterwide=not watched)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        operator = build_operator(settings, kubeconfig=args.kubeconfig)
    except (ConfigException, OSError) as e:
        raise ConfigError(f"cannot load Kubernetes credentials: {e} (pass --kubeconfig FILE, or run in a pod)") from e
    if args.metrics_port:
        start_http_server(args.metrics_port, registry=operator.metrics.registry)
    if operator.status_server is not None and settings.status is not None:
        server = operator.status_server
        try:  # an operator beside a local cluster (no --status-url) takes a free port when its own is taken
            port = server.start(any_port_if_taken=not settings.status.url)
        except OSError as e:
            raise ConfigError(f"cannot serve live progress on port {server.port}: {e} (choose another with "
                              "--status-port, or 0 for none)") from e
        server.channel.base_url = settings.status.url_for(port)
    kopf.run(
        registry=operator.registry, settings=operator.kopf_settings, **kopf_kwargs,
        clusterwide=not watched, namespaces=watched,
        liveness_endpoint=f"http://0.0.0.0:{args.liveness_port}/healthz" if args.liveness_port else None,
    )  # fmt: skip
    return 0
