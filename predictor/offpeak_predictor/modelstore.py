"""Versioned model files on the predictor's data volume: promote, roll back, keep the last N; and a watcher the
serving process asks which model to serve.

Layout of a store directory (in the chart: `/var/lib/offpeak/models`, on the samples claim):

    models/<version>.json.gz   one file per promoted version (`RuntimeModel.save`)
    pointer.json               {"current", "previous", "history": [oldest ... current], "events": [...]}
    .lock                      serialises writers (a CLI run and the server may share the store)

Every write goes to a temporary file in the same directory, is flushed to disk, then renamed over the old one,
so a crash leaves either the old or the new pointer, never half of one. A model file is written before the
pointer names it. The first promotion into an empty store also stores the model it replaces, so `rollback`
always has a file to go back to. Retention keeps the last `keep` versions of the history (and their files).
"""

from __future__ import annotations

import datetime as dt
import fcntl
import json
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from offpeak_predictor.graphfeatures import GraphSummary
from offpeak_predictor.model import RuntimeModel
from offpeak_predictor.refit import RefitResult, RefitSettings, base_version_of, refit
from offpeak_predictor.train import Progress

POINTER_FORMAT = "offpeak-model-store/v1"
MAX_EVENTS = 50


class ModelStoreError(Exception):
    """The store cannot answer (corrupt pointer, missing model file, nothing to roll back to); says what to do."""


@dataclass(frozen=True, slots=True)
class Pointer:
    """Which version is served, and the versions promoted before it (oldest first; the last is current)."""

    history: tuple[str, ...] = ()
    events: tuple[dict[str, Any], ...] = field(default=())

    @property
    def current(self) -> str | None:
        return self.history[-1] if self.history else None

    @property
    def previous(self) -> str | None:
        return self.history[-2] if len(self.history) > 1 else None

    def to_dict(self) -> dict[str, Any]:
        return {"format": POINTER_FORMAT, "current": self.current, "previous": self.previous,
                "history": list(self.history), "events": list(self.events)}  # fmt: skip


def _safe_name(version: str) -> str:
    """A version as a file name; refuses anything that could leave the models folder."""
    if not version or version in {".", ".."} or "/" in version or "\\" in version or "\0" in version:
        raise ModelStoreError(f"not a usable model version: {version!r}")
    return version


class ModelStore:
    """Model files by version plus one pointer file. `keep`: versions kept (at least 2: current and previous)."""

    def __init__(self, root: str | Path, *, keep: int = 5) -> None:
        if keep < 2:
            raise ValueError("keep must be >= 2 (the current and the previous version)")
        self.root = Path(root)
        self.keep = keep

    @property
    def pointer_path(self) -> Path:
        return self.root / "pointer.json"

    def model_path(self, version: str) -> Path:
        return self.root / "models" / f"{_safe_name(version)}.json.gz"

    # ------------------------------------------------------------------ reading

    def pointer(self) -> Pointer:
        """The pointer; an absent one is an empty store (serve the base model)."""
        try:
            raw = self.pointer_path.read_text()
        except FileNotFoundError:
            return Pointer()
        except OSError as e:
            raise ModelStoreError(f"cannot read the model store pointer {self.pointer_path}: {e}") from e
        try:
            data = json.loads(raw)
            if data.get("format") != POINTER_FORMAT:
                raise ValueError(f"format is {data.get('format')!r}, not {POINTER_FORMAT!r}")
            history = tuple(str(v) for v in data["history"])
            if data.get("current") != (history[-1] if history else None):
                raise ValueError("'current' is not the last entry of 'history'")
            return Pointer(history=history, events=tuple(data.get("events", ())))
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            raise ModelStoreError(
                f"the model store pointer {self.pointer_path} is corrupt ({e}); the predictor keeps serving the "
                f"model it has. Fix the file, or remove it to serve the base model; versions on disk: "
                f"{', '.join(self.versions()) or 'none'}") from e

    def current(self) -> str | None:
        return self.pointer().current

    def versions(self) -> list[str]:
        """Versions with a model file, sorted by name."""
        folder = self.root / "models"
        return sorted(p.name.removesuffix(".json.gz") for p in folder.glob("*.json.gz")) if folder.is_dir() else []

    def load(self, version: str) -> RuntimeModel:
        path = self.model_path(version)
        try:
            return RuntimeModel.load(path)
        except FileNotFoundError as e:
            raise ModelStoreError(f"model {version!r} is named by {self.pointer_path} but {path} is missing; "
                                  f"roll back (`offpeak predictor rollback --store {self.root}`)") from e
        except (ValueError, OSError, KeyError) as e:
            raise ModelStoreError(f"cannot load model {version!r} from {path}: {e}") from e

    # ------------------------------------------------------------------ writing

    def promote(self, candidate: RuntimeModel, *, replaces: RuntimeModel | None = None, reason: str = "",
                now: dt.datetime | None = None) -> Pointer:  # fmt: skip
        """Store the candidate and make it current. `replaces`: the model being served, stored first when the
        store is empty, so that a rollback can return to it."""
        with self._locked():
            pointer = self.pointer()
            history = list(pointer.history)
            if not history and replaces is not None:
                self._write_model(replaces)
                history.append(replaces.version)
            self._write_model(candidate)
            history = [v for v in history if v != candidate.version] + [candidate.version]
            pointer = self._write_pointer(history, pointer, action="promote", version=candidate.version,
                                          reason=reason, now=now)  # fmt: skip
            self._prune(pointer)
            return pointer

    def rollback(self, *, reason: str = "", now: dt.datetime | None = None) -> Pointer:
        """Serve the previous version again; the current one is dropped from the history (its file is pruned)."""
        with self._locked():
            pointer = self.pointer()
            if pointer.previous is None:
                raise ModelStoreError(f"nothing to roll back to: the store {self.root} has "
                                      f"{'no promoted version' if not pointer.history else 'one version only'}")
            if not self.model_path(pointer.previous).exists():
                raise ModelStoreError(f"cannot roll back to {pointer.previous!r}: {self.model_path(pointer.previous)} "
                                      "is missing")  # fmt: skip
            dropped = pointer.current
            pointer = self._write_pointer(list(pointer.history[:-1]), pointer, action="rollback",
                                          version=pointer.previous, reason=reason or f"rolled back from {dropped}",
                                          now=now)  # fmt: skip
            self._prune(pointer)
            return pointer

    def _write_model(self, model: RuntimeModel) -> None:
        path = self.model_path(model.version)
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            _atomic_write(path, lambda tmp: model.save(tmp))

    def _write_pointer(self, history: list[str], old: Pointer, *, action: str, version: str, reason: str,
                       now: dt.datetime | None) -> Pointer:  # fmt: skip
        at = (now or dt.datetime.now(dt.UTC)).astimezone(dt.UTC).isoformat()
        event = {"at": at, "action": action, "version": version, "reason": reason}
        pointer = Pointer(history=tuple(history[-self.keep:]), events=(*old.events, event)[-MAX_EVENTS:])
        text = json.dumps(pointer.to_dict(), indent=1)
        _atomic_write(self.pointer_path, lambda tmp: Path(tmp).write_text(text))
        return pointer

    def _prune(self, pointer: Pointer) -> None:
        """Delete model files the history no longer names (retention)."""
        for version in self.versions():
            if version not in pointer.history:
                self.model_path(version).unlink(missing_ok=True)

    @contextmanager
    def _locked(self) -> Iterator[None]:
        self.root.mkdir(parents=True, exist_ok=True)
        with open(self.root / ".lock", "a") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)


def _atomic_write(path: Path, write: Any) -> None:
    """`write(tmp_path)` into a temporary file beside `path`, fsync it, rename it over `path`, fsync the folder."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        write(tmp)
        with open(tmp, "rb+") as handle:
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


class ModelWatcher:
    """Tells the serving process which model to serve: the store's current version, or its base model.

    The base model is what the predictor was started with (`--model`, else the shipped one). A stored version
    re-fitted from another base (e.g. the image was upgraded with a new shipped model since) is not served: the
    new base wins. `reload_if_changed()` is cheap when nothing changed (one small file read); call it
    periodically or after a refit/rollback request, outside the predictor's lock, and swap the model it returns.
    """

    def __init__(self, store: ModelStore, *, base: RuntimeModel) -> None:
        self.store = store
        self.base = base
        self.serving = base.version

    def wanted(self) -> str:
        """The version that should be served now (raises ModelStoreError when the pointer is unreadable)."""
        current = self.store.current()
        if current is None or base_version_of(current) != base_version_of(self.base.version):
            return self.base.version
        return current

    def reload_if_changed(self) -> RuntimeModel | None:
        """The model to serve when it differs from the one served, else None. On a ModelStoreError the served
        model stays as it is (the caller logs the error)."""
        wanted = self.wanted()
        if wanted == self.serving:
            return None
        model = self.base if wanted == self.base.version else self.store.load(wanted)
        self.serving = wanted
        return model


def refit_into_store(*, serving: RuntimeModel, samples: pd.DataFrame, store: ModelStore, now: dt.datetime,
                     settings: RefitSettings = RefitSettings(), dry_run: bool = False,
                     replay: tuple[pd.DataFrame, list[GraphSummary]] | None = None,
                     progress: Progress | None = None) -> RefitResult:  # fmt: skip
    """Re-fit from the samples, shadow-evaluate, and promote the candidate into the store when it is not worse
    (unless `dry_run`). The serving process then picks it up through its `ModelWatcher`."""
    result = refit(serving=serving, samples=samples, now=now, settings=settings, replay=replay, progress=progress)
    if result.decision.promote and result.candidate is not None and not dry_run:
        store.promote(result.candidate, replaces=serving, reason=result.decision.reason, now=now)
    return result
