"""Lint the Dockerfile (images cannot be built on these machines): pinned bases, non-root, paths the chart and
the operator rely on."""

from __future__ import annotations

import re

import yaml

from support import REPO
from support.dockerfile import logical_lines, parse, resolve

ROOT = REPO
DOCKERFILE = ROOT / "docker" / "Dockerfile"


def _stages():
    return parse(DOCKERFILE.read_text())


def test_parser_joins_continuations_and_skips_comments() -> None:
    text = "# c\nARG A=x:1\nFROM $A AS one\nRUN a \\\n  # inner\n  && b\nUSER 1:1\n"
    assert logical_lines(text) == ["ARG A=x:1", "FROM $A AS one", "RUN a && b", "USER 1:1"]
    args, stages = parse(text)
    assert resolve(stages[0].image, args) == "x:1"
    assert stages[0].last("USER") == "1:1"


def test_every_base_image_is_pinned_by_tag_or_an_earlier_stage() -> None:
    args, stages = _stages()
    names: set[str] = set()
    for stage in stages:
        image = resolve(stage.image, args)
        if image not in names:
            assert "$" not in image, f"unresolved ARG in FROM {stage.image}"
            repo, _, tag = image.partition("@")[0].rpartition(":")
            assert repo and tag, f"{image}: pin a tag"
            assert tag != "latest" and not re.fullmatch(r"\d+(\.\d+)?(-slim)?", tag), f"{image}: pin an exact tag"
        names.add(stage.name)


def test_no_latest_anywhere_and_no_remote_add() -> None:
    text = DOCKERFILE.read_text()
    assert ":latest" not in text
    for line in logical_lines(text):
        assert not re.match(r"ADD\s+https?://", line, re.IGNORECASE), line


def test_final_images_run_as_the_non_root_uid_the_chart_expects() -> None:
    _, stages = _stages()
    finals = [s for s in stages if s.last("ENTRYPOINT")]
    assert {s.name for s in finals} == {"runtime", "extract"}
    assert stages[-1].name == "runtime", "the default target (last stage) must be the slim runtime image"
    values = yaml.safe_load((ROOT / "charts" / "offpeak" / "values.yaml").read_text())
    uid = values["podSecurityContext"]["runAsUser"]
    for stage in finals:
        user = stage.last("USER")
        assert user is not None, stage.name
        assert user.split(":")[0] == str(uid), f"{stage.name}: USER {user}, chart runs as {uid}"
        assert user.split(":")[0] not in ("0", "root")
        assert stage.last("ENTRYPOINT") == '["offpeak"]'


def test_copied_sources_exist_and_cover_every_package_root() -> None:
    _, stages = _stages()
    (build,) = [s for s in stages if s.name == "build"]
    copied = {arg.split()[0].rstrip("/") for kw, arg in build.instructions if kw == "COPY" and "--from" not in arg}
    for path in copied:
        assert (ROOT / path).exists(), path
    pyproject = (ROOT / "pyproject.toml").read_text()
    roots = re.search(r"where = \[([^\]]*)\]", pyproject).group(1)
    for root in re.findall(r'"([^"]+)"', roots):
        if root != ".":
            assert root in copied, f"package root {root}/ is not copied into the image"


def test_bundle_path_matches_the_operator() -> None:
    text = DOCKERFILE.read_text()
    settings = (ROOT / "operator" / "offpeak_operator" / "settings.py").read_text()
    bundle = re.search(r'bundle_path: str = "([^"]+)"', settings).group(1)
    assert f"--out {bundle}" in " ".join(logical_lines(text)), f"the image must build the bundle at {bundle}"


def test_scheduler_image_of_the_e2e_minor_is_the_e2e_kubernetes_version() -> None:
    from offpeak_core import versions
    from offpeak_e2e import build
    from support import chart

    values = yaml.safe_load((ROOT / "charts" / "offpeak" / "values.yaml").read_text())
    kube = versions.KUBERNETES_VERSION
    assert values["scheduler"]["image"]["repository"] == "registry.k8s.io/kube-scheduler"
    minor = kube.lstrip("v").rsplit(".", 1)[0]
    # the e2e suite's minor is the newest the chart names, and with the same release
    assert values["scheduler"]["image"]["tagByMinor"][minor] == kube
    assert max(values["scheduler"]["image"]["tagByMinor"], key=lambda m: int(m.split(".")[1])) == minor
    assert {t.name: t.version for t in build.TARGETS} == {
        "helm": versions.HELM_VERSION, "kwok": versions.KWOK_VERSION, "etcd": versions.ETCD_VERSION, "kubernetes": kube,
        "kueue": versions.KUEUE_VERSION, "training-operator": versions.TRAINING_OPERATOR_VERSION,
    }
    assert chart.KUBE_VERSION.rsplit(".", 1)[0] == kube.lstrip("v").rsplit(".", 1)[0]
