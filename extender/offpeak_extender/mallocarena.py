"""One malloc arena for the extender's threads (glibc), so a decision does not page its memory back in every time.

glibc gives each thread that allocates its own arena. A decision runs in a worker thread and allocates and frees a
few MB of arrays and strings per request; a thread's own arena hands freed memory back to the kernel between
requests, so the next request faults the same pages in again. Measured (bench/extender_speed.py's store, 5,000
nodes, one filter): 1.5 ms in a worker thread against 0.9 ms in the main thread, and 0.9 ms in the worker once
threads share the main arena. The threads take turns on the GIL anyway, so the lock one arena shares is not felt.
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


def share_main_arena() -> bool:
    """Ask glibc to give threads that allocate from now on no arena of their own (call it before starting threads).

    True when glibc took it; False without glibc (musl, macOS: nothing to do) or when `MALLOC_ARENA_MAX` is set in
    the environment (glibc read it at start-up). Safe to call more than once.
    """
    if os.environ.get(ENV) or platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        return bool(libc.mallopt(M_ARENA_MAX, 1))
    except (OSError, AttributeError) as e:  # no libc to load, or one without mallopt
        log.debug("mallopt(M_ARENA_MAX) unavailable: %s", e)
        return False
