"""`offpeak operator`: run the TrainingJob operator (kopf). Parses flags, builds settings, wires, runs."""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import random
import socket
from typing import Any

from offpeak.errors import UserError


def _env(name: str, default: str) -> str:
    """An OFFPEAK_* fallback as a string default: argparse converts it (and reports a bad value) on use."""
    return os.environ.get(name) or default


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "operator", help="run the TrainingJob operator (kopf)",
        description="Watch TrainingJobs: extract model graphs, predict runtimes, create and track training pods.",
    )  # fmt: skip
    scope = p.add_mutually_exclusive_group()
    scope.add_argument("--namespace", "-n", action="append", default=None,
                       help="namespace to watch (repeatable; env OFFPEAK_NAMESPACE, comma-separated)")
    scope.add_argument("--all-namespaces", "-A", action="store_true", help="watch every namespace")
    p.add_argument("--predictor-url", default=_env("OFFPEAK_PREDICTOR_URL", "http://offpeak-predictor:8080"),
                   help="predictor service base URL (env OFFPEAK_PREDICTOR_URL)")
    p.add_argument("--predictor-token-file", default=os.environ.get("OFFPEAK_PREDICTOR_TOKEN_FILE") or None,
                   help="shared secret sent as a bearer token with job samples; the predictor refuses samples "
                        "without it (env OFFPEAK_PREDICTOR_TOKEN_FILE)")
    p.add_argument("--metrics-port", type=int, default=_env("OFFPEAK_METRICS_PORT", "9090"),
                   help="Prometheus /metrics port, 0 to disable (env OFFPEAK_METRICS_PORT)")
    p.add_argument("--liveness-port", type=int, default=_env("OFFPEAK_LIVENESS_PORT", "8081"),
                   help="kopf liveness /healthz port, 0 to disable")
    p.add_argument("--image", default=_env("OFFPEAK_IMAGE", "ghcr.io/offpeak/offpeak:0.1.0"),
                   help="offpeak image for the analysis pod's bundle and emit steps (env OFFPEAK_IMAGE)")
    p.add_argument("--extract-image", default=_env("OFFPEAK_EXTRACT_IMAGE", ""),
                   help="offpeak's extract image: torchvision/HF graphs are extracted in an analysis pod running it "
                        "(default: in the operator's process, which needs the [extract] extra; env "
                        "OFFPEAK_EXTRACT_IMAGE)")
    peer = p.add_mutually_exclusive_group()
    peer.add_argument("--standalone", action="store_true", help="no peering (single operator, tests)")
    peer.add_argument("--peering", action="store_true",
                      help="HA: require kopf peering (object `offpeak-operator`); wait, paused, until it shows this "
                           "operator is the highest-priority live one (without either flag kopf uses peering only if "
                           "its CRDs exist)")
    p.add_argument("--priority", type=int, default=os.environ.get("OFFPEAK_PEERING_PRIORITY") or None,
                   help="peering priority; the highest live operator works (default with --peering: random, since "
                        "kopf pauses every operator when two share a priority; env OFFPEAK_PEERING_PRIORITY)")
    p.add_argument("--analysis-timeout-seconds", type=int,
                   default=_env("OFFPEAK_ANALYSIS_TIMEOUT_SECONDS", "600"),
                   help="deadline of the analysis pod before falling back to a prediction without graph")
    p.add_argument("--resync-seconds", type=float, default=_env("OFFPEAK_RESYNC_SECONDS", "5"),
                   help="re-check every TrainingJob this often")
    p.add_argument("--requeue-base-seconds", type=float, default=_env("OFFPEAK_REQUEUE_BASE_SECONDS", "10"),
                   help="backoff before the 2nd attempt; doubles per attempt")
    p.add_argument("--kubeconfig", default=os.environ.get("KUBECONFIG") or None,
                   help="kubeconfig file (default: in-cluster, then ~/.kube/config)")
    p.add_argument("--batch-jobs", action=argparse.BooleanOptionalAction,
                   default=_env("OFFPEAK_BATCH_JOBS", "true").lower() == "true",
                   help="also predict and admit batch/v1 Jobs whose pod template has the label "
                        "offpeak.io/offline=true (docs/trainingjob.md; env OFFPEAK_BATCH_JOBS)")
    p.add_argument("--pytorch-jobs", action=argparse.BooleanOptionalAction,
                   default=_env("OFFPEAK_PYTORCH_JOBS", "false").lower() == "true",
                   help="also predict and admit Kubeflow PyTorchJobs whose Master template has the label "
                        "offpeak.io/offline=true (needs training-operator's CRD; env OFFPEAK_PYTORCH_JOBS)")
    p.add_argument("--kueue", action=argparse.BooleanOptionalAction,
                   default=_env("OFFPEAK_KUEUE", "false").lower() == "true",
                   help="TrainingJobs labelled kueue.x-k8s.io/queue-name run only while Kueue admits the Workload "
                        "the operator makes for them (docs/trainingjob.md; env OFFPEAK_KUEUE)")
    p.add_argument("--verbose", "-v", action="store_true")
    p.set_defaults(func=run_operator)

    jobs = subparsers.add_parser(
        "jobs", help="list offline work (TrainingJobs, opted-in Jobs): predicted and actual runtime, the window each "
                     "waits for and why",
        description="Offline work in human units: phase and reason, GPUs, predicted (p50, p90) and actual time, "
                    "the idle window a waiting job needs and, when it cannot be placed, the scheduler's words.")
    jobs_scope = jobs.add_mutually_exclusive_group()
    jobs_scope.add_argument("--namespace", "-n", help="one namespace (default: the kubeconfig's)")
    jobs_scope.add_argument("--all-namespaces", "-A", action="store_true")
    jobs.add_argument("--kubeconfig", default=os.environ.get("KUBECONFIG") or None)
    jobs.set_defaults(func=run_jobs)

    explain = subparsers.add_parser(
        "explain", help="why a TrainingJob is where it is: its prediction, the window it needs, per-pod reasons",
        description="Explain one TrainingJob: its phase and message, the prediction per GPU type (with memory "
                    "fit and corrections), the idle window it needs, its measured step times, and for each pod the "
                    "scheduler's reasons (which carry the extender's per-node verdicts, grouped).")
    explain.add_argument("job", help="TrainingJob name")
    explain.add_argument("--namespace", "-n", help="namespace (default: the kubeconfig's)")
    explain.add_argument("--kubeconfig", default=os.environ.get("KUBECONFIG") or None)
    explain.set_defaults(func=run_explain)


def _namespace(kubeconfig: str | None, given: str | None) -> str:
    """The namespace asked for, else the kubeconfig context's, else `default`."""
    if given:
        return given
    from kubernetes import config  # noqa: PLC0415

    try:
        _, context = config.list_kube_config_contexts(config_file=kubeconfig)
        return str((context or {}).get("context", {}).get("namespace") or "default")
    except (config.ConfigException, OSError):
        return "default"


def run_jobs(args: argparse.Namespace) -> int:
    """`offpeak jobs`: one row per TrainingJob."""
    from datetime import UTC, datetime  # noqa: PLC0415

    from kubernetes import client  # noqa: PLC0415
    from rich.console import Console  # noqa: PLC0415
    from rich.table import Table  # noqa: PLC0415

    from offpeak_operator import names  # noqa: PLC0415
    from offpeak_operator.kube import load_api_client  # noqa: PLC0415
    from offpeak_operator.userview import job_row  # noqa: PLC0415

    api = load_api_client(args.kubeconfig)
    custom = client.CustomObjectsApi(api)
    ns = None if args.all_namespaces else _namespace(args.kubeconfig, args.namespace)
    try:
        listed: Any
        if ns is None:
            listed = custom.list_cluster_custom_object(names.GROUP, names.VERSION, names.PLURAL)
        else:
            listed = custom.list_namespaced_custom_object(names.GROUP, names.VERSION, ns, names.PLURAL)
        items: list[dict[str, Any]] = listed["items"]
    except client.ApiException as e:
        raise UserError(f"cannot list TrainingJobs: {e.status} {e.reason}") from e
    now = datetime.now(UTC)
    rows = sorted([*(job_row(j, now=now) for j in items), *_workload_rows(api, ns, now)],
                  key=lambda r: (r.namespace, r.name))
    table = Table(box=None, pad_edge=False)
    columns = (["NAMESPACE"] if args.all_namespaces else []) + [
        "NAME", "PHASE", "REASON", "GPUS", "PREDICTED", "ACTUAL", "ERROR", "NEEDS WINDOW", "AGE"]
    for column in columns:
        table.add_column(column, overflow="fold")
    for r in rows:
        table.add_row(*([r.namespace] if args.all_namespaces else []), r.name, r.phase, r.reason, r.gpus,
                      r.predicted, r.actual, r.error, r.needs, r.age)
    console = Console()
    if not rows:
        console.print("no offline work (TrainingJobs, opted-in Jobs or PyTorchJobs)" + (
            "" if args.all_namespaces else f" in namespace {ns}"))
        return 0
    console.print(table)
    for r in rows:
        if r.why:
            console.print(f"[bold]{r.name}[/bold] waits: {r.why}", highlight=False)
    return 0


def _workload_rows(api: Any, namespace: str | None, now: Any) -> list[Any]:
    """Rows for the opted-in batch/v1 Jobs and PyTorchJobs (with the Kueue Workload of each queued one); a cluster
    without Kueue or training-operator, or a user who may not list them, just shows fewer rows."""
    from kubernetes import client  # noqa: PLC0415

    from offpeak_core.jobkinds import BATCH_JOB, PYTORCH_JOB  # noqa: PLC0415
    from offpeak_operator import workloads  # noqa: PLC0415
    from offpeak_operator.userview import workload_row  # noqa: PLC0415

    def listed(call: Any, *a: Any) -> list[dict[str, Any]]:
        try:
            response = call(*a, _preload_content=False)
        except client.ApiException as e:
            if e.status in (403, 404):
                return []
            raise UserError(f"cannot list offline work: {e.status} {e.reason}") from e
        items: list[dict[str, Any]] = json.loads(response.data)["items"]
        return items

    def custom_objects(group: str, version: str, plural: str) -> list[dict[str, Any]]:
        if namespace is None:
            return listed(custom.list_cluster_custom_object, group, version, plural)
        return listed(custom.list_namespaced_custom_object, group, version, namespace, plural)

    batch, custom = client.BatchV1Api(api), client.CustomObjectsApi(api)
    jobs = (listed(batch.list_job_for_all_namespaces) if namespace is None
            else listed(batch.list_namespaced_job, namespace))
    pytorch_jobs = custom_objects(PYTORCH_JOB.group, PYTORCH_JOB.version, PYTORCH_JOB.plural)
    queued = custom_objects("kueue.x-k8s.io", "v1beta1", "workloads")
    owners = {(w["metadata"].get("namespace"), ref.get("kind"), ref["name"]): w for w in queued
              for ref in w["metadata"].get("ownerReferences") or ()}
    return [workload_row(j, now=now, kind=kind,
                         workload=owners.get((j["metadata"].get("namespace"), kind.kind, j["metadata"]["name"])))
            for kind, items in ((BATCH_JOB, jobs), (PYTORCH_JOB, pytorch_jobs))
            for j in items if workloads.opted_in(j, kind)]


def run_explain(args: argparse.Namespace) -> int:
    """`offpeak explain JOB`."""
    from datetime import UTC, datetime  # noqa: PLC0415

    from kubernetes import client  # noqa: PLC0415

    from offpeak_operator import names  # noqa: PLC0415
    from offpeak_operator.kube import load_api_client  # noqa: PLC0415
    from offpeak_operator.userview import explain_lines  # noqa: PLC0415

    api = load_api_client(args.kubeconfig)
    ns = _namespace(args.kubeconfig, args.namespace)
    try:
        job: Any = client.CustomObjectsApi(api).get_namespaced_custom_object(names.GROUP, names.VERSION, ns,
                                                                             names.PLURAL, args.job)
        response: Any = client.CoreV1Api(api).list_namespaced_pod(
            ns, label_selector=f"{names.LABEL_JOB}={args.job},{names.LABEL_ROLE}=training", _preload_content=False)
        pods = json.loads(response.data)["items"]  # the API's own JSON, as the pure view reads it
    except client.ApiException as e:
        if e.status == 404:
            raise UserError(f"TrainingJob {ns}/{args.job} not found") from e
        raise UserError(f"cannot read TrainingJob {ns}/{args.job}: {e.status} {e.reason}") from e
    attempt = str((job.get("status") or {}).get("attempts") or "")
    current = [p for p in pods if (p.get("metadata") or {}).get("labels", {}).get(names.LABEL_ATTEMPT) == attempt]
    print("\n".join(explain_lines(job, current, now=datetime.now(UTC))))
    return 0


def build_settings(args: argparse.Namespace) -> Any:
    from offpeak_operator.settings import AnalysisSettings, OperatorSettings, PredictorSettings, RequeueSettings

    if args.analysis_timeout_seconds < 10:
        raise UserError("--analysis-timeout-seconds must be at least 10")
    if args.resync_seconds <= 0:
        raise UserError("--resync-seconds must be positive")
    if not args.predictor_url.startswith(("http://", "https://")):
        raise UserError(f"--predictor-url must be an http(s) URL, got {args.predictor_url!r}")
    token = args.predictor_token_file
    if token and not os.path.isfile(token):
        raise UserError(f"--predictor-token-file {token} does not exist (mount the shared secret there)")
    return OperatorSettings(
        predictor=PredictorSettings(url=args.predictor_url, token_file=token),
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
        raise UserError(f"cannot load Kubernetes credentials: {e}") from e
    if args.metrics_port:
        start_http_server(args.metrics_port, registry=operator.metrics.registry)
    kopf.run(
        registry=operator.registry, settings=operator.kopf_settings, **kopf_kwargs,
        clusterwide=not watched, namespaces=watched,
        liveness_endpoint=f"http://0.0.0.0:{args.liveness_port}/healthz" if args.liveness_port else None,
    )  # fmt: skip
    return 0
