"""kwok Stages: the fake kubelet's behaviour for our nodes and pods.

Passing any Stage to kwok disables all its defaults, so this supplies every one we need: node initialise and
heartbeat, pod start (scheduled -> Running and Ready), offline pod completion after ``offpeak.io/sim-runtime``
(or the attempt's steps left x ``offpeak.io/sim-step-ms``) and pod deletion. Templates follow kwok's own stages
(sigs.k8s.io/kwok kustomize/stage, Apache-2.0).
"""

from __future__ import annotations

from typing import Any

import yaml

SIM_RUNTIME_ANNOTATION = "offpeak.io/sim-runtime"
# with it (milliseconds a step), the fake training code of a TrainingJob's pod runs only the steps its attempt has
# left (OFFPEAK_TOTAL_STEPS - OFFPEAK_COMPLETED_STEPS, as the operator sets them) instead of the whole sim-runtime:
# a resumed attempt does the remaining work, as real code that loads its checkpoint does
SIM_STEP_MS_ANNOTATION = "offpeak.io/sim-step-ms"
# the fake training code's exit status at the end of its sim-runtime (absent: 0, the pod succeeds)
SIM_EXIT_ANNOTATION = "offpeak.io/sim-exit-code"
# the progress report (offpeak.progress JSON) the fake training code leaves when it is stopped: what a real one
# writes on SIGTERM after saving its checkpoint
SIM_PROGRESS_ANNOTATION = "offpeak.io/sim-progress"
WORKLOAD_LABEL = "offpeak.io/workload"

_NODE_STATUS = """{{ $now := Now }}
{{ $lastTransitionTime := or .metadata.creationTimestamp $now }}
conditions:
{{ range NodeConditions }}
- lastHeartbeatTime: {{ $now | Quote }}
  lastTransitionTime: {{ $lastTransitionTime | Quote }}
  message: {{ .message | Quote }}
  reason: {{ .reason | Quote }}
  status: {{ .status | Quote }}
  type: {{ .type | Quote }}
{{ end }}
addresses:
{{ with .status.addresses }}
{{ YAML . 1 }}
{{ else }}
{{ with NodeIP }}
- address: {{ . | Quote }}
  type: InternalIP
{{ end }}
{{ with NodeName }}
- address: {{ . | Quote }}
  type: Hostname
{{ end }}
{{ end }}
"""

_NODE_INIT_EXTRA = """allocatable:
{{ with .status.allocatable }}
{{ YAML . 1 }}
{{ else }}
  cpu: 1k
  memory: 1Ti
  pods: 1M
{{ end }}
capacity:
{{ with .status.capacity }}
{{ YAML . 1 }}
{{ else }}
  cpu: 1k
  memory: 1Ti
  pods: 1M
{{ end }}
nodeInfo:
  architecture: amd64
  containerRuntimeVersion: kwok
  kernelVersion: kwok
  kubeProxyVersion: kwok
  kubeletVersion: kwok
  operatingSystem: linux
phase: Running
"""

_POD_RUNNING = """{{ $now := Now }}
conditions:
- lastProbeTime: null
  lastTransitionTime: {{ $now | Quote }}
  status: "True"
  type: Initialized
- lastProbeTime: null
  lastTransitionTime: {{ $now | Quote }}
  status: "True"
  type: Ready
- lastProbeTime: null
  lastTransitionTime: {{ $now | Quote }}
  status: "True"
  type: ContainersReady
- lastProbeTime: null
  lastTransitionTime: {{ $now | Quote }}
  status: "True"
  type: PodScheduled
containerStatuses:
{{ range .spec.containers }}
- image: {{ .image | Quote }}
  name: {{ .name | Quote }}
  ready: true
  restartCount: 0
  started: true
  state:
    running:
      startedAt: {{ $now | Quote }}
{{ end }}
hostIP: {{ NodeIPWith .spec.nodeName | Quote }}
podIP: {{ PodIPWith .spec.nodeName ( or .spec.hostNetwork false ) ( or .metadata.uid "" ) ( or .metadata.name "" ) ( or .metadata.namespace "" ) | Quote }}
phase: Running
startTime: {{ $now | Quote }}
"""

def _pod_ended(*, phase: str, ready_reason: str, exit_code: str, reason: str, message: str = "") -> str:
    """The status template of a pod whose containers have all ended (`exit_code`, `message`: template
    expressions, so a value may come from the pod's own annotations)."""
    message_line = f"\n      message: {message}" if message else ""
    return f"""{{{{ $now := Now }}}}
{{{{ $root := . }}}}
conditions:
- lastProbeTime: null
  lastTransitionTime: {{{{ $now | Quote }}}}
  status: "False"
  reason: {ready_reason}
  type: Ready
- lastProbeTime: null
  lastTransitionTime: {{{{ $now | Quote }}}}
  status: "False"
  reason: {ready_reason}
  type: ContainersReady
containerStatuses:
{{{{ range $index, $item := .spec.containers }}}}
- image: {{{{ $item.image | Quote }}}}
  name: {{{{ $item.name | Quote }}}}
  ready: false
  restartCount: 0
  started: false
  state:
    terminated:
      exitCode: {exit_code}
      finishedAt: {{{{ $now | Quote }}}}
      reason: {reason}{message_line}
      startedAt: {{{{ $root.status.startTime | Quote }}}}
{{{{ end }}}}
phase: {phase}
"""


_POD_SUCCEEDED = _pod_ended(phase="Succeeded", ready_reason="PodCompleted", exit_code="0", reason="Completed")
# the fake training code fails with the exit status its pod's annotation names
_POD_FAILED = _pod_ended(phase="Failed", ready_reason="PodFailed", reason="Error",
                         exit_code='{{ index $root.metadata.annotations "offpeak.io/sim-exit-code" }}')
# stopped (SIGTERM on deletion): every container ends with the progress report as its termination message
_POD_STOPPED = _pod_ended(phase="Failed", ready_reason="PodFailed", reason="Error", exit_code="143",
                          message='{{ index $root.metadata.annotations "offpeak.io/sim-progress" | Quote }}')


def _stage(name: str, kind: str, expressions: list[dict[str, Any]], *, nxt: dict[str, Any],
           delay: dict[str, Any] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "resourceRef": {"apiGroup": "v1", "kind": kind},
        "selector": {"matchExpressions": expressions},
        "next": nxt,
    }
    if delay:
        spec["delay"] = delay
    return {"apiVersion": "kwok.x-k8s.io/v1alpha1", "kind": "Stage", "metadata": {"name": name}, "spec": spec}


def _expr(key: str, op: str, *values: str) -> dict[str, Any]:
    e: dict[str, Any] = {"key": key, "operator": op}
    if values:
        e["values"] = list(values)
    return e


def _env_number(name: str) -> str:
    """jq: the first value of env var `name` among the pod's containers, as a number (null when absent)."""
    return f'([.spec.containers[].env[]? | select(.name == "{name}") | .value | tonumber] | first)'


def run_time_expression() -> str:
    """jq for how long the fake training code runs: the steps its attempt has left x `offpeak.io/sim-step-ms` when
    the pod has that annotation, else `offpeak.io/sim-runtime` (a Go duration)."""
    step = f'.metadata.annotations["{SIM_STEP_MS_ANNOTATION}"]'
    total, done = _env_number("OFFPEAK_TOTAL_STEPS"), _env_number("OFFPEAK_COMPLETED_STEPS")
    left = f"(({total} // 0) - ({done} // 0))"
    return (f'if {step} == null then .metadata.annotations["{SIM_RUNTIME_ANNOTATION}"] '
            f'else ([{left} * ({step} | tonumber), 1000] | max | floor | tostring) + "ms" end')


def stages(*, pod_start_ms: int = 300, heartbeat_ms: int = 20_000) -> list[dict[str, Any]]:
    """Every Stage the local cluster runs kwok with.

    The offline-completion stage waits exactly ``offpeak.io/sim-runtime`` (a Go duration such as ``90s``), or the
    attempt's steps left x ``offpeak.io/sim-step-ms`` (`run_time_expression`): kwok picks a random delay between the
    delay and the jitter, so the jitter is the same expression.
    """
    not_deleting = _expr(".metadata.deletionTimestamp", "DoesNotExist")
    ready = '.status.conditions.[] | select( .type == "Ready" ) | .status'
    runtime = f'.metadata.annotations["{SIM_RUNTIME_ANNOTATION}"]'
    exit_code = f'.metadata.annotations["{SIM_EXIT_ANNOTATION}"]'
    progress = f'.metadata.annotations["{SIM_PROGRESS_ANNOTATION}"]'
    offline = _expr(f'.metadata.labels["{WORKLOAD_LABEL}"]', "In", "offline")
    deleting = _expr(".metadata.deletionTimestamp", "Exists")
    no_finalizers = _expr(".metadata.finalizers", "DoesNotExist")
    run_time = {"jq": {"expression": run_time_expression()}}
    ends = {"durationMilliseconds": 1000, "durationFrom": run_time,
            "jitterDurationMilliseconds": 1000, "jitterDurationFrom": run_time}
    return [
        _stage("node-initialize", "Node", [_expr(ready, "NotIn", "True")],
               nxt={"statusTemplate": _NODE_STATUS + _NODE_INIT_EXTRA}),
        _stage("node-heartbeat", "Node", [_expr(".status.phase", "In", "Running"), _expr(ready, "In", "True")],
               nxt={"statusTemplate": _NODE_STATUS},
               delay={"durationMilliseconds": heartbeat_ms, "jitterDurationMilliseconds": heartbeat_ms + 5000}),
        _stage("pod-start", "Pod",
               [not_deleting, _expr(".spec.nodeName", "Exists"), _expr(".status.podIP", "DoesNotExist")],
               nxt={"statusTemplate": _POD_RUNNING},
               delay={"durationMilliseconds": pod_start_ms, "jitterDurationMilliseconds": pod_start_ms * 2}),
        _stage("offpeak-offline-complete", "Pod",
               [not_deleting, _expr(".status.phase", "In", "Running"), _expr(ready, "In", "True"), offline,
                _expr(runtime, "Exists"), _expr(exit_code, "DoesNotExist")],
               nxt={"statusTemplate": _POD_SUCCEEDED}, delay=ends),
        _stage("offpeak-offline-fail", "Pod",
               [not_deleting, _expr(".status.phase", "In", "Running"), _expr(ready, "In", "True"), offline,
                _expr(runtime, "Exists"), _expr(exit_code, "Exists")],
               nxt={"statusTemplate": _POD_FAILED}, delay=ends),
        # a pod that reports progress is stopped as a real one is (SIGTERM, checkpoint, report, exit) and only
        # then removed, a few seconds later, so the operator can read what it reported
        _stage("offpeak-offline-stop", "Pod",
               [deleting, _expr(".status.phase", "In", "Running"), _expr(progress, "Exists")],
               nxt={"statusTemplate": _POD_STOPPED},
               delay={"durationMilliseconds": 500, "jitterDurationMilliseconds": 1000}),
        _stage("pod-delete-stopped", "Pod",
               [deleting, no_finalizers, _expr(progress, "Exists"), _expr(".status.phase", "NotIn", "Running")],
               nxt={"delete": True}, delay={"durationMilliseconds": 3000, "jitterDurationMilliseconds": 4000}),
        _stage("pod-delete", "Pod", [deleting, no_finalizers, _expr(progress, "DoesNotExist")],
               nxt={"delete": True}, delay={"durationMilliseconds": 200, "jitterDurationMilliseconds": 400}),
    ]


def stages_yaml(**kwargs: Any) -> str:
    """The Stages as a multi-document YAML file for ``kwok -c``."""
    return yaml.safe_dump_all(stages(**kwargs), sort_keys=False)
