"""Build the local control plane's binaries from Go modules, at pinned versions, into a cache outside the repo.

Docker and prebuilt-binary downloads are not available here, but the Go module proxy is, so every binary is
compiled from source once and reused: ``${OFFPEAK_CACHE:-~/.cache/offpeak}/bin/<version>/<name>``.

Run ``python -m offpeak_e2e.build [--only helm,kwok]``; binaries that already exist are skipped.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from offpeak_core.datapaths import cache_dir
from offpeak_core.versions import (
    ETCD_VERSION, HELM_VERSION, KUBERNETES_VERSION, KUEUE_VERSION, KWOK_VERSION, TRAINING_OPERATOR_VERSION,
)

KUBE_COMMANDS = ("kube-apiserver", "kube-scheduler", "kube-controller-manager")


class BuildError(RuntimeError):
    """A binary could not be built; the message says which and why."""


@dataclass(frozen=True)
class Target:
    """One group of binaries built by one `go build` in its own throw-away module."""

    name: str
    version: str
    binaries: tuple[str, ...]
    cold_minutes: int  # measured on the project's 2-core machine with empty Go caches (~1 min in all when warm)


TARGETS: tuple[Target, ...] = (
    Target("helm", HELM_VERSION, ("helm",), cold_minutes=3),
    Target("kwok", KWOK_VERSION, ("kwok", "kwokctl"), cold_minutes=3),
    Target("etcd", ETCD_VERSION, ("etcd",), cold_minutes=1),
    Target("kubernetes", KUBERNETES_VERSION, KUBE_COMMANDS, cold_minutes=11),
    Target("kueue", KUEUE_VERSION, ("kueue",), cold_minutes=5),
    Target("training-operator", TRAINING_OPERATOR_VERSION, ("training-operator",), cold_minutes=3),
)
KUEUE_MODULE = "sigs.k8s.io/kueue"
TRAINING_OPERATOR_MODULE = "github.com/kubeflow/training-operator"
# CRDs copied from a module next to its binary: target -> (module, folder in the module, file names or None: all)
MODULE_CRDS: dict[str, tuple[str, str, tuple[str, ...] | None]] = {
    "kueue": (KUEUE_MODULE, "config/components/crd/bases", None),
    "training-operator": (TRAINING_OPERATOR_MODULE, "manifests/base/crds", ("kubeflow.org_pytorchjobs.yaml",)),
}


def binary_path(name: str, version: str, *, root: Path | None = None) -> Path:
    """Where the binary `name` at `version` lives in the cache."""
    return (root or cache_dir()) / "bin" / version / name


def binaries(*, root: Path | None = None) -> dict[str, Path]:
    """Every binary the local cluster needs, by name (they may not exist yet)."""
    return {b: binary_path(b, t.version, root=root) for t in TARGETS for b in t.binaries}


def crd_dir(target: str, *, root: Path | None = None) -> Path:
    """A target's CRDs (`MODULE_CRDS`), copied from its module next to its binary when it is built."""
    version = next(t.version for t in TARGETS if t.name == target)
    return binary_path(f"{target}-crds", version, root=root)



def missing(*, root: Path | None = None) -> list[str]:
    """Names of the binaries that are not built yet."""
    return [name for name, path in binaries(root=root).items() if not path.is_file()]


def staging_replaces(kubernetes_go_mod: str, *, staging_version: str) -> list[str]:
    """Turn k8s.io/kubernetes' local ``./staging`` replaces into replaces by the published staging versions."""
    modules = sorted(set(re.findall(r"^\s*(k8s\.io/[\w.-]+)\s+=>\s+\./staging/", kubernetes_go_mod, re.M)))
    return [f"replace {m} => {m} {staging_version}" for m in modules]


def _go() -> str:
    go = shutil.which("go") or ("/usr/local/go/bin/go" if Path("/usr/local/go/bin/go").exists() else None)
    if go is None:
        raise BuildError("the Go toolchain is not installed (need Go >= 1.24 on PATH)")
    return go


def _run(cmd: Sequence[str], *, cwd: Path, log: Path) -> None:
    env = {**os.environ, "CGO_ENABLED": "0", "GOFLAGS": "-buildvcs=false -mod=mod", "GOTOOLCHAIN": "local"}
    with log.open("a") as out:
        out.write(f"$ {' '.join(cmd)}\n")
        out.flush()
        proc = subprocess.run(cmd, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT, check=False)
    if proc.returncode != 0:
        tail = "".join(log.read_text(errors="replace").splitlines(keepends=True)[-25:])
        raise BuildError(f"`{' '.join(cmd)}` failed (exit {proc.returncode}); log {log}:\n{tail}")


def _module_go_mod(go: str, module: str, version: str, *, cwd: Path, log: Path) -> str:
    out = subprocess.run(
        [go, "mod", "download", "-json", f"{module}@{version}"],
        cwd=cwd, capture_output=True, text=True, check=False,
        env={**os.environ, "GOFLAGS": "-buildvcs=false"},
    )
    if out.returncode != 0:
        log.open("a").write(out.stdout + out.stderr)
        raise BuildError(f"cannot download {module}@{version}: {out.stdout.strip()} {out.stderr.strip()}")
    return Path(json.loads(out.stdout)["GoMod"]).read_text()


def _prepare_module(target: Target, work: Path, go: str, log: Path) -> list[str]:
    """Write the throw-away go.mod; return the package paths to build."""
    work.mkdir(parents=True, exist_ok=True)
    lines = [f"module offpeak.local/build/{target.name}", "", "go 1.24", ""]
    if target.name == "helm":
        pkgs = ["helm.sh/helm/v3/cmd/helm"]
        lines.append(f"require helm.sh/helm/v3 {target.version}")
    elif target.name == "kwok":
        pkgs = ["sigs.k8s.io/kwok/cmd/kwok", "sigs.k8s.io/kwok/cmd/kwokctl"]
        lines.append(f"require sigs.k8s.io/kwok {target.version}")
    elif target.name == "kueue":
        pkgs = [f"{KUEUE_MODULE}/cmd/kueue"]
        lines.append(f"require {KUEUE_MODULE} {target.version}")
    elif target.name == "training-operator":
        pkgs = [f"{TRAINING_OPERATOR_MODULE}/cmd/training-operator.v1"]
        lines.append(f"require {TRAINING_OPERATOR_MODULE} {target.version}")
    elif target.name == "etcd":
        pkgs = ["go.etcd.io/etcd/server/v3"]
        lines.append(f"require go.etcd.io/etcd/server/v3 {target.version}")
    else:
        pkgs = [f"k8s.io/kubernetes/cmd/{c}" for c in KUBE_COMMANDS]
        lines.append(f"require k8s.io/kubernetes {target.version}")
        upstream = _module_go_mod(go, "k8s.io/kubernetes", target.version, cwd=work, log=log)
        staging = "v0." + target.version.removeprefix("v1.")
        lines += ["", *staging_replaces(upstream, staging_version=staging)]
    (work / "go.mod").write_text("\n".join(lines) + "\n")
    return pkgs


def _ldflags(target: Target) -> str:
    flags = ["-s", "-w"]
    if target.name == "kubernetes":
        major, minor, _ = target.version.removeprefix("v").split(".")
        base = "k8s.io/component-base/version"
        flags += [
            f"-X {base}.gitVersion={target.version}", f"-X {base}.gitMajor={major}",
            f"-X {base}.gitMinor={minor}", f"-X {base}.gitTreeState=clean",
            "-X k8s.io/component-base/version.buildDate=1970-01-01T00:00:00Z",
        ]
    elif target.name == "helm":
        flags.append(f"-X helm.sh/helm/v3/internal/version.version={target.version}")
    elif target.name == "kwok":
        flags.append(f"-X sigs.k8s.io/kwok/pkg/consts.Version={target.version}")
    elif target.name == "kueue":
        flags.append(f"-X {KUEUE_MODULE}/pkg/version.GitVersion={target.version}")
    return " ".join(flags)


def build_target(target: Target, *, root: Path | None = None, echo=print) -> float:
    """Build one target's binaries unless all exist; return seconds spent (0 when skipped)."""
    root = root or cache_dir()
    outs = [binary_path(b, target.version, root=root) for b in target.binaries]
    if all(p.is_file() for p in outs):
        echo(f"[build] {target.name} {target.version}: cached ({outs[0].parent})")
        return 0.0
    go = _go()
    work = root / "src" / f"{target.name}-{target.version}"
    log = root / "logs" / f"{target.name}-{target.version}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    work.mkdir(parents=True, exist_ok=True)
    with (work.parent / f".{target.name}-{target.version}.lock").open("w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            echo(f"[build] {target.name} {target.version}: another build is running; waiting for it ...")
            fcntl.flock(lock, fcntl.LOCK_EX)
        if all(p.is_file() for p in outs):
            echo(f"[build] {target.name} {target.version}: built by the other process")
            return 0.0
        return _build_locked(target, go=go, work=work, log=log, outs=outs, echo=echo)


def _build_locked(target: Target, *, go: str, work: Path, log: Path, outs: list[Path], echo) -> float:
    log.write_text("")
    echo(f"[build] {target.name} {target.version}: building {', '.join(target.binaries)} from Go modules, "
         f"up to ~{target.cold_minutes} min on 2 cores (log {log}) ...")
    start = time.monotonic()
    pkgs = _prepare_module(target, work, go, log)
    tmp_out = work / "out"
    tmp_out.mkdir(exist_ok=True)
    if len(pkgs) == 1:  # named as the target says (the package's folder may be named otherwise)
        _run([go, "build", "-trimpath", "-ldflags", _ldflags(target), "-o", str(tmp_out / target.binaries[0]),
              *pkgs], cwd=work, log=log)
    else:
        _run([go, "build", "-trimpath", "-ldflags", _ldflags(target), "-o", str(tmp_out) + "/", *pkgs],
             cwd=work, log=log)
    outs[0].parent.mkdir(parents=True, exist_ok=True)
    if target.name in MODULE_CRDS:  # before the binary lands: a binary in the cache means its CRDs are there too
        _copy_crds(go, target, work=work, log=log, dest=outs[0].parent / f"{target.name}-crds")
    for name, dest in zip(target.binaries, outs, strict=True):
        built = tmp_out / name
        if not built.is_file():
            raise BuildError(f"{target.name}: go build did not produce {name}; see {log}")
        tmp_dest = dest.with_suffix(".tmp")
        shutil.copy2(built, tmp_dest)
        tmp_dest.chmod(0o755)
        tmp_dest.replace(dest)  # atomic, so a half-written binary is never picked up
    took = time.monotonic() - start
    echo(f"[build] {target.name} {target.version}: done in {took:.0f}s")
    return took


def _copy_crds(go: str, target: Target, *, work: Path, log: Path, dest: Path) -> None:
    module, folder, files = MODULE_CRDS[target.name]
    out = subprocess.run([go, "mod", "download", "-json", f"{module}@{target.version}"], cwd=work,
                         capture_output=True, text=True, check=False, env={**os.environ, "GOFLAGS": "-buildvcs=false"})
    if out.returncode != 0:
        log.open("a").write(out.stdout + out.stderr)
        raise BuildError(f"cannot find {module}@{target.version}'s files: {out.stderr.strip()}")
    bases = Path(json.loads(out.stdout)["Dir"]) / folder
    crds = sorted(bases / f for f in files) if files else sorted(bases.glob("*.yaml"))
    if not crds or not all(c.is_file() for c in crds):
        raise BuildError(f"{module}@{target.version} lacks its CRDs in {bases}")
    tmp = dest.with_suffix(".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    for crd in crds:
        shutil.copyfile(crd, tmp / crd.name)  # module files are read-only; the copies need not be
    shutil.rmtree(dest, ignore_errors=True)
    tmp.replace(dest)


def build_all(*, only: Sequence[str] | None = None, root: Path | None = None, echo=print) -> dict[str, Path]:
    """Build every missing binary (helm first: it is quick and others need it); return name -> path."""
    start = time.monotonic()
    for target in TARGETS:
        if only and target.name not in only:
            continue
        build_target(target, root=root, echo=echo)
    echo(f"[build] all done in {time.monotonic() - start:.0f}s")
    return binaries(root=root)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m offpeak_e2e.build", description=__doc__)
    parser.add_argument("--only", default="", help="comma-separated targets: " + ",".join(t.name for t in TARGETS))
    parser.add_argument("--print-paths", action="store_true", help="print the binary paths as JSON and exit")
    args = parser.parse_args(argv)
    if args.print_paths:
        print(json.dumps({k: str(v) for k, v in binaries().items()}, indent=2))
        return 0
    only = [s for s in args.only.split(",") if s] or None
    try:
        build_all(only=only, echo=lambda m: print(m, flush=True))
    except BuildError as e:
        print(f"build failed: {e}", file=sys.stderr)
        return 1
    if only is None:
        _prometheus(echo=lambda m: print(m, flush=True))
    return 0


def _prometheus(*, echo) -> None:
    """Install Prometheus (Debian's) here, before the test processes start clusters that need it. Not a build
    failure when it cannot be: each cluster start then says why (`offpeak_e2e.prom`)."""
    from offpeak_e2e.prom import PrometheusMissing, prometheus_binary

    start = time.monotonic()
    try:
        path = prometheus_binary()
    except PrometheusMissing as e:
        echo(f"[build] prometheus: not installed: {e}")
        return
    echo(f"[build] prometheus: {path} ({time.monotonic() - start:.0f}s)")


if __name__ == "__main__":
    sys.exit(main())
