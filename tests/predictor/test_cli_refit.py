"""`offpeak predictor refit|rollback` (cli_refit.py): on a store directory, and through a predictor's URL."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any

import pytest

from offpeak.cliargs import Parser
from offpeak.errors import UserError
from offpeak_predictor import cli_refit
from offpeak_predictor.modelstore import ModelStore

from .refit_support import add_samples


def _run(*argv: str) -> int:
    parser = Parser()
    cli_refit.register(parser.add_subparsers())
    args = parser.parse_args(list(argv))
    return int(args.func(args))


def test_refit_promotes_into_the_store_and_rollback_goes_back(tiny_model, tmp_path, capsys) -> None:
    model_file, store = tmp_path / "model.json.gz", tmp_path / "store"
    tiny_model.save(model_file)
    db = add_samples(tmp_path / "db.sqlite", tiny_model, lambda *_: 1.4)
    assert _run("refit", "--db", str(db.path), "--store", str(store), "--model", str(model_file)) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["decision"]["promote"] is True and out["current"] == out["decision"]["candidate_version"]
    assert out["evaluation"]["candidate"]["mean_abs_log"] < out["evaluation"]["serving"]["mean_abs_log"]
    assert out["samples"] == {"usable": 36} and out["dry_run"] is False
    assert _run("rollback", "--store", str(store)) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["current"] == tiny_model.version and ModelStore(store).current() == tiny_model.version
    with pytest.raises(UserError, match="nothing to roll back to"):
        _run("rollback", "--store", str(store))


def test_refit_with_too_few_samples_promotes_nothing(tiny_model, tmp_path, capsys) -> None:
    model_file = tmp_path / "model.json.gz"
    tiny_model.save(model_file)
    db = add_samples(tmp_path / "db.sqlite", tiny_model, lambda *_: 1.4, batches=(16,))  # 18 samples
    _run("refit", "--db", str(db.path), "--store", str(tmp_path / "store"), "--model", str(model_file))
    out = json.loads(capsys.readouterr().out)
    assert out["decision"] == {"promote": False, "serving_version": tiny_model.version, "candidate_version": None,
                               "reason": "too few samples to re-fit: 18 usable accepted samples (need 30)"}
    assert out["current"] is None


def test_bad_arguments_are_user_errors(tmp_path) -> None:
    with pytest.raises(UserError, match="give --store DIR"):
        _run("rollback")
    with pytest.raises(UserError, match="sample DB not found"):
        _run("refit", "--store", str(tmp_path / "s"), "--db", str(tmp_path / "none.sqlite"))
    with pytest.raises(UserError, match="--folds >= 2"):
        _run("refit", "--store", str(tmp_path / "s"), "--folds", "1")
    (tmp_path / "s").mkdir()
    (tmp_path / "s" / "pointer.json").write_text("[]")
    with pytest.raises(UserError, match="corrupt"):
        _run("rollback", "--store", str(tmp_path / "s"))


@pytest.fixture
def fake_predictor(tmp_path) -> Iterator[tuple[str, list[dict[str, Any]]]]:
    """A stand-in predictor that records the requests it gets and answers 200 to the right token only."""
    seen: list[dict[str, Any]] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            seen.append({"path": self.path, "auth": self.headers.get("Authorization"), "body": body})
            ok = self.headers.get("Authorization") == "Bearer s3cret"
            answer = json.dumps({"decision": {"promote": False}} if ok else {"error": "wrong token"}).encode()
            self.send_response(200 if ok else 403)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, *args: Any) -> None:
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", seen
    server.shutdown()
    server.server_close()


def test_with_a_url_the_running_predictor_is_asked_with_the_token(fake_predictor, tmp_path, capsys) -> None:
    url, seen = fake_predictor
    token = tmp_path / "token"
    token.write_text("s3cret\n")
    assert _run("refit", "--url", url, "--token-file", str(token), "--dry-run") == 0
    assert json.loads(capsys.readouterr().out) == {"decision": {"promote": False}}
    assert _run("rollback", "--url", url, "--token-file", str(token)) == 0
    assert [(s["path"], s["auth"], s["body"]) for s in seen] == [
        ("/v1/model/refit", "Bearer s3cret", {"dry_run": True}), ("/v1/model/rollback", "Bearer s3cret", {})]
    token.write_text("wrong")
    with pytest.raises(UserError, match="refused /v1/model/refit: HTTP 403: wrong token"):
        _run("refit", "--url", url, "--token-file", str(token))
