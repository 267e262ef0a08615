"""Who may post samples: bearer token against a mounted shared secret (pure rules and the file reader)."""

from __future__ import annotations

import pytest

from offpeak.errors import UserError
from offpeak_predictor.auth import SharedSecret, bearer_token, check


def test_bearer_token_parsing() -> None:
    assert bearer_token("Bearer abc") == "abc"
    assert bearer_token("bearer   abc  ") == "abc"
    for bad in (None, "", "Bearer", "Bearer   ", "Basic abc", "abc"):
        assert bearer_token(bad) is None, bad


def test_check_says_why() -> None:
    assert check(header="Bearer s3cret", secret="s3cret").ok
    missing = check(header=None, secret="s3cret")
    wrong = check(header="Bearer s3creT", secret="s3cret")
    unset = check(header="Bearer s3cret", secret=None)
    assert (missing.status, missing.reason) == (401, "missing_token") and "Bearer" in missing.message
    assert (wrong.status, wrong.reason) == (403, "bad_token")
    assert (unset.status, unset.reason) == (403, "not_configured") and "--token-file" in unset.message


def test_shared_secret_is_reread_so_a_rotated_secret_takes_effect(tmp_path) -> None:
    path = tmp_path / "token"
    path.write_text("first\n")
    secret = SharedSecret(path)
    assert secret.check("Bearer first").ok
    path.write_text("second")
    assert not secret.check("Bearer first").ok and secret.check("Bearer second").ok
    path.unlink()
    gone = secret.check("Bearer second")
    assert (gone.status, gone.reason) == (503, "secret_unreadable")


def test_a_missing_or_empty_secret_fails_at_start_up(tmp_path) -> None:
    with pytest.raises(UserError, match="cannot read"):
        SharedSecret(tmp_path / "absent")
    (tmp_path / "empty").write_text("\n")
    with pytest.raises(UserError, match="empty"):
        SharedSecret(tmp_path / "empty")
    assert SharedSecret(None).check("Bearer x").reason == "not_configured"
