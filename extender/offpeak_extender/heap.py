"""The extender's C heap (glibc malloc): one arena for its threads, and freed memory handed back after a refit.

One arena, so a decision does not page its memory back in every time. glibc gives each thread that allocates its
own arena. A decision runs in a worker thread and allocates and frees a few MB of arrays and strings per request; a
thread's own arena hands freed memory back to the kernel between requests, so the next request faults the same
pages in again. Measured (bench/extender_speed.py's store, 5,000
nodes, one filter): 1.5 ms in a worker thread against 0.9 ms in the main thread, and 0.9 ms in the worker once
threads share the main arena. The threads take turns on the GIL anyway, so the lock one arena shares is not felt.

Handed back after a refit: a refit of 1,000 nodes holds ~100 MiB for a moment (the history and the new models),
and freeing it leaves holes among long-lived objects that malloc keeps. bench/extender_soak.py (a refit every 20 s)
ended 21 % above its start, flat from the third refit on; with `trim_heap` after each refit, +7 % (117 -> 126 MiB
instead of 181 -> 219). glibc's `malloc_trim` takes 10-40 ms there, once a refit, in the refresher's thread.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os
import platform

log = logging.getLogger(__name__)

M_ARENA_MAX = -8  # glibc's mallopt parameter: the most arenas threads may be given
ENV = "MALLOC_ARENA_MAX"  # glibc's own switch for the same; an operator who set it keeps their choice


def _glibc() -> ctypes.CDLL | None:
    """The C library when it is glibc (the only one these calls mean anything to), else None."""
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return None
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    except OSError as e:
        log.debug("no C library to load: %s", e)
        return None


def share_main_arena() -> bool:
    """Ask glibc to give threads that allocate from now on no arena of their own (call it before starting threads).

    True when glibc took it; False without glibc (musl, macOS: nothing to do) or when `MALLOC_ARENA_MAX` is set in
    the environment (glibc read it at start-up). Safe to call more than once.
    """
    libc = None if os.environ.get(ENV) else _glibc()
    return libc is not None and bool(libc.mallopt(M_ARENA_MAX, 1))


def trim_heap() -> bool:
    """Hand the heap's free memory back to the kernel (after the refit's garbage is gone); True when some was."""
    libc = _glibc()
    return libc is not None and bool(libc.malloc_trim(0))
