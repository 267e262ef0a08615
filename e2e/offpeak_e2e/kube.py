"""Thin adapters over the API server, `kubectl` and HTTPS health checks used while bringing the cluster up and in
tests. Reads (`get_json`, every poll of a wait) go through the Python client in this process; `kubectl` is forked
only for what a user would type (apply with its client-side validation messages, label, cordon, scale, ...)."""

from __future__ import annotations

import json
import shutil
import ssl
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml


class KubeError(RuntimeError):
    """kubectl failed or a wait timed out."""


def kubectl_path() -> str:
    exe = shutil.which("kubectl")
    if exe is None:
        raise KubeError("kubectl is not installed (need kubectl 1.32 on PATH)")
    return exe


def kubectl(kubeconfig: Path, *args: str, stdin: str | None = None, timeout: float = 60.0,
            check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run kubectl against the local cluster; raise KubeError with its stderr on failure when `check`."""
    proc = subprocess.run(
        [kubectl_path(), f"--kubeconfig={kubeconfig}", *args], input=stdin, capture_output=True, text=True,
        timeout=timeout, check=False,
    )
    if check and proc.returncode != 0:
        raise KubeError(f"kubectl {' '.join(args)}: {proc.stderr.strip() or proc.stdout.strip()}")
    return proc


def apply(kubeconfig: Path, objects: Sequence[dict[str, Any]] | str, *, server_side: bool = True) -> None:
    """Apply manifests (objects or YAML text)."""
    text = objects if isinstance(objects, str) else yaml.safe_dump_all(list(objects), sort_keys=False)
    args = ["apply", "-f", "-"]
    if server_side:
        args += ["--server-side", "--force-conflicts", "--field-manager=offpeak-e2e"]
    kubectl(kubeconfig, *args, stdin=text, timeout=120)


def get_json(kubeconfig: Path, *args: str) -> dict[str, Any]:
    """What `kubectl get ARGS -o json` prints, read through the Python client (no process forked)."""
    return reader(kubeconfig).get(*args)


@dataclass(frozen=True)
class Resource:
    """A served resource type: where its objects are and whether they live in namespaces."""

    group: str
    version: str
    plural: str
    namespaced: bool

    def path(self, *, namespace: str | None, name: str | None = None) -> str:
        base = f"/api/{self.version}" if not self.group else f"/apis/{self.group}/{self.version}"
        parts = [base, *(["namespaces", namespace] if self.namespaced and namespace else []), self.plural]
        return "/".join([*parts, *([name] if name else [])])


@dataclass(frozen=True)
class GetArgs:
    """The arguments of a `kubectl get` the tests use: RESOURCE [NAME] [-n NS | -A] [-l SEL] [--field-selector F]."""

    resource: str
    name: str | None = None
    namespace: str | None = None
    all_namespaces: bool = False
    selector: str | None = None
    field_selector: str | None = None

    @classmethod
    def parse(cls, args: Sequence[str]) -> GetArgs:
        flags = {"-n": "namespace", "--namespace": "namespace", "-l": "selector", "--selector": "selector",
                 "--field-selector": "field_selector"}
        values: dict[str, Any] = {}
        positional: list[str] = []
        it = iter(args)
        for arg in it:
            key, _, inline = arg.partition("=")
            if key in flags:
                values[flags[key]] = inline if inline else next(it)
            elif arg in ("-A", "--all-namespaces"):
                values["all_namespaces"] = True
            elif arg.startswith("-"):
                raise KubeError(f"get: unsupported flag {arg}")
            else:
                positional.append(arg)
        if not 1 <= len(positional) <= 2:
            raise KubeError(f"get: expected RESOURCE [NAME], got {positional}")
        resource, name = positional[0], positional[1] if len(positional) == 2 else None
        if "/" in resource and name is None:
            resource, name = resource.split("/", 1)
        return cls(resource=resource, name=name, **values)


class Reader:
    """Reads objects the way `kubectl get -o json` shows them, with one API client per kubeconfig. Resource names
    are resolved as kubectl does (plural, singular, short name, `plural.group`) from the server's discovery,
    read again when a name is unknown (a CRD installed since)."""

    def __init__(self, kubeconfig: Path) -> None:
        from kubernetes import config  # noqa: PLC0415 - the client is heavy; only readers need it

        self.kubeconfig = kubeconfig
        self.api = config.new_client_from_config(config_file=str(kubeconfig))
        self._names: dict[str, Resource] = {}
        self._default_namespace = _context_namespace(kubeconfig)

    def raw(self, path: str, query: Sequence[tuple[str, str]] = ()) -> dict[str, Any]:
        """GET `path` and parse the JSON; KubeError with the server's message on an error status."""
        method, url, headers, body, post = self.api.param_serialize(
            "GET", path, query_params=list(query), header_params={"Accept": "application/json"},
            auth_settings=["BearerToken"])
        try:
            response = self.api.call_api(method, url, headers, body, post, _request_timeout=30)
            data = response.read()
        except Exception as e:  # noqa: BLE001 - urllib3's connection errors: the server is not answering
            raise KubeError(f"GET {path}: {e}") from e
        if not 200 <= response.status < 300:
            message = response.reason
            try:
                message = json.loads(data).get("message") or message
            except (TypeError, ValueError):
                pass
            raise KubeError(f"GET {path}: {response.status} {message}")
        return dict(json.loads(data))

    def _discover(self) -> None:
        names: dict[str, Resource] = {}
        groups = [("", "v1")] + [
            (g["name"], g["preferredVersion"]["version"]) for g in self.raw("/apis").get("groups", [])]
        for group, version in groups:
            base = "/api/v1" if not group else f"/apis/{group}/{version}"
            try:
                listed = self.raw(base).get("resources", [])
            except KubeError:
                continue  # an aggregated API that is not answering
            for r in listed:
                if "/" in r["name"]:
                    continue  # a subresource
                res = Resource(group=group, version=version, plural=r["name"], namespaced=bool(r["namespaced"]))
                keys = [r["name"], r.get("singularName") or r["kind"].lower(), *(r.get("shortNames") or [])]
                for key in keys:
                    names.setdefault(key, res)  # the core group first, as kubectl prefers it
                    if group:
                        names[f"{key}.{group}"] = res
        self._names = names

    def resource(self, name: str) -> Resource:
        if name not in self._names:
            self._discover()
        if name not in self._names:
            raise KubeError(f'the server doesn\'t have a resource type "{name}"')
        return self._names[name]

    def get(self, *args: str) -> dict[str, Any]:
        a = GetArgs.parse(args)
        res = self.resource(a.resource)
        namespace = None if a.all_namespaces or not res.namespaced else (a.namespace or self._default_namespace)
        query = [(k, v) for k, v in (("labelSelector", a.selector), ("fieldSelector", a.field_selector)) if v]
        return self.raw(res.path(namespace=namespace, name=a.name), query)


def _context_namespace(kubeconfig: Path) -> str:
    try:
        config = yaml.safe_load(kubeconfig.read_text()) or {}
    except (OSError, yaml.YAMLError):
        return "default"
    current = config.get("current-context")
    for context in config.get("contexts") or []:
        if context.get("name") == current:
            return str((context.get("context") or {}).get("namespace") or "default")
    return "default"


_READERS: dict[tuple[Path, int], Reader] = {}
_READERS_LOCK = threading.Lock()


def reader(kubeconfig: Path) -> Reader:
    """The shared Reader of a kubeconfig (one client, one discovery cache, per process); a kubeconfig written anew
    (a cluster of the same name started again) gets a new one."""
    path = Path(kubeconfig)
    key = (path, path.stat().st_mtime_ns)
    with _READERS_LOCK:
        if key not in _READERS:
            _READERS[key] = Reader(path)
        return _READERS[key]


def wait_for(what: str, predicate: Callable[[], bool], *, timeout: float, interval: float = 0.5) -> float:
    """Poll `predicate` until true; return seconds waited; raise KubeError naming `what` on timeout."""
    start = time.monotonic()
    last_error: Exception | None = None
    while time.monotonic() - start < timeout:
        try:
            if predicate():
                return time.monotonic() - start
        except Exception as e:  # noqa: BLE001 - a probe failing just means "not yet"
            last_error = e
        time.sleep(interval)
    detail = f" (last error: {last_error})" if last_error else ""
    raise KubeError(f"timed out after {timeout:.0f}s waiting for {what}{detail}")


def https_ok(url: str, *, ca: Path, cert: Path, key: Path, timeout: float = 2.0) -> bool:
    """Whether GET `url` answers 200 using the admin client certificate."""
    ctx = ssl.create_default_context(cafile=str(ca))
    ctx.load_cert_chain(str(cert), str(key))
    try:
        with urllib.request.urlopen(url, context=ctx, timeout=timeout) as r:  # noqa: S310 - local URL
            return r.status == 200
    except (urllib.error.URLError, OSError):
        return False


def http_ok(url: str, *, timeout: float = 2.0) -> bool:
    """Whether GET `url` answers 2xx (plain HTTP, loopback services)."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:  # noqa: S310 - local URL
            return 200 <= r.status < 300
    except (urllib.error.URLError, OSError):
        return False


def insecure_https_ok(url: str, *, timeout: float = 2.0) -> bool:
    """Whether a component's self-signed HTTPS health endpoint answers 200 (kube-scheduler, controller-manager)."""
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    try:
        with urllib.request.urlopen(url, context=ctx, timeout=timeout) as r:  # noqa: S310 - local URL
            return r.status == 200
    except (urllib.error.URLError, OSError):
        return False
