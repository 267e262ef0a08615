"""The Kubernetes API as `offpeak jobs` and `offpeak explain` read it: connect as kubectl would (--kubeconfig,
$KUBECONFIG, --context, else in-cluster), read objects as the API's own JSON, and turn every way that fails into
`ConfigError` (exit 3), `Unreachable` (exit 4) or None for an absent object, with what to do in one line.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from offpeak.errors import ConfigError, Unreachable, network_reason

# kubectl waits indefinitely by default; a command a person waits on gives up on a silent server instead
CONNECT_SECONDS = 10.0
READ_SECONDS = 60.0
SERVICE_ACCOUNT_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
HINT = "is the cluster up, and are --context / --kubeconfig the ones you mean?"


@dataclass(frozen=True)
class Cluster:
    """A connection, and the namespace a command works in when no -n is given (the context's, else `default`)."""

    api: client.ApiClient
    namespace: str
    server: str


def _kubeconfig_namespace(kubeconfig: str | None, context: str | None) -> str:
    contexts, active = config.list_kube_config_contexts(config_file=kubeconfig)
    chosen = next((c for c in contexts if c.get("name") == context), None) if context else active
    return str(((chosen or {}).get("context") or {}).get("namespace") or "default")


def _kubeconfig_paths(given: str | None) -> str | None:
    """The kubeconfig file(s) to read, as kubectl picks them: --kubeconfig, else $KUBECONFIG (a list, like PATH),
    else ~/.kube/config when it exists; None when there is none. Read now: the client reads $KUBECONFIG once,
    when it is imported."""
    if given:
        return given
    paths = os.environ.get("KUBECONFIG") or str(Path.home() / ".kube" / "config")
    return paths if any(Path(p).expanduser().is_file() for p in paths.split(os.pathsep) if p) else None


def connect(*, kubeconfig: str | None = None, context: str | None = None) -> Cluster:
    """A connection from `kubeconfig` (else $KUBECONFIG, else ~/.kube/config) and `context`; in a pod without
    either, its service account. ConfigError says which file or context failed and what to pass instead."""
    cfg = client.Configuration()
    if kubeconfig and not Path(kubeconfig).expanduser().is_file():
        raise ConfigError(f"kubeconfig {kubeconfig} does not exist (pass --kubeconfig FILE)")
    files = _kubeconfig_paths(kubeconfig)
    if files or context:
        where = files or "~/.kube/config"
        try:
            config.load_kube_config(config_file=files, context=context, client_configuration=cfg)
            namespace = _kubeconfig_namespace(files, context)
        except config.ConfigException as e:
            if context and f"name {context}" in str(e):
                raise ConfigError(f"no context {context!r} in {where} (`kubectl config get-contexts` lists "
                                  "them)") from e
            raise ConfigError(f"cannot use kubeconfig {where}: {e} (pass --kubeconfig FILE or set KUBECONFIG)") from e
        except (TypeError, ValueError, KeyError, AttributeError, OSError) as e:  # not a kubeconfig at all
            raise ConfigError(f"{where} is not a kubeconfig file ({type(e).__name__}: {e}); pass --kubeconfig "
                              "FILE or set KUBECONFIG") from e
    elif os.environ.get("KUBERNETES_SERVICE_HOST"):
        try:
            config.load_incluster_config(client_configuration=cfg)
        except config.ConfigException as e:
            raise ConfigError(f"cannot use this pod's service account: {e}") from e
        namespace = SERVICE_ACCOUNT_NAMESPACE.read_text().strip() if SERVICE_ACCOUNT_NAMESPACE.is_file() else ""
        namespace = namespace or "default"
    else:
        raise ConfigError("no Kubernetes configuration: ~/.kube/config does not exist and this is not a pod; pass "
                          "--kubeconfig FILE or set KUBECONFIG")
    cfg.retries = 0  # urllib3 would retry a refused connection three times, logging each try on stderr
    return Cluster(api=client.ApiClient(cfg), namespace=namespace, server=str(cfg.host))


def read(cluster: Cluster, call: Callable[..., Any], *args: Any, missing: tuple[int, ...] = (404,),
         **kwargs: Any) -> Any:
    """`call(*args)` of a generated API class, as the API's JSON; None when the server answers a status in
    `missing` (404: no such object). Refusals and silence raise ConfigError / Unreachable."""
    try:
        response = call(*args, **kwargs, _preload_content=False, _request_timeout=(CONNECT_SECONDS, READ_SECONDS))
    except ApiException as e:
        if e.status in missing:
            return None
        if e.status in (401, 403):
            raise ConfigError(f"the API server at {cluster.server} refused: {e.status} {e.reason} ({_message(e)}); "
                              "check the credentials of your context") from e
        raise Unreachable(f"the API server at {cluster.server} answered {e.status} {e.reason} ({_message(e)})") from e
    except (HTTPError, OSError) as e:
        raise Unreachable(f"cannot reach the Kubernetes API server at {cluster.server} ({network_reason(e)}); "
                          f"{HINT}") from e
    try:
        return json.loads(response.data)
    except ValueError as e:
        raise Unreachable(f"the API server at {cluster.server} answered something that is not JSON; {HINT}") from e


def _message(e: ApiException) -> str:
    """The Status message the API server sent with a refusal, else the HTTP reason."""
    try:
        return str(json.loads(e.body or "").get("message") or e.reason)
    except (ValueError, AttributeError):
        return str(e.reason)


def items(listed: Any) -> list[dict[str, Any]]:
    """The `items` of a list answer (none when the list was refused or absent)."""
    return list((listed or {}).get("items") or [])
