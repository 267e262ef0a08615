"""Parse a request body with what recent requests already parsed: their pods and node-name lists, by JSON text.

kube-scheduler asks about one pod twice in a row (filter, then prioritize, with the same Pod object), again at each
retry of a pod that waits for a window, and sends the same node-name lists over and over. Decoding and checking
5,000 names is ~0.1 ms of a call, and a real Pod object (managed fields, env, volumes) takes longer to decode and
read than the decisions about it. So the body is decoded with its `Pod` and `NodeNames` kept as text, and each is
looked up among the last few seen before it is decoded and checked again. The answer is the one the general path
(`wire.parse_extender_args(wire.loads(raw))`) gives, value for value and error for error (a test holds them equal).
"""

from __future__ import annotations

import threading
from dataclasses import replace
from functools import partial
from typing import Any

import msgspec

from offpeak_extender.wire import (
    ExtenderArgs,
    NamesAndKey,
    PodPart,
    extender_args,
    loads,
    node_names,
    parse_extender_args,
    parse_pod_part,
)


class _Request(msgspec.Struct):
    """An ExtenderArgs body as `parse_request` decodes it: the pod and the node names kept as their JSON text."""

    Pod: msgspec.Raw = msgspec.Raw(b"null")
    Nodes: Any = None
    NodeNames: msgspec.Raw = msgspec.Raw(b"null")


_decode_request = msgspec.json.Decoder(_Request).decode
_NULL = b"null"


class RecentRequests:
    """The pods and node-name lists of recent requests, by their JSON text, as `parse_request` reuses them.

    Name lists: the last `lists` of them, up to `list_bytes` of text in all (a longer one is not kept). A list is
    found by comparing bytes (lengths first, then one memcmp; hashing 90 KiB would cost more), and comes back as the
    same tuple and `list_key`, whose hash the store's columns cache has computed already.
    Pods: the last `pods` of them up to `pod_bytes` each, by their text's hash; each caller gets its own copy of
    the predictions (a caller may change its dict, not the one kept). Thread-safe: the server's workers share it.
    """

    def __init__(self, *, lists: int = 8, list_bytes: int = 8 << 20, pods: int = 256, pod_bytes: int = 64 << 10
                 ) -> None:
        self.lists, self.list_bytes = lists, list_bytes
        self.pods, self.pod_bytes = pods, pod_bytes
        self._lists: list[tuple[bytes, NamesAndKey]] = []  # most recently used first
        self._pods: dict[bytes, PodPart] = {}  # least recently used first
        self._lock = threading.Lock()

    def names(self, text: bytes) -> NamesAndKey:
        """The names of `text` (ExtenderArgs.NodeNames as JSON) and their `list_key`; WireError as `node_names`."""
        with self._lock:
            for i, (kept, names) in enumerate(self._lists):
                if kept == text:
                    if i:
                        self._lists.insert(0, self._lists.pop(i))
                    return names
        names = node_names(loads(text))
        if len(text) <= self.list_bytes:
            with self._lock:
                self._lists.insert(0, (text, names))
                total = 0
                for i, (kept, _) in enumerate(self._lists):
                    total += len(kept)
                    if i >= self.lists or total > self.list_bytes:
                        del self._lists[i:]
                        break
        return names

    def pod(self, text: bytes) -> PodPart:
        """ExtenderArgs.Pod (as JSON) parsed; WireError as `parse_pod_part` (a pod it refuses is not kept)."""
        with self._lock:
            part = self._pods.pop(text, None)
            if part is not None:
                self._pods[text] = part  # now the most recently used
        if part is None:
            part = parse_pod_part(loads(text))
            if len(text) <= self.pod_bytes:
                with self._lock:
                    self._pods[text] = part
                    while len(self._pods) > self.pods:
                        del self._pods[next(iter(self._pods))]
        predicted = part.request.predicted
        return part if predicted is None else part._replace(request=replace(part.request, predicted=dict(predicted)))


def parse_request(raw: str | bytes, recent: RecentRequests) -> ExtenderArgs:
    """`parse_extender_args(loads(raw))`: the same arguments or the same error (`NotJSON` where `loads` refuses the
    body), with the pod and the node names taken from `recent` when they were seen before. Whatever the typed
    decoder refuses (a body that is not an object, or what only `json` takes: NaN, lone surrogates) goes the
    general way."""
    try:
        request = _decode_request(raw)
    except (msgspec.DecodeError, RecursionError):
        return parse_extender_args(loads(raw))
    names = bytes(request.NodeNames)
    return extender_args(partial(recent.pod, bytes(request.Pod)), request.Nodes,
                         None if names == _NULL else partial(recent.names, names))
