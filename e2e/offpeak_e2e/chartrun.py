"""offpeak's services as charts/offpeak renders them, run as local processes (docs/e2e.md, "offpeak as the chart
renders it").

The local cluster renders the chart (`helm template`, e2e/values-e2e.yaml plus `cluster_values`), applies its
ServiceAccounts, RBAC and the Secrets and ConfigMaps the services mount, and starts each component from its
Deployment's container: its arguments, its environment and its mounted files, under its own ServiceAccount. So a
wrong flag, a missing value or a missing RBAC verb in the chart fails the scenarios.

What differs from a pod, and only this (`process_spec` does all of it):

1. The image's entrypoint `offpeak` is this checkout's (`cluster.offpeak_argv`).
2. Each container port is a free port on 127.0.0.1 (`ports`, keyed `<component>/<port name>`): an argument
   `--…port=N` naming a declared container port gets its local port, and the listen address `0.0.0.0` becomes
   `127.0.0.1`.
3. A URL that names a rendered Service (`http://<svc>.<ns>.svc[.cluster.local][:port]`) names the local port of the
   container port that Service port targets.
4. Each volume is a directory under `volume_root/<component>/<volume>`: emptyDir and claims start empty, Secret and
   ConfigMap volumes hold their keys as files (`items`, `defaultMode`); an argument or environment value under a
   `mountPath` points into that directory.
5. A pod that mounts its ServiceAccount token gets `KUBECONFIG`, a kubeconfig holding a token of that ServiceAccount
   from the TokenRequest API, instead of the in-cluster credentials; one that does not mount it gets none.
6. The environment is the container's own (`valueFrom` of the pod's namespace and name, Secrets and ConfigMaps
   resolved from the rendered objects, `$(VAR)` expanded) plus PATH; nothing of the test process's environment.

Pure above the line "I/O"; the few functions below it run helm and kubectl.
"""

from __future__ import annotations

import base64
import json
import os
import re
import subprocess
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

RELEASE = "offpeak"
NAMESPACE = "offpeak-system"
VALUES_FILE = Path(__file__).resolve().parents[1] / "values-e2e.yaml"
CHART_DIR = Path(__file__).resolve().parents[2] / "charts" / "offpeak"
COMPONENT_LABEL = "app.kubernetes.io/component"
# offpeak's services the local cluster runs from the chart (the harness's service names are the chart's components)
COMPONENTS: tuple[str, ...] = ("predictor", "extender", "evictor", "operator")
IDENTITY_KINDS = frozenset({"ServiceAccount", "Role", "ClusterRole", "RoleBinding", "ClusterRoleBinding"})
TOKEN_SECONDS = 48 * 3600


class ChartRunError(RuntimeError):
    """The rendered chart asks for something a local process cannot have; the message names it."""


@dataclass(frozen=True)
class ProcessSpec:
    """One component's container as a local process: what `launch` starts."""

    component: str
    namespace: str
    argv: tuple[str, ...]  # after the entrypoint
    env: Mapping[str, str]
    service_account: str | None  # whose token it gets; None: the pod mounts no token
    ports: Mapping[str, int]  # container port name -> local port
    ready_url: str  # its readiness probe (else liveness, else its first port)
    dirs: tuple[str, ...] = ()
    files: Mapping[str, tuple[bytes, int]] = field(default_factory=dict)  # local path -> (content, mode)


def cluster_values(*, services: Sequence[str], addons: Sequence[str], day_seconds: float, eviction_grace_s: int,
                   analysis_timeout_s: int, operator_namespaces: Sequence[str], prometheus_url: str,
                   extra_env: Mapping[str, str]) -> dict[str, Any]:
    """The values one local cluster adds to e2e/values-e2e.yaml, from its settings (`cluster.ClusterSettings`): the
    compressed day, the eviction grace and analysis deadline, which namespaces the operator leaves alone, the local
    Prometheus, which components run, Kueue's and training-operator's features only where they run, and
    `extra_env` as every component's `extraEnv`."""
    if day_seconds != int(day_seconds):
        raise ChartRunError(f"day_seconds {day_seconds} must be whole seconds (scheduler.extender.seasonSeconds)")
    watch = [p for p in operator_namespaces if not p.startswith("!")]
    exclude = [p[1:] for p in operator_namespaces if p.startswith("!")]
    if len(watch) > 1 or (watch and exclude):
        raise ChartRunError(f"operator namespaces {list(operator_namespaces)}: the chart's operator watches one "
                            "namespace (operator.watchNamespace) or all but some (operator.excludeNamespaces)")
    env = [{"name": k, "value": v} for k, v in sorted(extra_env.items())]
    kueue, kubeflow = "kueue" in addons, "training-operator" in addons
    operator: dict[str, Any] = {
        "enabled": "operator" in services, "analysisTimeoutSeconds": int(analysis_timeout_s),
        "watchNamespace": watch[0] if watch else "", "excludeNamespaces": exclude, "extraEnv": env}
    if not kueue:
        operator["kueue"] = {"enabled": False}
    if not kubeflow:
        operator["pytorchJobs"] = False
    if "predictor" not in services:
        operator["predictorURL"] = "http://127.0.0.1:9"  # nothing answers: fallback predictions
    extender: dict[str, Any] = {"seasonSeconds": int(day_seconds), "stepSeconds": max(1.0, day_seconds / 96),
                                "extraEnv": env}
    if not kueue:
        extender["kueueAdmissionCheck"] = {"enabled": False}
    return {
        "prometheusURL": prometheus_url,
        "operator": operator,
        "predictor": {"enabled": "predictor" in services, "extraEnv": env},
        "scheduler": {"enabled": "extender" in services, "extender": extender},
        "evictor": {"enabled": "evictor" in services, "graceSeconds": int(eviction_grace_s), "extraEnv": env},
    }


def _labels(obj: Mapping[str, Any]) -> Mapping[str, str]:
    return (obj.get("metadata") or {}).get("labels") or {}


def deployment(objects: Iterable[Mapping[str, Any]], component: str) -> Mapping[str, Any]:
    """The rendered Deployment of a component (label app.kubernetes.io/component)."""
    found = [o for o in objects if o.get("kind") == "Deployment" and _labels(o).get(COMPONENT_LABEL) == component]
    if len(found) != 1:
        raise ChartRunError(f"the chart rendered {len(found)} Deployments of component {component!r}, not 1")
    return found[0]


def _container(dep: Mapping[str, Any]) -> Mapping[str, Any]:
    containers = dep["spec"]["template"]["spec"].get("containers") or []
    if len(containers) != 1:
        raise ChartRunError(f"Deployment {dep['metadata']['name']} has {len(containers)} containers; one runs here")
    return containers[0]


def declared_ports(objects: Sequence[Mapping[str, Any]], components: Iterable[str]) -> list[str]:
    """`<component>/<port name>` of every container port of those components: the ports to hand out."""
    return [f"{c}/{p['name']}" for c in components for p in _container(deployment(objects, c)).get("ports") or []]


def _port_name(container: Mapping[str, Any], port: int | str) -> str:
    for p in container.get("ports") or []:
        if port in (p.get("name"), p.get("containerPort")):
            return str(p["name"])
    raise ChartRunError(f"container {container.get('name')} declares no port {port!r}")


def service_addresses(objects: Sequence[Mapping[str, Any]], ports: Mapping[str, int]) -> dict[tuple[str, int], int]:
    """(host, Service port) -> local port, for every rendered Service that selects a component with local ports:
    the in-cluster names a client may use for it (`svc`, `svc.ns`, `svc.ns.svc`, `svc.ns.svc.cluster.local`)."""
    components = {key.split("/")[0] for key in ports}
    found: dict[tuple[str, int], int] = {}
    for svc in (o for o in objects if o.get("kind") == "Service"):
        component = (svc["spec"].get("selector") or {}).get(COMPONENT_LABEL)
        if component not in components:
            continue
        container = _container(deployment(objects, component))
        name, ns = svc["metadata"]["name"], svc["metadata"].get("namespace", "")
        for p in svc["spec"].get("ports") or []:
            local = ports[f"{component}/{_port_name(container, p.get('targetPort', p['port']))}"]
            for host in (name, f"{name}.{ns}", f"{name}.{ns}.svc", f"{name}.{ns}.svc.cluster.local"):
                found[(host, int(p["port"]))] = local
    return found


_URL = re.compile(r"(?P<scheme>https?)://(?P<host>[a-z0-9.-]+)(?::(?P<port>\d+))?")


def _local_urls(value: str, addresses: Mapping[tuple[str, int], int]) -> str:
    def swap(m: re.Match[str]) -> str:
        port = int(m["port"] or (443 if m["scheme"] == "https" else 80))
        local = addresses.get((m["host"], port))
        return m[0] if local is None else f"{m['scheme']}://127.0.0.1:{local}"
    return _URL.sub(swap, value)


def _expand(value: str, env: Mapping[str, str]) -> str:
    """Kubernetes' `$(VAR)` references (`$$` escapes); unknown ones stay as written."""
    return re.sub(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)",
                  lambda m: "$" if m[0] == "$$" else env.get(m[1], m[0]), value)


def _find(objects: Iterable[Mapping[str, Any]], kind: str, name: str, namespace: str) -> Mapping[str, Any] | None:
    return next((o for o in objects if o.get("kind") == kind and o["metadata"]["name"] == name
                 and o["metadata"].get("namespace", namespace) == namespace), None)


def _keys(obj: Mapping[str, Any]) -> dict[str, bytes]:
    """A Secret's or ConfigMap's keys and their bytes."""
    if obj["kind"] == "Secret":
        out = {k: base64.b64decode(v) for k, v in (obj.get("data") or {}).items()}
        out.update({k: str(v).encode() for k, v in (obj.get("stringData") or {}).items()})
        return out
    out = {k: str(v).encode() for k, v in (obj.get("data") or {}).items()}
    out.update({k: base64.b64decode(v) for k, v in (obj.get("binaryData") or {}).items()})
    return out


def _source(objects: Sequence[Mapping[str, Any]], kind: str, name: str, namespace: str,
            optional: bool) -> dict[str, bytes]:
    obj = _find(objects, kind, name, namespace)
    if obj is None:
        if optional:
            return {}
        raise ChartRunError(f"{kind} {namespace}/{name} is used by a pod but neither rendered nor given")
    return _keys(obj)


def _env(container: Mapping[str, Any], *, objects: Sequence[Mapping[str, Any]], namespace: str, pod: str,
         service_account: str) -> dict[str, str]:
    fields = {"metadata.namespace": namespace, "metadata.name": pod, "spec.serviceAccountName": service_account,
              "spec.nodeName": "localhost", "status.podIP": "127.0.0.1", "status.hostIP": "127.0.0.1"}
    if container.get("envFrom"):
        raise ChartRunError(f"container {container['name']}: envFrom is not supported here")
    env: dict[str, str] = {}
    for var in container.get("env") or []:
        name, source = var["name"], var.get("valueFrom")
        if source is None:
            env[name] = _expand(str(var.get("value", "")), env)
        elif "fieldRef" in source and source["fieldRef"]["fieldPath"] in fields:
            env[name] = fields[source["fieldRef"]["fieldPath"]]
        elif "secretKeyRef" in source or "configMapKeyRef" in source:
            kind, ref = (("Secret", source["secretKeyRef"]) if "secretKeyRef" in source
                         else ("ConfigMap", source["configMapKeyRef"]))
            data = _source(objects, kind, ref["name"], namespace, bool(ref.get("optional")))
            if ref["key"] in data:
                env[name] = data[ref["key"]].decode()
            elif not ref.get("optional"):
                raise ChartRunError(f"{kind} {ref['name']} has no key {ref['key']!r} (env {name})")
        else:
            raise ChartRunError(f"env {name}: valueFrom {json.dumps(source)} is not supported here")
    return env


def _volumes(pod_spec: Mapping[str, Any], container: Mapping[str, Any], *, objects: Sequence[Mapping[str, Any]],
             namespace: str, root: Path) -> tuple[dict[str, str], list[str], dict[str, tuple[bytes, int]]]:
    """(mountPath -> local dir, dirs to make, files to write) of the container's mounts."""
    volumes = {v["name"]: v for v in pod_spec.get("volumes") or []}
    mounts: dict[str, str] = {}
    dirs: list[str] = []
    files: dict[str, tuple[bytes, int]] = {}
    for mount in container.get("volumeMounts") or []:
        if mount.get("subPath") or mount.get("subPathExpr"):
            raise ChartRunError(f"volume mount {mount['name']}: subPath is not supported here")
        volume = volumes[mount["name"]]
        local = root / volume["name"]
        mounts[mount["mountPath"]] = str(local)
        dirs.append(str(local))
        for kind, key, name_key in (("Secret", "secret", "secretName"), ("ConfigMap", "configMap", "name")):
            if key not in volume:
                continue
            src = volume[key]
            data = _source(objects, kind, src[name_key], namespace, bool(src.get("optional")))
            items = src.get("items") or [{"key": k, "path": k} for k in sorted(data)]
            for item in items:
                if item["key"] not in data:
                    raise ChartRunError(f"{kind} {src[name_key]} has no key {item['key']!r} (volume {volume['name']})")
                files[str(local / item["path"])] = (data[item["key"]], int(item.get("mode", src.get("defaultMode",
                                                                                                     0o644))))
        if not ({"emptyDir", "persistentVolumeClaim", "secret", "configMap"} & set(volume)):
            raise ChartRunError(f"volume {volume['name']}: only emptyDir, claims, Secrets and ConfigMaps run here")
    return mounts, dirs, files


def _localise(value: str, *, mounts: Mapping[str, str], addresses: Mapping[tuple[str, int], int]) -> str:
    """A value as the local process needs it: paths under a mount, Service URLs, the all-interfaces address."""
    flag, eq, rest = value.partition("=") if value.startswith("-") else ("", "", value)
    for path in sorted(mounts, key=len, reverse=True):
        if rest == path or rest.startswith(path.rstrip("/") + "/"):
            rest = mounts[path] + rest[len(path):]
            break
    rest = "127.0.0.1" if rest == "0.0.0.0" else _local_urls(rest, addresses)  # noqa: S104
    return f"{flag}{eq}{rest}"


def _local_port_arg(arg: str, *, container_ports: Mapping[int, int]) -> str:
    """`--…port=N` naming a declared container port -> its local port."""
    flag, eq, value = arg.partition("=")
    if eq and flag.startswith("--") and flag.endswith("port") and value.isdigit() and int(value) in container_ports:
        return f"{flag}={container_ports[int(value)]}"
    return arg


def _mounts_token(pod_spec: Mapping[str, Any], service_account: Mapping[str, Any] | None) -> bool:
    if "automountServiceAccountToken" in pod_spec:
        return bool(pod_spec["automountServiceAccountToken"])
    return bool((service_account or {}).get("automountServiceAccountToken", True))


def process_spec(objects: Sequence[Mapping[str, Any]], component: str, *, ports: Mapping[str, int],
                 volume_root: Path) -> ProcessSpec:
    """The local process of a component's Deployment. `ports`: `<component>/<port name>` -> local port, for every
    component that runs (Service URLs are resolved to them); `objects` also give the Secrets and ConfigMaps."""
    dep = deployment(objects, component)
    namespace = dep["metadata"].get("namespace", "default")
    pod_spec = dep["spec"]["template"]["spec"]
    container = _container(dep)
    if container.get("command") not in (None, ["offpeak"]):
        raise ChartRunError(f"{component}: command {container['command']} is not the image's `offpeak`")
    sa_name = pod_spec.get("serviceAccountName", "default")
    own_ports = {str(p["name"]): ports[f"{component}/{p['name']}"] for p in container.get("ports") or []}
    by_number = {int(p["containerPort"]): own_ports[str(p["name"])] for p in container.get("ports") or []}
    addresses = service_addresses(objects, ports)
    mounts, dirs, files = _volumes(pod_spec, container, objects=objects, namespace=namespace,
                                   root=volume_root / component)
    raw_env = _env(container, objects=objects, namespace=namespace, pod=f"{dep['metadata']['name']}-local",
                   service_account=sa_name)
    env = {k: _localise(v, mounts=mounts, addresses=addresses) for k, v in raw_env.items()}
    argv = tuple(_local_port_arg(_localise(_expand(str(a), raw_env), mounts=mounts, addresses=addresses),
                                 container_ports=by_number) for a in container.get("args") or [])
    probe = container.get("readinessProbe") or container.get("livenessProbe") or {}
    get = probe.get("httpGet")
    if get:
        ready = f"http://127.0.0.1:{own_ports[_port_name(container, get['port'])]}{get.get('path', '/')}"
    else:
        ready = f"http://127.0.0.1:{next(iter(own_ports.values()))}/"
    service_account = _find(objects, "ServiceAccount", sa_name, namespace)
    return ProcessSpec(component=component, namespace=namespace, argv=argv, env=env,
                       service_account=sa_name if _mounts_token(pod_spec, service_account) else None,
                       ports=own_ports, ready_url=ready, dirs=tuple(dirs), files=files)


def service_url(objects: Sequence[Mapping[str, Any]], component: str, *, ports: Mapping[str, int]) -> str:
    """The local URL of a component's own Service (named as its Deployment; the operator has a second one, its status
    server's), its first port: where tests call it."""
    meta = deployment(objects, component)["metadata"]
    name = meta["name"]
    svc = _find(objects, "Service", name, meta.get("namespace", NAMESPACE))
    if svc is None or (svc["spec"].get("selector") or {}).get(COMPONENT_LABEL) != component:
        raise ChartRunError(f"the chart rendered no Service {name} for component {component!r}")
    port = svc["spec"]["ports"][0]
    return f"http://127.0.0.1:{service_addresses(objects, ports)[(name, int(port['port']))]}"


def scrape_targets(objects: Sequence[Mapping[str, Any]], *, ports: Mapping[str, int]) -> dict[str, str]:
    """job -> host:port that the chart's ServiceMonitors scrape (their Service's name is the job, as the Prometheus
    operator names it); only components with local ports."""
    targets: dict[str, str] = {}
    services = {(o["metadata"]["name"]): o for o in objects if o.get("kind") == "Service"}
    addresses = service_addresses(objects, ports)
    for monitor in (o for o in objects if o.get("kind") == "ServiceMonitor"):
        svc = services.get(monitor["metadata"]["name"])
        if svc is None or (svc["spec"].get("selector") or {}).get(COMPONENT_LABEL) not in {
                k.split("/")[0] for k in ports}:
            continue
        (endpoint,) = monitor["spec"]["endpoints"]
        (port,) = [p for p in svc["spec"]["ports"] if p["name"] == endpoint["port"]]
        targets[svc["metadata"]["name"]] = f"127.0.0.1:{addresses[(svc['metadata']['name'], int(port['port']))]}"
    return targets


def identity_objects(objects: Sequence[Mapping[str, Any]], specs: Iterable[ProcessSpec]) -> list[dict[str, Any]]:
    """What gives the local processes their Kubernetes identity and files: every rendered ServiceAccount, Role,
    ClusterRole and binding (the user roles too), and the Secrets and ConfigMaps the processes read."""
    used: set[tuple[str, str]] = set()
    for spec in specs:
        dep = deployment(objects, spec.component)
        pod_spec = dep["spec"]["template"]["spec"]
        for v in pod_spec.get("volumes") or []:
            if "secret" in v:
                used.add(("Secret", v["secret"]["secretName"]))
            if "configMap" in v:
                used.add(("ConfigMap", v["configMap"]["name"]))
        for var in _container(dep).get("env") or []:
            source = var.get("valueFrom") or {}
            for kind, key in (("Secret", "secretKeyRef"), ("ConfigMap", "configMapKeyRef")):
                if key in source:
                    used.add((kind, source[key]["name"]))
    return [dict(o) for o in objects if o.get("kind") in IDENTITY_KINDS
            or (o.get("kind"), o.get("metadata", {}).get("name")) in used]


def token_kubeconfig(*, server: str, ca_file: str, token: str, namespace: str, user: str) -> str:
    """A kubeconfig that authenticates with a bearer token (a ServiceAccount's, in place of in-cluster config)."""
    return yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "local",
        "clusters": [{"name": "local", "cluster": {"server": server, "certificate-authority": ca_file}}],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [{"name": "local", "context": {"cluster": "local", "user": user, "namespace": namespace}}],
    }, sort_keys=False)


# -- I/O ----------------------------------------------------------------------------------------------------------
def render(helm: Path, *, values: Sequence[Path], release: str = RELEASE, namespace: str = NAMESPACE,
           chart: Path = CHART_DIR, kube_version: str | None = None) -> str:
    """`helm template` of the chart (no CRDs: the control plane has them); the manifest text."""
    args = [str(helm), "template", release, str(chart), "--namespace", namespace]
    if kube_version:
        args += ["--kube-version", kube_version]
    for v in values:
        args += ["--values", str(v)]
    proc = subprocess.run(args, capture_output=True, text=True, timeout=120, check=False)
    if proc.returncode != 0:
        raise ChartRunError(f"helm template {chart} failed: {proc.stderr.strip()[-1500:]}")
    return proc.stdout


def parse(manifest: str) -> list[dict[str, Any]]:
    """The objects of a manifest (empty documents dropped)."""
    return [doc for doc in yaml.safe_load_all(manifest) if doc]


def service_account_token(kubeconfig: Path, *, namespace: str, name: str) -> str:
    """A token of a ServiceAccount from the TokenRequest API (as the kubelet gets one for a pod)."""
    from offpeak_e2e import kube  # noqa: PLC0415

    out = kube.kubectl(kubeconfig, "create", "token", name, "-n", namespace, f"--duration={TOKEN_SECONDS}s")
    return out.stdout.strip()


def materialise(spec: ProcessSpec, *, admin_kubeconfig: Path, server: str, ca_file: Path,
                kubeconfig_path: Path) -> dict[str, str]:
    """Make the process's directories and files, and its kubeconfig when it has a ServiceAccount token; its whole
    environment (the container's, PATH, KUBECONFIG)."""
    for d in spec.dirs:
        Path(d).mkdir(parents=True, exist_ok=True)
    for path, (content, mode) in spec.files.items():
        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        if target.exists():
            target.chmod(0o600)
        target.write_bytes(content)
        target.chmod(mode)
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), **spec.env}
    if spec.service_account is not None:
        token = service_account_token(admin_kubeconfig, namespace=spec.namespace, name=spec.service_account)
        kubeconfig_path.parent.mkdir(parents=True, exist_ok=True)
        kubeconfig_path.write_text(token_kubeconfig(
            server=server, ca_file=str(ca_file), token=token, namespace=spec.namespace,
            user=f"system:serviceaccount:{spec.namespace}:{spec.service_account}"))
        kubeconfig_path.chmod(0o600)
        env["KUBECONFIG"] = str(kubeconfig_path)
    return env


def clean_env_wrapper(env: Mapping[str, str]) -> list[str]:
    """A `Supervisor.start` wrapper that runs the command with exactly `env` (`env -i`)."""
    return ["env", "-i", *(f"{k}={v}" for k, v in env.items())]
