#!/usr/bin/env bash
# Build the offpeak container images without a Docker engine or a registry, then smoke-run them (docs/images.md).
#
#   bash docker/build-image.sh            # what `make image` runs
#
# 1. a Debian 12 "bookworm" minbase root filesystem with debootstrap (python3, python3-venv, ca-certificates,
#    libgomp1; security updates applied), cached as a tar under ${OFFPEAK_CACHE:-~/.cache/offpeak}/image/;
# 2. that tar imported into containers-storage as localhost/offpeak-base:bookworm (buildah from scratch + add);
# 3. docker/Containerfile.debian built on it with `buildah bud --isolation chroot`: localhost/offpeak:<version>
#    (runtime target) and localhost/offpeak:<version>-extract (+ torch from PyPI);
# 4. smoke runs with podman: `offpeak --help`, the analysis bundle, and `offpeak predict` for resnet18 on an A100
#    (read-only root, /tmp tmpfs, UID 10001, no network: as the chart runs it);
# 5. sizes, image IDs and digests.
#
# Needs root (debootstrap; buildah with chroot isolation) and Debian/Ubuntu's apt for its own tools. Idempotent:
# each step is skipped when its result is already there and its inputs have not changed.
#
# Environment:
#   OFFPEAK_CACHE               cache root (default ~/.cache/offpeak); this script uses $OFFPEAK_CACHE/image/
#   OFFPEAK_IMAGE_TARGETS       "runtime extract" (default) or "runtime": the extract image is ~7 GB with PyPI's
#                               default (CUDA) torch wheel, and each of its builds downloads ~3 GB unless pip's
#                               cache under $OFFPEAK_CACHE/image/pip can be used
#   OFFPEAK_IMAGE_REPO          image name without tag (default localhost/offpeak)
#   OFFPEAK_STORAGE_DRIVER      overlay or vfs (default: what the existing store uses, else overlay if the kernel
#                               mounts it here, else vfs)
#   OFFPEAK_DEBIAN_MIRROR       Debian mirror for debootstrap and the image's apt sources (default: the host's apt
#                               source for the suite; a Debian snapshot-archive URL pins the package set)
#   OFFPEAK_DEBIAN_SECURITY_MIRROR   security mirror (default: the host's; "none" skips the security updates)
#   OFFPEAK_REFRESH_BASE=1      rebuild the base root filesystem (picks up new Debian updates)
#   OFFPEAK_REBUILD=1           rebuild the offpeak images even if their inputs are unchanged
#   OFFPEAK_SMOKE=0             skip the smoke runs
#   OFFPEAK_RELOCK=1            build without docker/requirements.lock, then rewrite it from the extract image's
#                               `pip freeze` (run the script once more afterwards to build both images from it)
#   CONTAINERS_STORAGE_CONF     buildah's and podman's own: another storage.conf (graphroot, runroot, driver)
set -euo pipefail

SUITE=bookworm
BASE_PACKAGES=python3,python3-venv,python-is-python3,ca-certificates,libgomp1
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CACHE=${OFFPEAK_CACHE:-$HOME/.cache/offpeak}/image
BASE_DIR=$CACHE/base-$SUITE
LOGS=$CACHE/logs
TARGETS=${OFFPEAK_IMAGE_TARGETS:-runtime extract}
REPO=${OFFPEAK_IMAGE_REPO:-localhost/offpeak}
BASE_IMAGE=localhost/offpeak-base:$SUITE
CONTAINERFILE=docker/Containerfile.debian
T_START=$(date +%s)

log() { printf '[image %5ss] %s\n' "$(($(date +%s) - T_START))" "$*"; }
die() { log "ERROR: $*" >&2; exit 1; }

STEP_NAME='' STEP_T=0 STEP_LOG=/dev/null
step() {  # step NAME LOGFILE: start a timed step; its tools' output goes to the log file
  STEP_NAME=$1 STEP_T=$(date +%s) STEP_LOG=$LOGS/$2.log
  : >"$STEP_LOG"
  log "▶ $STEP_NAME (log: $STEP_LOG)"
}
done_step() { log "✓ $STEP_NAME: $(($(date +%s) - STEP_T)) s${1:+ — $1}"; STEP_NAME=''; }
skip_step() { log "✓ $1: skipped — $2"; }
q() { "$@" >>"$STEP_LOG" 2>&1; }  # run quietly into the step's log
on_error() {
  local rc=$? line=$1
  if [[ -n $STEP_NAME ]]; then
    log "✗ $STEP_NAME failed (exit $rc, line $line) after $(($(date +%s) - STEP_T)) s; last lines of $STEP_LOG:" >&2
    tail -n 40 "$STEP_LOG" >&2 || true
  else
    log "✗ failed (exit $rc) at line $line of $0" >&2
  fi
  exit "$rc"
}
trap 'on_error $LINENO' ERR

[[ $(id -u) == 0 ]] || die "needs root (debootstrap, and buildah/podman with the system store); run it with sudo"
cd "$ROOT"
mkdir -p "$CACHE" "$LOGS" "$BASE_DIR" "$CACHE/pip"
exec 9>"$CACHE/.lock"
flock -n 9 || { log "another build-image.sh holds $CACHE/.lock; waiting"; flock 9; }

# ---- 0. tools ------------------------------------------------------------------------------------------------------
need=()
for tool in buildah:buildah podman:podman crun:crun runc:runc debootstrap:debootstrap python3:python3 flock:util-linux \
            sha256sum:coreutils; do
  command -v "${tool%%:*}" >/dev/null || need+=("${tool#*:}")
done
[[ -e /usr/share/keyrings/debian-archive-keyring.gpg ]] || need+=(debian-archive-keyring)
if ((${#need[@]})); then
  step "apt-get install ${need[*]}" 00-apt
  command -v apt-get >/dev/null || die "missing ${need[*]} and no apt-get to install them"
  q apt-get update
  DEBIAN_FRONTEND=noninteractive q apt-get install -y --no-install-recommends "${need[@]}"
  done_step
fi
log "tools: $(buildah --version | cut -d' ' -f1-3), $(podman --version), $(crun --version | head -1), debootstrap $(dpkg-query -W -f='${Version}' debootstrap 2>/dev/null || echo '?')"

# storage driver: keep what an existing store uses (one store cannot mix them), else what storage.conf says, else
# overlay where the kernel mounts it (vfs copies the whole tree for every layer: slower, several times the disk)
storage_conf() {
  local conf=${CONTAINERS_STORAGE_CONF:-/etc/containers/storage.conf}
  [[ -r $conf ]] || return 0
  sed -n "s/^[[:space:]]*$1[[:space:]]*=[[:space:]]*\"\([^\"]*\)\".*/\1/p" "$conf" | head -n 1
}
store=$(storage_conf graphroot)
store=${store:-/var/lib/containers/storage}
existing=''
for d in overlay vfs; do
  if [[ -d $store/$d-images ]]; then existing=$d; fi
done
if [[ -n ${OFFPEAK_STORAGE_DRIVER:-} ]]; then
  DRIVER=$OFFPEAK_STORAGE_DRIVER
  [[ -z $existing || $existing == "$DRIVER" ]] ||
    die "$store already holds $existing images; OFFPEAK_STORAGE_DRIVER=$DRIVER needs another store (CONTAINERS_STORAGE_CONF)"
elif [[ -n $existing ]]; then
  DRIVER=$existing
elif [[ -n $(storage_conf driver) ]]; then
  DRIVER=$(storage_conf driver)
else
  probe=$(mktemp -d)
  mkdir -p "$probe"/{l,u,w,m}
  if mount -t overlay overlay -o "lowerdir=$probe/l,upperdir=$probe/u,workdir=$probe/w" "$probe/m" 2>/dev/null; then
    umount "$probe/m"
    DRIVER=overlay
  else
    DRIVER=vfs
  fi
  rm -rf "$probe"
fi
BUILDAH=(buildah --storage-driver "$DRIVER")
PODMAN=(podman --storage-driver "$DRIVER")
log "storage: $store, driver $DRIVER"

# an interrupted build (Ctrl-C, a killed job) leaves buildah working containers and untagged stage images behind;
# ours are the ones on the base image or on untagged images built from it (they inherit its label)
ours=$("${BUILDAH[@]}" images --filter dangling=true --filter label=io.offpeak.rootfs.sha256 --format '{{.ID}}' \
       --no-trunc 2>/dev/null | sed 's/^sha256://' || true)
base_id=$("${BUILDAH[@]}" inspect --type image --format '{{.FromImageID}}' "$BASE_IMAGE" 2>/dev/null || true)
stale=$("${BUILDAH[@]}" containers --format '{{.ContainerID}} {{.ImageID}}' 2>/dev/null |
        awk -v ids=" $base_id ${ours//$'\n'/ } " 'index(ids, " " $2 " ") { print $1 }')
if [[ -n $stale || -n $ours ]]; then
  step "remove what an interrupted build left behind" 05-cleanup
  for c in $stale; do q "${BUILDAH[@]}" rm "$c"; done
  for i in $ours; do q "${BUILDAH[@]}" rmi "$i" || true; done
  done_step "$(wc -w <<<"$stale") containers, $(wc -w <<<"$ours") untagged images"
fi

# ---- 1. base root filesystem (debootstrap), cached -----------------------------------------------------------------
host_source() {  # host_source SUITE: the host's apt source URI that serves SUITE, if any
  # shellcheck disable=SC2016  # apt's own $(FIELD) syntax
  apt-get indextargets --format '$(REPO_URI) $(RELEASE)' 'Identifier: Packages' 2>/dev/null |
    awk -v s="$1" '$2 == s { sub(/\/$/, "", $1); print $1; exit }'
}
MIRROR=${OFFPEAK_DEBIAN_MIRROR:-$(host_source "$SUITE")}
SECURITY=${OFFPEAK_DEBIAN_SECURITY_MIRROR:-$(host_source "$SUITE-security")}
[[ -n $MIRROR ]] || die "no apt source for $SUITE on this host: set OFFPEAK_DEBIAN_MIRROR to a Debian mirror URL"

TAR=$BASE_DIR/rootfs.tar
if [[ -s $TAR && -s $TAR.sha256 && ${OFFPEAK_REFRESH_BASE:-0} != 1 ]]; then
  skip_step "base root filesystem" "cached $TAR ($(du -h "$TAR" | cut -f1), built $(date -r "$TAR" '+%F %H:%M'); OFFPEAK_REFRESH_BASE=1 rebuilds it)"
else
  step "base root filesystem: debootstrap --variant=minbase $SUITE" 10-debootstrap
  work=$BASE_DIR/rootfs.tmp
  if [[ -d $work ]]; then  # a previous run stopped half-way: unmount whatever it left mounted, then remove it
    findmnt -rn -o TARGET | grep -F "$work/" | sort -r | xargs -r umount -l || true
    rm -rf --one-file-system "$work"
  fi
  q debootstrap --variant=minbase --include="$BASE_PACKAGES" "$SUITE" "$work" "$MIRROR"
  log "  debootstrap done ($(($(date +%s) - STEP_T)) s); applying $SUITE-updates and $SUITE-security"
  # the same apt sources as Debian's official images (deb822), then the updates published since the point release
  rm -f "$work/etc/apt/sources.list"
  {
    printf 'Types: deb\nURIs: %s\nSuites: %s %s-updates\nComponents: main\nSigned-By: %s\n' \
      "$MIRROR" "$SUITE" "$SUITE" /usr/share/keyrings/debian-archive-keyring.gpg
    if [[ -n $SECURITY && $SECURITY != none ]]; then
      printf '\nTypes: deb\nURIs: %s\nSuites: %s-security\nComponents: main\nSigned-By: %s\n' \
        "$SECURITY" "$SUITE" /usr/share/keyrings/debian-archive-keyring.gpg
    fi
  } >"$work/etc/apt/sources.list.d/debian.sources"
  # slim like debian:*-slim: no man pages, docs (copyright files stay), info or translations, now or later
  cat >"$work/etc/dpkg/dpkg.cfg.d/offpeak-slim" <<'EOF'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/info/*
path-exclude /usr/share/locale/*
path-exclude /usr/share/lintian/*
EOF
  in_root() { chroot "$work" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin DEBIAN_FRONTEND=noninteractive "$@"; }
  q in_root apt-get update
  q in_root apt-get -y -o Dpkg::Options::=--force-confold upgrade
  # what the image is made of: package versions and the Release files they came from
  # shellcheck disable=SC2016  # dpkg-query's own ${field} syntax
  in_root dpkg-query -W -f='${Package}\t${Version}\n' | sort >"$BASE_DIR/packages.txt"
  for rel in "$work"/var/lib/apt/lists/*_InRelease; do
    awk -F': ' '/^Codename:/ { c = $2 } /^Suite:/ { s = $2 } /^Version:/ { v = " " $2 } /^Date:/ { d = $2 }
                /^(MD5Sum|SHA256):/ { exit } END { printf "%s (%s)%s, %s\n", c, s, v, d }' "$rel"
  done >"$BASE_DIR/release.txt"
  q in_root apt-get clean
  rm -rf "$work"/var/lib/apt/lists/* "$work"/var/cache/apt/*.bin "$work"/var/cache/debconf/*-old \
         "$work"/var/log/* "$work"/etc/machine-id "$work"/etc/resolv.conf
  find "$work/usr/share/doc" -mindepth 1 -not -name copyright -not -type d -delete
  find "$work/usr/share/doc" -mindepth 1 -type d -empty -delete
  rm -rf "$work"/usr/share/man/* "$work"/usr/share/info/* "$work"/usr/share/locale/* "$work"/usr/share/lintian/*
  : >"$work/etc/hostname"
  tar --numeric-owner --sort=name --xattrs -C "$work" \
      --exclude='./dev/*' --exclude='./proc/*' --exclude='./sys/*' --exclude='./run/*' --exclude='./tmp/*' \
      -cf "$TAR.tmp" .
  sha256sum "$TAR.tmp" | cut -d' ' -f1 >"$TAR.sha256"
  mv "$TAR.tmp" "$TAR"
  printf 'mirror: %s\nsecurity: %s\nbuilt: %s\n' "$MIRROR" "${SECURITY:-none}" "$(date -u +%FT%TZ)" >"$BASE_DIR/source.txt"
  rm -rf --one-file-system "$work"
  done_step "$(du -h "$TAR" | cut -f1), $(wc -l <"$BASE_DIR/packages.txt") packages, python3 $(awk '$1=="python3.11"{print $2}' "$BASE_DIR/packages.txt")"
fi
sed 's/^/  /' "$BASE_DIR/release.txt"
ROOTFS_SHA=$(cat "$TAR.sha256")

# ---- 2. base image -------------------------------------------------------------------------------------------------
label() {  # label IMAGE KEY: a label of a local image, empty if the image or the label is missing
  "${BUILDAH[@]}" inspect --type image --format "{{index .OCIv1.Config.Labels \"$2\"}}" "$1" 2>/dev/null || true
}
if [[ $(label "$BASE_IMAGE" io.offpeak.rootfs.sha256) == "$ROOTFS_SHA" ]]; then
  skip_step "base image $BASE_IMAGE" "already imported from this root filesystem"
else
  step "base image $BASE_IMAGE (buildah from scratch + add)" 20-base-image
  "${BUILDAH[@]}" rm offpeak-base-import >/dev/null 2>&1 || true
  q "${BUILDAH[@]}" from --name offpeak-base-import scratch
  q "${BUILDAH[@]}" add offpeak-base-import "$TAR" /
  py=$(awk '$1=="python3.11"{print $2}' "$BASE_DIR/packages.txt")
  q "${BUILDAH[@]}" config \
      --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin --env LANG=C.UTF-8 \
      --cmd '["python3"]' --created-by "docker/build-image.sh: debootstrap --variant=minbase $SUITE" \
      --label io.offpeak.rootfs.sha256="$ROOTFS_SHA" --label io.offpeak.debian.suite="$SUITE" \
      --label io.offpeak.debian.python3="$py" \
      --label io.offpeak.debian.release="$(tr '\n' ';' <"$BASE_DIR/release.txt")" \
      offpeak-base-import
  # the root filesystem's tar mtime as the creation time: the same tar gives the same image ID
  q "${BUILDAH[@]}" commit --rm --timestamp "$(stat -c %Y "$TAR")" offpeak-base-import "$BASE_IMAGE"
  done_step "$("${BUILDAH[@]}" inspect --type image --format '{{.FromImageID}}' "$BASE_IMAGE" | cut -c1-12)"
fi

# ---- 3. offpeak images ---------------------------------------------------------------------------------------------
# build context: pyproject.toml, README.md, the package roots pyproject.toml lists, and docker/requirements.lock
# (the pip constraints; left out with OFFPEAK_RELOCK=1)
RELOCK=${OFFPEAK_RELOCK:-0}
LOCK=docker/requirements.lock
[[ $RELOCK != 1 ]] || [[ " $TARGETS " == *" extract "* ]] || die "OFFPEAK_RELOCK=1 needs the extract target"
CONTEXT_LOCK=$LOCK
if [[ $RELOCK == 1 ]]; then CONTEXT_LOCK=''; fi
mapfile -t ROOTS < <(python3 - <<'EOF'
import tomllib
find = tomllib.load(open("pyproject.toml", "rb"))["tool"]["setuptools"]["packages"]["find"]
for root in find["where"]:
    print("offpeak" if root == "." else root)
EOF
)
IGNORE=$CACHE/Containerfile.debian.ignore
{
  echo '**'
  printf '!%s\n' pyproject.toml README.md $CONTEXT_LOCK "${ROOTS[@]/%//}"
  printf '%s\n' '**/__pycache__' '**/*.pyc' '**/tests/' '**/*.egg-info'
} >"$IGNORE"
context_hash() {
  {
    echo "lock ${CONTEXT_LOCK:-none}"
    find pyproject.toml README.md $CONTEXT_LOCK "$CONTAINERFILE" "${ROOTS[@]}" \
      \( -name __pycache__ -o -name tests -o -name '*.egg-info' \) -prune -o -type f ! -name '*.pyc' -print 2>/dev/null |
      LC_ALL=C sort | xargs -d '\n' sha256sum
    echo "base $("${BUILDAH[@]}" inspect --type image --format '{{.FromImageID}}' "$BASE_IMAGE")"
  } | sha256sum | cut -c1-16
}
VERSION=$(python3 -c 'import tomllib; print(tomllib.load(open("pyproject.toml", "rb"))["project"]["version"])')
INPUTS=$(context_hash)
HOST_CA=${PIP_CERT:-${SSL_CERT_FILE:-/etc/ssl/certs/ca-certificates.crt}}

tag_of() { [[ $1 == runtime ]] && echo "$REPO:$VERSION" || echo "$REPO:$VERSION-$1"; }
for target in $TARGETS; do
  [[ $target == runtime || $target == extract ]] || die "unknown target $target (runtime, extract)"
  tag=$(tag_of "$target")
  if [[ ${OFFPEAK_REBUILD:-0} != 1 && $(label "$tag" io.offpeak.inputs) == "$INPUTS-$target" ]]; then
    skip_step "image $tag" "its inputs are unchanged ($INPUTS); OFFPEAK_REBUILD=1 rebuilds it"
    continue
  fi
  step "image $tag (buildah bud --target $target)" "30-build-$target"
  old=$("${BUILDAH[@]}" inspect --type image --format '{{.FromImageID}}' "$tag" 2>/dev/null || true)
  args=(--isolation chroot -f "$CONTAINERFILE" --ignorefile "$IGNORE" --target "$target"
        --build-arg BASE="$BASE_IMAGE"
        -v "$CACHE/pip:/var/cache/offpeak-pip" --build-arg PIP_CACHE_DIR=/var/cache/offpeak-pip
        --label io.offpeak.inputs="$INPUTS-$target" --label org.opencontainers.image.version="$VERSION"
        -t "$tag")
  # pip in the build stages trusts what this host trusts (a TLS-intercepting proxy's CA included); the final
  # images get neither the bundle nor the variable
  [[ -s $HOST_CA ]] && args+=(-v "$HOST_CA:/etc/offpeak-build-ca.crt:ro" --build-arg PIP_CERT=/etc/offpeak-build-ca.crt)
  q "${BUILDAH[@]}" bud "${args[@]}" .
  new=$("${BUILDAH[@]}" inspect --type image --format '{{.FromImageID}}' "$tag")
  if [[ -n $old && $old != "$new" ]]; then  # the image this one replaces, now untagged: free its space
    "${BUILDAH[@]}" rmi "$old" >>"$STEP_LOG" 2>&1 || true
  fi
  done_step "${new:0:12}"
done

if [[ $RELOCK == 1 ]]; then
  step "rewrite $LOCK from $(tag_of extract)" 35-relock
  ctr=$("${BUILDAH[@]}" from --pull=never "$(tag_of extract)")
  {
    echo "# pip constraints for docker/Containerfile.debian: \`pip freeze\` of the extract image (CPython 3.11, Linux"
    echo "# x86_64). Rewritten by \`OFFPEAK_RELOCK=1 bash docker/build-image.sh\` on $(date -u +%F); a package that is"
    echo "# not listed here installs unpinned."
    "${BUILDAH[@]}" run --isolation chroot --user 0:0 "$ctr" -- /opt/venv/bin/pip freeze --all --exclude offpeak --exclude pip
  } >"$LOCK.tmp" 2>>"$STEP_LOG"
  "${BUILDAH[@]}" rm "$ctr" >>"$STEP_LOG"
  mv "$LOCK.tmp" "$LOCK"
  done_step "$(grep -vc '^#' "$LOCK") pins; run the script again to build both images from it"
fi

# ---- 4. smoke runs: as the chart runs the image (read-only root, /tmp tmpfs, UID 10001), without network ----------
if [[ ${OFFPEAK_SMOKE:-1} != 0 ]]; then
  # podman's defaults first; then runc (crun refuses hybrid cgroup v1/v2 hosts) and ulimits no higher than this
  # process's hard limits (podman asks for 1048576 open files and processes, which needs CAP_SYS_RESOURCE)
  step "podman run: find a runtime and limits this host accepts" 40-smoke-probe
  probe_tag=$(tag_of "${TARGETS%% *}")
  RUN=()
  limits=(--ulimit "nofile=$(ulimit -Hn):$(ulimit -Hn)" --ulimit nproc=4096:4096)
  for runtime in '' runc; do
    for with_limits in 0 1; do
      try=("${PODMAN[@]}")
      if [[ -n $runtime ]]; then try+=(--runtime "$runtime"); fi
      try+=(run --rm --network none --read-only --tmpfs /tmp)
      if ((with_limits)); then try+=("${limits[@]}"); fi
      echo "+ ${try[*]} --entrypoint true $probe_tag" >>"$STEP_LOG"
      if "${try[@]}" --entrypoint true "$probe_tag" >>"$STEP_LOG" 2>&1; then RUN=("${try[@]}"); break 2; fi
    done
  done
  ((${#RUN[@]})) || die "podman cannot run a container here (see $STEP_LOG)"
  done_step "${RUN[*]}"
  out=$(mktemp -d) && chmod 0777 "$out"
  for target in $TARGETS; do
    tag=$(tag_of "$target")
    step "smoke run $tag" "41-smoke-$target"
    "${RUN[@]}" "$tag" --help >"$out/help.txt" 2>>"$STEP_LOG"
    head -n 3 "$out/help.txt" | sed 's/^/  | /'
    uid=$("${RUN[@]}" --entrypoint id "$tag" -u 2>>"$STEP_LOG")
    [[ $uid == 10001 ]] || die "$tag runs as UID $uid, the chart expects 10001"
    "${RUN[@]}" --entrypoint python "$tag" /opt/offpeak/offpeak.pyz --help >/dev/null 2>>"$STEP_LOG"
    if [[ $target == extract ]]; then
      "${RUN[@]}" -v "$out:/out" "$tag" extract --torchvision resnet18 --batch-size 32 --out /out/resnet18.json.gz \
        >>"$STEP_LOG" 2>&1
      "${RUN[@]}" "$tag" predict --torchvision resnet18 --batch-size 32 --gpu A100 --steps 100 --json \
        >"$out/predict-extract.json" 2>>"$STEP_LOG"
      sed 's/^/  | /' "$out/predict-extract.json"
    fi
    done_step "offpeak --help, UID $uid, the bundle /opt/offpeak/offpeak.pyz runs"
  done
  # the runtime image has no torch: it predicts from the graph the extract image wrote, as the operator does
  if [[ -s $out/resnet18.json.gz && " $TARGETS " == *" runtime "* ]]; then
    tag=$(tag_of runtime)
    step "smoke run $tag: predict --graph (graph from the extract image)" 42-smoke-predict-graph
    "${RUN[@]}" -v "$out:/out:ro" "$tag" predict --graph /out/resnet18.json.gz --gpu A100 --steps 100 --json \
      >"$out/predict-runtime.json" 2>>"$STEP_LOG"
    sed 's/^/  | /' "$out/predict-runtime.json"
    if cmp -s "$out/predict-runtime.json" "$out/predict-extract.json"; then
      done_step "the same prediction as the extract image's"
    else
      done_step "WARNING: differs from the extract image's prediction"
    fi
  fi
  rm -rf "$out"
fi

# ---- 5. what was built ---------------------------------------------------------------------------------------------
log "images (storage driver $DRIVER; sizes are uncompressed):"
"${PODMAN[@]}" images --format '  {{.Repository}}:{{.Tag}}  {{.ID}}  {{.Size}}' | grep -E "^  ($REPO|${BASE_IMAGE%:*}):" || true
for target in $TARGETS; do
  tag=$(tag_of "$target")
  log "$tag: image ID (config digest, kept by a push) sha256:$("${PODMAN[@]}" image inspect --format '{{.ID}}' "$tag")"
  log "$tag: local manifest digest $("${PODMAN[@]}" image inspect --format '{{.Digest}}' "$tag") (a registry's differs: it compresses the layers)"
done
log "done in $(($(date +%s) - T_START)) s; run one with: ${RUN[*]:-podman --storage-driver $DRIVER run --rm} $(tag_of runtime) --help"
