"""The argument parser every `offpeak` command uses: one-line usage errors, `--debug` on every command, and
defaults from OFFPEAK_* environment variables read when a command is parsed, not when the parser is built.

    p.add_argument("--port", type=int, default=env("OFFPEAK_EXTENDER_PORT", 8888))

A variable is read only when its command runs, and converted with the argument's own `type` (or, for a flag, as
a boolean); a bad value is a usage error (exit 2) that names the variable, so it fails that command and no other.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NoReturn

from offpeak.errors import ExitCode, UserError

TRUE_WORDS = frozenset({"1", "true", "yes", "on"})
FALSE_WORDS = frozenset({"0", "false", "no", "off"})


@dataclass(frozen=True, slots=True)
class EnvDefault:
    """A default taken from `$name` when the command runs; `fallback` when it is unset or empty."""

    name: str
    fallback: Any = None

    def __str__(self) -> str:  # what `%(default)s` shows in help
        return str(self.fallback)


def env(name: str, fallback: Any = None) -> Any:
    """An argument default read from `$name` at parse time (typed Any so that it fits any `default=`)."""
    return EnvDefault(name, fallback)


def _flag_value(raw: str) -> bool:
    word = raw.strip().lower()
    if word in TRUE_WORDS:
        return True
    if word in FALSE_WORDS:
        return False
    raise ValueError(f"not one of {', '.join(sorted(TRUE_WORDS | FALSE_WORDS))}")


_WANTED: dict[object, str] = {int: "an integer", float: "a number", _flag_value: "true or false"}


def env_value(action: argparse.Action, default: EnvDefault, environ: Mapping[str, str]) -> Any:
    """The value `default` stands for: the variable converted as the argument would convert it, else the
    fallback. UserError naming the variable when it does not convert."""
    raw = environ.get(default.name, "")
    if raw == "":
        return default.fallback
    flag = isinstance(action, (argparse._StoreTrueAction, argparse._StoreFalseAction,  # noqa: SLF001
                               argparse.BooleanOptionalAction))
    convert: Callable[[str], Any] = _flag_value if flag else (action.type or str)  # type: ignore[assignment]
    where = f"${default.name}={raw!r} (the default of {action.option_strings[0]})"
    try:
        value = convert(raw)
    except (ValueError, TypeError, argparse.ArgumentTypeError) as e:
        wanted = _WANTED.get(convert)
        raise UserError(f"{where} is not {wanted or f'valid: {e}'}; fix or unset {default.name}") from e
    if action.choices is not None and value not in action.choices:
        raise UserError(f"{where} is not one of {', '.join(map(str, action.choices))}; fix or unset {default.name}")
    return value


class Parser(argparse.ArgumentParser):
    """argparse with what every `offpeak` command shares. Sub-parsers are made of the same class."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # SUPPRESS below the top: `offpeak --debug jobs` and `offpeak jobs --debug` both work
        self.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                          help="show the traceback of a failure instead of its one line")
        self.set_defaults(_prog=self.prog)  # the deepest command parsed wins: what error lines start with

    def error(self, message: str) -> NoReturn:
        """One line on stderr and exit 2 (argparse prints the whole usage first)."""
        self.exit(ExitCode.USAGE, f"{self.prog}: error: {message} (see `{self.prog} --help`)\n")

    def parse_known_args(self, args: Sequence[str] | None = None,  # type: ignore[override]
                         namespace: argparse.Namespace | None = None) -> tuple[argparse.Namespace, list[str]]:
        parsed, extras = super().parse_known_args(args, namespace)
        for action in self._actions:
            value = getattr(parsed, action.dest, None)
            if isinstance(value, EnvDefault):
                try:
                    setattr(parsed, action.dest, env_value(action, value, os.environ))
                except UserError as e:
                    self.error(str(e))
        return parsed, extras
