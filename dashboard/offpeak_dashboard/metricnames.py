"""Metric names on both sides: used in PromQL, and defined in offpeak's Python code.

A dashboard query over a metric nobody exports shows "No data" forever and nobody notices; comparing the two
sets catches renames in any component.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

PREFIX = "offpeak_"
_PROMQL_NAME = re.compile(r"(?<![A-Za-z0-9_:\"'])(offpeak_[A-Za-z0-9_:]*)(?![A-Za-z0-9_:(])")
_STRING = re.compile(r"\"(?:[^\"\\]|\\.)*\"|'(?:[^'\\]|\\.)*'")

# prometheus-client constructors and the series each kind exposes.
_SUFFIXES: dict[str, tuple[str, ...]] = {
    "Counter": ("_total", "_created"),
    "CounterMetricFamily": ("_total", "_created"),
    "Gauge": ("",),
    "GaugeMetricFamily": ("",),
    "Histogram": ("_bucket", "_sum", "_count", "_created"),
    "HistogramMetricFamily": ("_bucket", "_sum", "_count", "_created"),
    "Summary": ("", "_sum", "_count", "_created"),
    "SummaryMetricFamily": ("", "_sum", "_count", "_created"),
    "Info": ("_info",),
    "InfoMetricFamily": ("_info",),
    "Enum": ("",),
    "StateSetMetricFamily": ("",),
}


@dataclass(frozen=True)
class Definition:
    """A metric defined in code: its base name, kind, and where."""

    name: str
    kind: str
    path: str
    line: int

    def series(self) -> set[str]:
        """The series names Prometheus will scrape for this metric."""
        base = self.name
        if self.kind.startswith("Counter") and base.endswith("_total"):
            base = base[: -len("_total")]
        if self.kind.startswith("Info") and base.endswith("_info"):
            base = base[: -len("_info")]
        return {base + suffix for suffix in _SUFFIXES[self.kind]}


def promql_metric_names(expr: str) -> set[str]:
    """offpeak metric names used in a PromQL expression (label values and strings are ignored)."""
    without_strings = _STRING.sub('""', expr)
    return set(_PROMQL_NAME.findall(without_strings))


def _callee(node: ast.Call) -> str:
    func = node.func
    if isinstance(func, ast.Attribute):
        return func.attr
    if isinstance(func, ast.Name):
        return func.id
    return ""


def _string_constants(tree: ast.Module) -> dict[str, str]:
    """Module- and class-level `NAME = "literal"` assignments, so `Counter(EVICTIONS, ...)` resolves."""
    found: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    found[target.id] = node.value.value
        elif (
            isinstance(node, ast.AnnAssign)
            and isinstance(node.target, ast.Name)
            and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)
        ):
            found[node.target.id] = node.value.value
    return found


def _resolve(node: ast.expr | None, constants: dict[str, str]) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.Name):
        return constants.get(node.id)
    return None


def _full_name(call: ast.Call, constants: dict[str, str]) -> str | None:
    keywords = {kw.arg: kw.value for kw in call.keywords if kw.arg}
    name = _resolve(call.args[0] if call.args else keywords.get("name"), constants)
    if name is None:
        return None
    parts = [
        _resolve(keywords.get("namespace"), constants) or "",
        _resolve(keywords.get("subsystem"), constants) or "",
        name,
    ]
    return "_".join(p for p in parts if p)


def definitions_in_source(source: str, *, path: str = "<string>") -> list[Definition]:
    """Metrics defined with prometheus-client constructors in one Python source file."""
    tree = ast.parse(source, filename=path)
    constants = _string_constants(tree)
    found: list[Definition] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        kind = _callee(node)
        if kind not in _SUFFIXES:
            continue
        name = _full_name(node, constants)
        if name and name.startswith(PREFIX):
            found.append(Definition(name=name, kind=kind, path=path, line=node.lineno))
    return found


def definitions_in_tree(roots: Iterable[Path]) -> list[Definition]:
    """Metrics defined in every `*.py` file under the given folders (tests excluded: they define fakes)."""
    found: list[Definition] = []
    for root in roots:
        for path in sorted(root.rglob("*.py")):
            if "tests" in path.parts or "__pycache__" in path.parts:
                continue
            try:
                source = path.read_text(encoding="utf-8")
                found.extend(definitions_in_source(source, path=str(path)))
            except (SyntaxError, UnicodeDecodeError):
                continue  # a half-written file of another component must not break this check
    return found


def exported_series(definitions: Iterable[Definition]) -> set[str]:
    """Every series name the given definitions produce."""
    series: set[str] = set()
    for definition in definitions:
        series |= definition.series()
    return series


def undefined_names(queries: Iterable[tuple[str, str]], series: set[str]) -> dict[str, set[str]]:
    """{panel title: names used in its queries that no code exports}."""
    missing: dict[str, set[str]] = {}
    for title, expr in queries:
        unknown = promql_metric_names(expr) - series
        if unknown:
            missing.setdefault(title, set()).update(unknown)
    return missing
