"""What a long command shows while it works: a rich spinner on stderr that says the current step, only when
stderr is a terminal, so that piped or captured output stays exactly the answer."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any


@contextmanager
def steps(first: str, *, console: Any = None) -> Iterator[Callable[[str], None]]:
    """Show `first`, then each step the yielded callable is given, until the block ends (then nothing remains).

    `console`: a rich Console (default: stderr's); nothing is drawn unless it is a terminal."""
    from rich.console import Console  # noqa: PLC0415

    console = console or Console(stderr=True)
    if not console.is_terminal:
        yield lambda text: None
        return
    with console.status(first) as status:
        yield lambda text: status.update(text)
