"""`offpeak jobs` and `offpeak explain`: a user's view of offline work, with kubectl's flags (--kubeconfig,
--context, -n, -A, -o wide|json|yaml). Parses, fetches (`clikube`), hands the objects to the pure views
(`userview`, `explainview`) and prints.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from offpeak.errors import ConfigError, UserError
from offpeak_core.jobkinds import BATCH_JOB, PYTORCH_JOB, JobKind

OUTPUTS = ("wide", "json", "yaml")
KUEUE_WORKLOADS = ("kueue.x-k8s.io", "v1beta1", "workloads")
# what `explain` accepts before the slash (None: a TrainingJob), as kubectl's resource names and short names
KINDS: dict[str, JobKind | None] = {
    "trainingjob": None, "trainingjobs": None, "tj": None, "trainingjob.offpeak.io": None,
    "job": BATCH_JOB, "jobs": BATCH_JOB, "job.batch": BATCH_JOB,
    "pytorchjob": PYTORCH_JOB, "pytorchjobs": PYTORCH_JOB, "pytorchjob.kubeflow.org": PYTORCH_JOB,
}  # fmt: skip


def _cluster_flags(p: argparse.ArgumentParser, *, all_help: str) -> None:
    p.add_argument("--kubeconfig", metavar="FILE",
                   help="kubeconfig file (default: $KUBECONFIG, then ~/.kube/config, then the pod's service account)")
    p.add_argument("--context", metavar="NAME", help="kubeconfig context (default: its current context)")
    scope = p.add_mutually_exclusive_group()
    scope.add_argument("-n", "--namespace", metavar="NS", help="namespace (default: the context's, else default)")
    scope.add_argument("-A", "--all-namespaces", action="store_true", help=all_help)
    p.add_argument("-o", "--output", choices=OUTPUTS, default=None,
                   help="wide: more columns; json or yaml: the same facts as numbers, for scripts")


def register(subparsers: Any) -> None:
    jobs = subparsers.add_parser(
        "jobs", help="list offline work (TrainingJobs, opted-in Jobs): predicted and actual runtime, the window each "
                     "waits for and why",
        description="Offline work in human units: phase and reason, GPUs, predicted (p50, p90) and actual time, "
                    "the idle window a waiting job needs and, when it cannot be placed, the scheduler's words.")
    _cluster_flags(jobs, all_help="every namespace")
    jobs.set_defaults(func=run_jobs, gpu_catalogue=False)  # what the objects say is shown as it is

    explain = subparsers.add_parser(
        "explain", help="why offline work is where it is: its prediction, the window it needs, per-pod reasons",
        description="Explain one piece of offline work: its phase and message, the prediction per GPU type (with "
                    "memory fit and corrections), the idle window it needs, its measured step times, and for each "
                    "pod the scheduler's reasons (which carry the extender's per-node verdicts, grouped).")
    explain.add_argument("job", metavar="[KIND/]NAME",
                         help="a TrainingJob's name, or job/NAME or pytorchjob/NAME as `offpeak jobs` lists them")
    _cluster_flags(explain, all_help="look for NAME in every namespace")
    explain.set_defaults(func=run_explain, gpu_catalogue=False)


def print_data(data: Any, output: str) -> None:
    """`-o json|yaml`: stable key order (the records', not sorted), parseable back to the same data."""
    if output == "json":
        print(json.dumps(data, indent=2))
    else:
        import yaml  # noqa: PLC0415

        print(yaml.safe_dump(data, sort_keys=False, allow_unicode=True), end="")


# ---------------------------------------------------------------------------------------------------- fetching


def _list(cluster: Any, kind: JobKind | None, namespace: str | None, *, tolerate: tuple[int, ...] = (),
          field_selector: str | None = None) -> list[dict[str, Any]]:  # fmt: skip
    """TrainingJobs (kind None), batch Jobs or PyTorchJobs of one namespace (None: all). `tolerate`: answers that
    mean none (404: a cluster without the kind; 403: a user who may not list it); a cluster without TrainingJobs
    is otherwise not offpeak's."""
    from kubernetes import client  # noqa: PLC0415

    from offpeak_operator import clikube, names  # noqa: PLC0415

    missing = tolerate or (404,)
    selector = {"field_selector": field_selector} if field_selector else {}
    if kind is BATCH_JOB:
        batch = client.BatchV1Api(cluster.api)
        listed = (clikube.read(cluster, batch.list_job_for_all_namespaces, missing=missing, **selector)
                  if namespace is None else
                  clikube.read(cluster, batch.list_namespaced_job, namespace, missing=missing, **selector))
    else:
        group, version, plural = ((names.GROUP, names.VERSION, names.PLURAL) if kind is None
                                  else (kind.group, kind.version, kind.plural))
        listed = _custom(cluster, group, version, plural, namespace, missing=missing, **selector)
    if listed is None and kind is None and 404 not in tolerate:
        raise ConfigError(f"the API server at {cluster.server} knows no TrainingJobs: install offpeak's chart (its "
                          "CRD), or pick the cluster that has it with --context")
    return clikube.items(listed)


def _custom(cluster: Any, group: str, version: str, plural: str, namespace: str | None, **kwargs: Any) -> Any:
    from kubernetes import client  # noqa: PLC0415

    from offpeak_operator import clikube  # noqa: PLC0415

    custom = client.CustomObjectsApi(cluster.api)
    if namespace is None:
        return clikube.read(cluster, custom.list_cluster_custom_object, group, version, plural, **kwargs)
    return clikube.read(cluster, custom.list_namespaced_custom_object, group, version, namespace, plural, **kwargs)


def _kueue_owners(cluster: Any, namespace: str | None) -> dict[tuple[Any, Any, Any], dict[str, Any]]:
    """Kueue Workloads by (namespace, owner kind, owner name); none without Kueue or the right to list them."""
    from offpeak_operator import clikube  # noqa: PLC0415

    queued = clikube.items(_custom(cluster, *KUEUE_WORKLOADS, namespace, missing=(403, 404)))
    return {(w["metadata"].get("namespace"), ref.get("kind"), ref["name"]): w for w in queued
            for ref in w["metadata"].get("ownerReferences") or ()}  # fmt: skip


def _pods(cluster: Any, namespace: str, selector: str) -> list[dict[str, Any]]:
    from kubernetes import client  # noqa: PLC0415

    from offpeak_operator import clikube  # noqa: PLC0415

    core = client.CoreV1Api(cluster.api)
    return clikube.items(clikube.read(cluster, core.list_namespaced_pod, namespace, label_selector=selector,
                                      missing=(403,)))  # fmt: skip


def _connect(args: argparse.Namespace) -> tuple[Any, str | None]:
    """The connection and the namespace asked for (None: all)."""
    from offpeak_operator import clikube  # noqa: PLC0415

    cluster = clikube.connect(kubeconfig=args.kubeconfig, context=args.context)
    return cluster, None if args.all_namespaces else (args.namespace or cluster.namespace)


# ------------------------------------------------------------------------------------------------------- jobs


def run_jobs(args: argparse.Namespace) -> int:
    """`offpeak jobs`: one row per TrainingJob, opted-in Job and PyTorchJob."""
    from offpeak_operator import workloads  # noqa: PLC0415
    from offpeak_operator.userview import job_row, workload_row  # noqa: PLC0415

    cluster, ns = _connect(args)
    now = datetime.now(UTC)
    rows = [job_row(j, now=now) for j in _list(cluster, None, ns)]
    opted = [(kind, j) for kind in (BATCH_JOB, PYTORCH_JOB) for j in _list(cluster, kind, ns, tolerate=(403, 404))
             if workloads.opted_in(j, kind)]  # fmt: skip
    owners = _kueue_owners(cluster, ns) if opted else {}
    rows += [workload_row(j, now=now, kind=kind,
                          workload=owners.get((j["metadata"].get("namespace"), kind.kind, j["metadata"]["name"])))
             for kind, j in opted]  # fmt: skip
    rows.sort(key=lambda r: (r.namespace, r.name))
    if args.output in ("json", "yaml"):
        print_data({"items": [r.record() for r in rows]}, args.output)
        return 0
    _print_table(rows, wide=args.output == "wide", all_namespaces=ns is None, namespace=ns)
    return 0


def _print_table(rows: list[Any], *, wide: bool, all_namespaces: bool, namespace: str | None) -> None:
    from rich.console import Console  # noqa: PLC0415
    from rich.table import Table  # noqa: PLC0415

    console = Console()
    if not rows:
        console.print("no offline work (TrainingJobs, opted-in Jobs or PyTorchJobs)"
                      + ("" if all_namespaces else f" in namespace {namespace}"), highlight=False)
        return
    table = Table(box=None, pad_edge=False)
    columns = (["NAMESPACE"] if all_namespaces else []) + [
        "NAME", "PHASE", "REASON", "GPUS", "PREDICTED", "ACTUAL", "ERROR", "NEEDS WINDOW", "AGE"] + (
        ["WHY"] if wide else [])  # fmt: skip
    for column in columns:
        table.add_column(column, overflow="fold")
    for r in rows:
        table.add_row(*([r.namespace] if all_namespaces else []), r.name, r.phase, r.reason, r.gpus,
                      r.predicted, r.actual, r.error, r.needs, r.age, *([r.why] if wide else []))  # fmt: skip
    console.print(table, highlight=False)
    if not wide:
        for r in rows:
            if r.why:
                console.print(f"[bold]{r.name}[/bold] waits: {r.why}", highlight=False)


# ---------------------------------------------------------------------------------------------------- explain


def parse_target(text: str) -> tuple[JobKind | None, str]:
    """(kind, name) of `explain`'s argument: NAME is a TrainingJob; KIND/NAME names the kind as kubectl does."""
    word, slash, name = text.partition("/")
    if not slash:
        return None, text
    if word.lower() not in KINDS or not name:
        raise UserError(f"cannot explain {text!r}: say NAME (a TrainingJob), job/NAME or pytorchjob/NAME")
    return KINDS[word.lower()], name


def _find(cluster: Any, kind: JobKind | None, name: str, namespace: str | None) -> dict[str, Any] | None:
    """The object of that kind and name in `namespace`, or the only one in any namespace (namespace None)."""
    found = _list(cluster, kind, namespace, field_selector=f"metadata.name={name}",
                  tolerate=() if kind is None else (404,))  # no PyTorchJob CRD: no such PyTorchJob
    if len(found) > 1:
        where = ", ".join(sorted(str(o["metadata"].get("namespace")) for o in found))
        raise UserError(f"{name} is in namespaces {where}: say which with -n NAMESPACE")
    return found[0] if found else None


def run_explain(args: argparse.Namespace) -> int:
    """`offpeak explain [KIND/]NAME`."""
    from offpeak_operator import names  # noqa: PLC0415
    from offpeak_operator.explainview import explain_trainingjob, explain_workload, lines, record  # noqa: PLC0415

    kind, name = parse_target(args.job)
    cluster, ns = _connect(args)
    obj = _find(cluster, kind, name, ns)
    what = "TrainingJob" if kind is None else kind.kind
    if obj is None:
        where = "any namespace" if ns is None else f"namespace {ns}"
        other = "job/NAME or pytorchjob/NAME for other kinds" if kind is None else "NAME alone for a TrainingJob"
        raise UserError(f"{what} {name} not found in {where} (`offpeak jobs` lists what there is; say {other})")
    namespace = str(obj["metadata"].get("namespace") or ns)
    now = datetime.now(UTC)
    if kind is None:
        pods = _pods(cluster, namespace, f"{names.LABEL_JOB}={name},{names.LABEL_ROLE}=training")
        attempt = str((obj.get("status") or {}).get("attempts") or "")
        current = [p for p in pods if _labels(p).get(names.LABEL_ATTEMPT) == attempt]
        explanation = explain_trainingjob(obj, current, now=now)
    else:
        owners = _kueue_owners(cluster, namespace)
        explanation = explain_workload(obj, _pods(cluster, namespace, f"{kind.pod_label}={name}"), kind=kind,
                                       now=now, workload=owners.get((namespace, kind.kind, name)))  # fmt: skip
    if args.output in ("json", "yaml"):
        print_data(record(explanation), args.output)
    else:
        print("\n".join(lines(explanation)))
    return 0


def _labels(obj: Mapping[str, Any]) -> Mapping[str, str]:
    return (obj.get("metadata") or {}).get("labels") or {}
