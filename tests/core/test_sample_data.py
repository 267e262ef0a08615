"""The shipped data sample: intact, found without any setting, and exactly what its derivation gives."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import sys
from pathlib import Path

import pytest

from offpeak_core import datapaths

REPO = Path(__file__).resolve().parents[2]


def _derive_module():
    spec = importlib.util.spec_from_file_location("derive_sample_data", REPO / "tools" / "derive_sample_data.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up there
    spec.loader.exec_module(mod)
    return mod


def test_sample_matches_its_manifest_and_stays_small() -> None:
    root = datapaths.sample_root()
    manifest = json.loads((root / "MANIFEST.json").read_text())
    on_disk = {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()}
    assert on_disk == set(manifest) | {"MANIFEST.json", "README.md"}
    for rel, entry in manifest.items():
        data = (root / rel).read_bytes()
        assert (len(data), hashlib.sha256(data).hexdigest()) == (entry["bytes"], entry["sha256"]), rel
    assert sum(e["bytes"] for e in manifest.values()) < 8e6  # "a few MB"
    # every data set folder says where it comes from and how it was cut
    for readme in {Path(rel).parts[0] + "/" + Path(rel).parts[1] for rel in manifest}:
        assert "## This sample (offpeak)" in (root / readme / "README.md").read_text()


def test_resolution_order(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(datapaths.ENV_DATA_ROOT, str(tmp_path / "mine"))
    assert datapaths.data_root() == tmp_path / "mine"  # an explicit setting wins, even when missing
    assert datapaths.data_kind() == "custom"
    assert datapaths.trace_dir("x") == tmp_path / "mine" / "traces" / "x"
    monkeypatch.delenv(datapaths.ENV_DATA_ROOT)
    monkeypatch.setattr(datapaths, "checkout_data_root", lambda: None)
    assert datapaths.data_root() == datapaths.sample_root()  # a fresh clone: the sample
    assert datapaths.data_kind() == "sample" and "sample" in datapaths.describe()
    assert datapaths.runtime_dir() == datapaths.sample_root() / "runtime"
    monkeypatch.setattr(datapaths, "checkout_data_root", lambda: tmp_path)
    assert datapaths.data_root() == tmp_path and datapaths.data_kind() == "full"


@pytest.mark.skipif(datapaths.checkout_data_root() is None,
                    reason="provenance check needs the full data (../shared/data beside the checkout)")
def test_sample_is_exactly_what_the_derivation_gives_from_the_full_data() -> None:
    derive = _derive_module()
    full = datapaths.checkout_data_root()
    assert derive.main(["--data", str(full), "--out", str(datapaths.sample_root()), "--check"]) == 0
