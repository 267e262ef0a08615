"""A minimal Dockerfile reader for the image lint checks (we cannot build images here: no Docker engine)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field


@dataclass
class Stage:
    """One `FROM ... AS name` stage and its instructions as (keyword, argument) pairs."""

    image: str
    name: str
    instructions: list[tuple[str, str]] = field(default_factory=list)

    def last(self, keyword: str) -> str | None:
        values = [arg for kw, arg in self.instructions if kw == keyword]
        return values[-1] if values else None


def logical_lines(text: str) -> list[str]:
    """Join backslash continuations, drop comments and blank lines."""
    lines: list[str] = []
    current = ""
    for raw in text.splitlines():
        stripped = raw.strip()
        if not current and (not stripped or stripped.startswith("#")):
            continue
        if current and stripped.startswith("#"):
            continue  # comment inside a continued instruction
        if stripped.endswith("\\"):
            current += stripped[:-1].rstrip() + " "
            continue
        lines.append((current + stripped).strip())
        current = ""
    if current.strip():
        lines.append(current.strip())
    return lines


def parse(text: str) -> tuple[dict[str, str], list[Stage]]:
    """(global ARG defaults, stages) of a Dockerfile."""
    args: dict[str, str] = {}
    stages: list[Stage] = []
    for line in logical_lines(text):
        keyword, _, rest = line.partition(" ")
        keyword = keyword.upper()
        rest = rest.strip()
        if keyword == "ARG" and not stages:
            name, _, default = rest.partition("=")
            args[name.strip()] = default.strip().strip('"')
        elif keyword == "FROM":
            match = re.match(r"^(?:--platform=\S+\s+)?(\S+)(?:\s+AS\s+(\S+))?$", rest, re.IGNORECASE)
            if not match:
                raise ValueError(f"cannot parse FROM {rest!r}")
            stages.append(Stage(image=match.group(1), name=match.group(2) or str(len(stages))))
        elif stages:
            stages[-1].instructions.append((keyword, rest))
    return args, stages


def resolve(image: str, args: dict[str, str]) -> str:
    """Substitute ${ARG} / $ARG defaults in an image reference."""
    return re.sub(r"\$\{?(\w+)\}?", lambda m: args.get(m.group(1), m.group(0)), image)
