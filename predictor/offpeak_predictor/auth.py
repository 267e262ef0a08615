"""Who may change the predictor's state: a bearer token checked against a mounted shared secret.

The secret is a file (a Kubernetes Secret mounted into the operator and the predictor, see the Helm chart),
read on every check so a rotated Secret takes effect without a restart. Without a configured secret nobody may
write: a predictor that learns from samples must know who sent them.
"""

from __future__ import annotations

import hmac
from dataclasses import dataclass
from pathlib import Path

from offpeak.errors import UserError

TOKEN_ENV = "OFFPEAK_PREDICTOR_TOKEN_FILE"  # the same variable names the file for the predictor and its clients


@dataclass(frozen=True, slots=True)
class AuthDecision:
    """ok, or the HTTP status, a metric reason and a message for the caller."""

    ok: bool
    status: int = 200
    reason: str = ""  # missing_token | malformed_header | bad_token | not_configured | secret_unreadable
    message: str = ""


ALLOWED = AuthDecision(ok=True)


def bearer_token(header: str | None) -> str | None:
    """The token of an `Authorization: Bearer <token>` header, else None."""
    if not header:
        return None
    scheme, _, token = header.strip().partition(" ")
    token = token.strip()
    return token if scheme.lower() == "bearer" and token else None


def check(*, header: str | None, secret: str | None) -> AuthDecision:
    """Decide one request (pure; constant-time comparison)."""
    if not secret:
        return AuthDecision(False, 403, "not_configured",
                            "this predictor accepts no samples: it was started without --token-file")  # fmt: skip
    if header is not None and not _utf8(header):
        return AuthDecision(False, 401, "malformed_header",
                            "the Authorization header is not UTF-8 text; send 'Authorization: Bearer <token>'")
    token = bearer_token(header)
    if token is None:
        return AuthDecision(False, 401, "missing_token", "send 'Authorization: Bearer <token>' (the shared secret)")
    if not hmac.compare_digest(token.encode(), secret.encode()):
        return AuthDecision(False, 403, "bad_token", "the bearer token does not match the predictor's secret")
    return ALLOWED


def _utf8(text: str) -> bool:
    """Whether a header, as the server decoded its bytes, was UTF-8 (aiohttp keeps other bytes as lone
    surrogates, which cannot be encoded back)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def read_token(path: str | Path) -> str:
    """The token in a secret file (surrounding whitespace removed); UserError if missing or empty."""
    try:
        token = Path(path).read_text(encoding="utf-8").strip()
    except OSError as e:
        raise UserError(f"cannot read the token file {path}: {e.strerror or e}") from e
    except UnicodeDecodeError as e:
        raise UserError(f"the token file {path} is not UTF-8 text") from e
    if not token:
        raise UserError(f"the token file {path} is empty")
    return token


class SharedSecret:
    """The mounted secret, read on each check (rotation without a restart)."""

    def __init__(self, path: str | Path | None) -> None:
        self.path = Path(path) if path else None
        if self.path is not None:
            read_token(self.path)  # fail at start-up, not on the first sample

    def check(self, header: str | None) -> AuthDecision:
        if self.path is None:
            return check(header=header, secret=None)
        try:
            secret = read_token(self.path)
        except UserError as e:
            return AuthDecision(False, 503, "secret_unreadable", str(e))
        return check(header=header, secret=secret)
