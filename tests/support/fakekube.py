"""A Kubernetes API server that answers list calls from objects held in memory, on loopback: what `offpeak jobs`
and `offpeak explain` read, with namespaces, `metadata.name` field selectors and `k=v` label selectors. Kinds
not given answer 404 (a cluster without that CRD); `refuse` makes a kind answer 403."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from aiohttp import web

from support.loopback import served

Objects = Mapping[str, Sequence[Mapping[str, Any]]]  # "group/version/plural" ("v1/pods" for the core) -> objects


def _selected(obj: Mapping[str, Any], *, namespace: str | None, fields: str, labels: str) -> bool:
    meta = obj.get("metadata") or {}
    if namespace is not None and meta.get("namespace") != namespace:
        return False
    for term in filter(None, fields.split(",")):
        key, _, value = term.partition("=")
        if key == "metadata.name" and meta.get("name") != value:
            return False
    have = meta.get("labels") or {}
    return all(have.get(k) == v for k, _, v in (t.partition("=") for t in filter(None, labels.split(","))))


def app(objects: Objects, *, refuse: Sequence[str] = ()) -> web.Application:
    async def listing(request: web.Request) -> web.Response:
        info = request.match_info
        resource = "/".join(filter(None, (info.get("group"), info["version"], info["plural"])))
        if resource in refuse:
            return web.json_response({"kind": "Status", "message": f"{resource} is forbidden: User cannot list"},
                                     status=403)  # fmt: skip
        if resource not in objects:
            return web.json_response({"kind": "Status", "message": "the server could not find the requested "
                                      "resource"}, status=404)  # fmt: skip
        items = [o for o in objects[resource]
                 if _selected(o, namespace=info.get("namespace"), fields=request.query.get("fieldSelector", ""),
                              labels=request.query.get("labelSelector", ""))]  # fmt: skip
        return web.json_response({"kind": "List", "items": items})

    application = web.Application()
    application.router.add_get("/api/{version}/{plural}", listing)
    application.router.add_get("/api/{version}/namespaces/{namespace}/{plural}", listing)
    application.router.add_get("/apis/{group}/{version}/{plural}", listing)
    application.router.add_get("/apis/{group}/{version}/namespaces/{namespace}/{plural}", listing)
    return application


def kubeconfig(path: Path, *, port: int, namespace: str = "team", context: str = "fake") -> Path:
    """A kubeconfig whose current context talks to http://127.0.0.1:port as a token user."""
    path.write_text(f"""apiVersion: v1
kind: Config
clusters: [{{name: fake, cluster: {{server: "http://127.0.0.1:{port}"}}}}]
users: [{{name: me, user: {{token: t0ken}}}}]
contexts: [{{name: {context}, context: {{cluster: fake, user: me, namespace: {namespace}}}}}]
current-context: {context}
""")
    return path


@contextmanager
def fake_cluster(objects: Objects, path: Path, *, refuse: Sequence[str] = ()) -> Iterator[Path]:
    """Serve `objects` until the block ends; yields a kubeconfig for it (context `fake`, namespace `team`)."""
    with served(app(objects, refuse=refuse)) as port:
        yield kubeconfig(path, port=port)
