"""The extender's worker threads allocate in glibc's main arena (`offpeak_extender.heap`).

Counted with glibc's own `malloc_info` (one `<heap nr=...>` per arena) in a fresh interpreter, after a thread has
allocated and freed a few MB as a decision does: two arenas without `share_main_arena`, one with it.
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys

import pytest

from offpeak_extender.heap import share_main_arena

PROBE = r"""
import ctypes, os, sys, tempfile, threading
from offpeak_extender.heap import share_main_arena
took = share_main_arena() if sys.argv[1] == "share" else None
def decide():  # what a decision does to the heap: a few MB allocated and freed
    blobs = [bytearray(200_000) for _ in range(20)]
    del blobs
worker = threading.Thread(target=decide)
worker.start()
worker.join()
libc = ctypes.CDLL("libc.so.6")
libc.fopen.restype = ctypes.c_void_p
fd, path = tempfile.mkstemp()
os.close(fd)
out = libc.fopen(path.encode(), b"w")
libc.malloc_info(0, ctypes.c_void_p(out))
libc.fclose(ctypes.c_void_p(out))
print(took, open(path).read().count("<heap nr="))
os.unlink(path)
"""

glibc_only = pytest.mark.skipif(platform.system() != "Linux" or platform.libc_ver()[0] != "glibc",
                                reason="arenas are glibc's; elsewhere share_main_arena does nothing")


def arenas_after_a_thread(mode: str) -> tuple[str, int]:
    env = {k: v for k, v in os.environ.items() if k != "MALLOC_ARENA_MAX"}
    out = subprocess.run([sys.executable, "-c", PROBE, mode], env=env, capture_output=True, text=True, check=True)
    took, heaps = out.stdout.split()
    return took, int(heaps)


@glibc_only
def test_a_worker_thread_gets_an_arena_of_its_own_by_default() -> None:
    assert arenas_after_a_thread("none") == ("None", 2)


@glibc_only
def test_shared_arena_keeps_worker_threads_on_the_main_heap() -> None:
    assert arenas_after_a_thread("share") == ("True", 1)


def test_an_operators_malloc_arena_max_is_left_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MALLOC_ARENA_MAX", "4")
    assert share_main_arena() is False


TRIM_PROBE = r"""
import sys
from offpeak_extender.heap import trim_heap
def rss_kib():
    return int(next(l for l in open("/proc/self/status") if l.startswith("VmRSS")).split()[1])
# what a refit leaves: ~80 MiB of small blocks freed, with a few survivors among them, so the heap cannot shrink
# from its top and malloc keeps the pages
blocks = [bytearray(2000) for _ in range(40_000)]
survivors = blocks[::1000]
del blocks
before = rss_kib()
took = trim_heap() if sys.argv[1] == "trim" else None
print(took, before - rss_kib())
"""


@glibc_only
@pytest.mark.parametrize("mode", ["trim", "none"])
def test_trimming_hands_a_refits_freed_memory_back(mode: str) -> None:
    out = subprocess.run([sys.executable, "-c", TRIM_PROBE, mode], capture_output=True, text=True, check=True)
    took, given_back_kib = out.stdout.split()
    if mode == "trim":
        assert took == "True" and int(given_back_kib) > 40 * 1024  # most of the ~80 MiB
    else:
        assert int(given_back_kib) < 8 * 1024  # without it, malloc keeps what was freed


def test_the_refresher_trims_after_a_refit_only_when_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    from offpeak_core.forecast import ForecastSettings
    from offpeak_extender import heap
    from offpeak_extender.history import LocalHistory, Refresher
    from offpeak_extender.store import ClusterStore

    trims: list[int] = []
    monkeypatch.setattr(heap, "trim_heap", lambda: trims.append(1) or True)
    store = ClusterStore(settings=ForecastSettings(season_seconds=60.0, step_seconds=1.0, horizon_seconds=60.0,
                                                   history_seconds=600.0), stale_after_seconds=30.0)
    Refresher(store=store, source=LocalHistory(store), metrics=None).refresh_once()
    assert trims == []
    Refresher(store=store, source=LocalHistory(store), metrics=None, trim_heap=True).refresh_once()
    assert trims == [1]
