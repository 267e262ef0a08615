"""Errors shared by every component, and what the `offpeak` command makes of each expected failure.

`UserError` lives in the pure core so that it can raise it too. The CLI's exit codes are documented in
docs/cli.md; `failure` is their one home: it turns an exception into (exit code, one line), or None for a bug.
"""

from __future__ import annotations

import errno
import sys
from enum import IntEnum

from offpeak_core.errors import UserError

__all__ = ["ConfigError", "ExitCode", "Unreachable", "UserError", "failure", "network_reason"]


class ExitCode(IntEnum):
    """What the exit status of an `offpeak` command means (docs/cli.md)."""

    OK = 0
    FAILED = 1  # the command ran and its answer is "no" (e.g. `cluster status` with a process down)
    USAGE = 2  # bad arguments, flag values, environment variables, input files, or a name that does not exist
    CONFIG = 3  # no usable Kubernetes configuration: no kubeconfig, unknown context, credentials refused
    UNREACHABLE = 4  # a service did not answer: the Kubernetes API server, the predictor, Prometheus
    BROKEN_PIPE = 141  # the reader of stdout went away (`offpeak jobs | head -1`), as a shell reports SIGPIPE
    INTERRUPTED = 130  # Ctrl-C


class ConfigError(Exception):
    """The Kubernetes configuration cannot be used (exit 3). The message says what to pass or set instead."""


class Unreachable(Exception):
    """A service did not answer (exit 4). The message names the service and where it was looked for."""


def network_reason(exc: BaseException) -> str:
    """Why a connection failed, in a few words ("connection refused", "timed out"), from the first exception of
    its chain that says it (urllib3 wraps the socket's error twice, with object reprs around it)."""
    seen: list[BaseException] = []
    todo: list[BaseException | None] = [exc]
    while todo:
        e = todo.pop(0)
        if e is None or any(e is s for s in seen):
            continue
        seen.append(e)
        if isinstance(e, TimeoutError) or type(e).__name__.endswith("TimeoutError"):
            return "timed out"
        if isinstance(e, OSError) and e.strerror:
            return e.strerror[:1].lower() + e.strerror[1:]
        reason = getattr(e, "reason", None)
        todo += [reason if isinstance(reason, BaseException) else None, e.__cause__, e.__context__]
    return str(exc)


_FILE_ERRORS = (FileNotFoundError, IsADirectoryError, NotADirectoryError, PermissionError)


def _library_failure(exc: BaseException) -> tuple[ExitCode, str] | None:
    """Exceptions of the Kubernetes client and urllib3 that a command did not translate itself. Their modules are
    looked up, not imported: a command that never loaded them cannot have raised them."""
    config = sys.modules.get("kubernetes.config.config_exception")
    if config is not None and isinstance(exc, config.ConfigException):
        return ExitCode.CONFIG, (f"cannot use the Kubernetes configuration: {exc} (pass --kubeconfig FILE or "
                                 "--context NAME, or set KUBECONFIG)")
    api = sys.modules.get("kubernetes.client.exceptions")
    if api is not None and isinstance(exc, api.ApiException):
        code = ExitCode.CONFIG if exc.status in (401, 403) else ExitCode.UNREACHABLE
        return code, f"the Kubernetes API server answered {exc.status} {exc.reason}"
    urllib3 = sys.modules.get("urllib3.exceptions")
    if urllib3 is not None and isinstance(exc, urllib3.HTTPError):  # MaxRetryError, NewConnectionError, timeouts
        where = getattr(getattr(exc, "pool", None), "host", None) or "the server"
        return ExitCode.UNREACHABLE, f"cannot reach {where}: {network_reason(exc)}"
    return None


def failure(exc: BaseException) -> tuple[ExitCode, str] | None:
    """(exit code, one line) for an expected failure; None for anything else, a bug whose traceback is wanted."""
    if isinstance(exc, UserError):
        return ExitCode.USAGE, str(exc)
    if isinstance(exc, ConfigError):
        return ExitCode.CONFIG, str(exc)
    if isinstance(exc, Unreachable):
        return ExitCode.UNREACHABLE, str(exc)
    if isinstance(exc, _FILE_ERRORS) and exc.filename:
        return ExitCode.USAGE, f"cannot use {exc.filename}: {exc.strerror or exc}"
    if isinstance(exc, OSError) and exc.errno in (errno.EADDRINUSE, errno.EADDRNOTAVAIL):
        return ExitCode.USAGE, f"cannot listen there: {exc.strerror or exc} (pick another --host/--port)"
    if isinstance(exc, (ConnectionError, TimeoutError)):
        return ExitCode.UNREACHABLE, f"a service did not answer: {network_reason(exc)}"
    return _library_failure(exc)
