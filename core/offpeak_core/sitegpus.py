"""A site's own GPU types, beside the built-in catalogue: GPUs offpeak does not ship figures for.

A cluster with a GPU the predictor's catalogue lacks (a new generation, a regional part) names it in one JSON
file, given to every component by ``$OFFPEAK_GPU_CATALOGUE`` (the chart writes it from its ``gpuCatalogue`` value): its
spec-sheet figures, the names it goes by and the ``nvidia.com/gpu.product`` values GPU feature discovery writes for
it. The predictor prices the new type from those figures (and from the rows ``offpeak collect`` measures on it),
the operator accepts it in ``gpuTypes``, and the extender and operator read it off GFD's node labels.

```json
{"gpus": [{"name": "RTX-PRO-6000-Blackwell",
           "aliases": ["NVIDIA RTX PRO 6000 Blackwell Server Edition"],
           "gfd_products": ["NVIDIA-RTX-PRO-6000-Blackwell-Server-Edition"],
           "vendor": "nvidia", "sm_count": 188, "boost_clock_mhz": 2617, "memory_bandwidth_gbs": 1792,
           "memory_gb": 96, "l2_mb": 128, "fp32_tflops": 120, "fp16_tflops": 500}]}
```

`name` is Kubernetes-label-safe (what predictions, ``gpuTypes`` and ``offpeak.io/gpu-type`` use); ``vendor`` is
nvidia (default) or amd; ``fp16_tflops`` is the dense tensor-core peak; optional ``bf16_tflops`` and
``tf32_tflops`` default to the fp16 and fp32 figures.

Parsing is pure (`parse_site_catalogue`); `site_catalogue()` reads the file the environment names, once per change
of the file. A bad file is a `UserError` that names the file, the entry and the field: a component refuses to start
rather than guess a GPU's speed.
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from offpeak_core.errors import UserError

log = logging.getLogger(__name__)
CATALOGUE_ENV = "OFFPEAK_GPU_CATALOGUE"
_LABEL_SAFE = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9.-]{0,61}[A-Za-z0-9])?$")  # as the built-in names
# GFD writes the NVML name with spaces as dashes: a label value, at most 63 characters
_PRODUCT = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?$")
REQUIRED_NUMBERS: tuple[str, ...] = (
    "sm_count", "boost_clock_mhz", "memory_bandwidth_gbs", "memory_gb", "l2_mb", "fp32_tflops", "fp16_tflops",
)  # fmt: skip
OPTIONAL_NUMBERS: tuple[str, ...] = ("bf16_tflops", "tf32_tflops", "cores_per_sm", "year", "tdp_watts")
_KNOWN_KEYS = frozenset({"name", "aliases", "gfd_products", "vendor", "architecture", *REQUIRED_NUMBERS,
                         *OPTIONAL_NUMBERS})  # fmt: skip
MAX_ENTRIES = 256


@dataclass(frozen=True, slots=True)
class SiteGpu:
    """One site GPU: `spec` holds the catalogue fields (as the built-in `data/gpus.json` names them) as sorted
    (field, value) pairs, so a catalogue is hashable and a changed figure makes another catalogue."""

    name: str
    aliases: tuple[str, ...]
    gfd_products: tuple[str, ...]
    spec: tuple[tuple[str, Any], ...]

    def fields(self) -> dict[str, Any]:
        return dict(self.spec)


@dataclass(frozen=True, slots=True)
class SiteCatalogue:
    source: str = ""  # the file it came from ("" = none configured)
    gpus: tuple[SiteGpu, ...] = ()

    def gfd_map(self) -> dict[str, str]:
        """GFD product label -> site GPU name."""
        return {product: gpu.name for gpu in self.gpus for product in gpu.gfd_products}


EMPTY = SiteCatalogue()


def parse_site_catalogue(text: str, *, source: str) -> SiteCatalogue:
    """Validate a site catalogue (JSON: an object with a `gpus` list, or the list itself)."""
    try:
        raw = json.loads(text)
    except ValueError as e:
        raise UserError(f"GPU catalogue {source}: not JSON: {e}") from None
    entries = raw.get("gpus") if isinstance(raw, dict) else raw
    if not isinstance(entries, list):
        raise UserError(f"GPU catalogue {source}: expected a list of GPUs under 'gpus'")
    if len(entries) > MAX_ENTRIES:
        raise UserError(f"GPU catalogue {source}: {len(entries)} GPUs, at most {MAX_ENTRIES}")
    gpus: list[SiteGpu] = []
    seen: dict[str, str] = {}
    for i, entry in enumerate(entries):
        gpu = _entry(entry, where=f"GPU catalogue {source}: gpus[{i}]")
        for key in (gpu.name, *gpu.aliases, *gpu.gfd_products):
            if key.lower() in seen:
                raise UserError(f"GPU catalogue {source}: {key!r} names both {seen[key.lower()]} and {gpu.name}")
            seen[key.lower()] = gpu.name
        gpus.append(gpu)
    return SiteCatalogue(source=source, gpus=tuple(gpus))


def _entry(entry: Any, *, where: str) -> SiteGpu:
    if not isinstance(entry, dict):
        raise UserError(f"{where}: expected a mapping of a GPU's figures")
    unknown = sorted(set(map(str, entry)) - _KNOWN_KEYS)
    if unknown:
        raise UserError(f"{where}: unknown field(s) {', '.join(unknown)}")
    name = entry.get("name")
    if not isinstance(name, str) or not _LABEL_SAFE.match(name):
        raise UserError(f"{where}.name: {name!r} is not a Kubernetes-label-safe name (letters, digits, '-', '.')")
    where = f"{where} ({name})"
    spec: dict[str, Any] = {"name": name}
    for key in REQUIRED_NUMBERS:
        if key not in entry:
            raise UserError(f"{where}: {key} is required")
    for key in (*REQUIRED_NUMBERS, *OPTIONAL_NUMBERS):
        if key in entry:
            value = entry[key]
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
                    or value <= 0:  # fmt: skip
                raise UserError(f"{where}.{key}: {value!r} is not a positive number")
            spec[key] = float(value)
    vendor = entry.get("vendor", "nvidia")
    if vendor not in ("nvidia", "amd"):
        raise UserError(f"{where}.vendor: {vendor!r} is not nvidia or amd")
    spec["vendor"] = vendor
    spec["architecture"] = str(entry.get("architecture") or "site")
    aliases = _strings(entry.get("aliases", []), where=f"{where}.aliases")
    products = _strings(entry.get("gfd_products", []), where=f"{where}.gfd_products")
    for product in products:
        if not _PRODUCT.match(product) or "-MIG-" in product:
            raise UserError(f"{where}.gfd_products: {product!r} is not a GFD product label value (whole GPUs only)")
    return SiteGpu(name=name, aliases=aliases, gfd_products=products, spec=tuple(sorted(spec.items())))


def _strings(value: Any, *, where: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value):
        raise UserError(f"{where}: expected a list of names")
    return tuple(v.strip() for v in value)


_cache: dict[tuple[str, float], SiteCatalogue] = {}
_last_good: dict[str, SiteCatalogue] = {}


def site_catalogue() -> SiteCatalogue:
    """The catalogue `$OFFPEAK_GPU_CATALOGUE` names (EMPTY when unset); re-read when the file changes.

    A file that cannot be read or parsed is a UserError the first time (a component checks at start and refuses to
    run); once a good version was read, a later broken edit keeps the good one in use and logs why, so a running
    scheduler extender never loses its GPU types to a typo.
    """
    path = os.environ.get(CATALOGUE_ENV, "").strip()
    if not path:
        return EMPTY
    try:
        key = (path, Path(path).stat().st_mtime)
        if key not in _cache:
            parsed = parse_site_catalogue(Path(path).read_text(encoding="utf-8"), source=path)
            _cache.clear()
            _cache[key] = _last_good[path] = parsed
        return _cache[key]
    except (OSError, UserError) as e:
        reason = f"GPU catalogue {path} (${CATALOGUE_ENV}): {e.strerror or e}" if isinstance(e, OSError) else str(e)
        if path in _last_good:
            log.warning("%s; keeping the catalogue read before", reason)
            return _last_good[path]
        raise UserError(reason) from None
