"""Serving aiohttp applications until SIGINT or SIGTERM, and reading bounded request bodies: what the extender and
the predictor share."""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Sequence

from aiohttp import web

log = logging.getLogger(__name__)


async def serve_apps(sites: Sequence[tuple[web.Application, str, int]], *,
                     access_log: logging.Logger | None = None) -> None:
    """Serve each (app, host, port) on one event loop until SIGINT or SIGTERM, then clean up in reverse order.

    `access_log` None: no per-request log lines (the extender answers the scheduler many times a second)."""
    runners: list[web.AppRunner] = []
    try:
        for app, host, port in sites:
            runner = web.AppRunner(app, access_log=access_log)
            await runner.setup()
            runners.append(runner)
            await web.TCPSite(runner, host, port).start()
            log.info("serving on http://%s:%d", host, port)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        await stop.wait()
    finally:
        for runner in reversed(runners):
            await runner.cleanup()


async def read_body(request: web.Request, limit: int) -> bytes | None:
    """The request body, or None as soon as it is known to exceed `limit` bytes (declared or streamed)."""
    if request.content_length is not None and request.content_length > limit:
        return None
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.content.iter_any():
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
    return b"".join(chunks)
