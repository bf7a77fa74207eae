#!/usr/bin/env bash
# make deploy-test: build the adk-mesh image and run deploy/compose.yaml with podman-compose,
# then tests/deploy/test_compose.py (a conversation from the host, its trace, a drain).
#
# This kind of sandbox has no container registry and no Docker engine, so:
#   - podman, runc and debootstrap come from Debian (installed here when missing, as root);
#   - the base image is a Debian bookworm rootfs made with debootstrap from the mirror apt
#     uses, imported with `podman import` once (cached: the image stays in podman's store)
#     and passed as BASE_IMAGE; PostgreSQL's stand-in is built on it too;
#   - pip inside the build reaches PyPI with the machine's CA bundle, as the `ca` build secret;
#   - podman reads its sandbox quirks from tests/deploy/containers.conf (CONTAINERS_CONF).
# None of this is in deploy/: users build with the default base image and no secret.
#
# Environment: PY (the venv's python, with podman-compose), ADK_MESH_IMAGE (the tag built),
# ADK_MESH_DEPLOY_REBUILD_BASE=1 to make the base image again.
set -euo pipefail
cd "$(dirname "$0")/../.."
HERE=tests/deploy
PY=${PY:-.venv/bin/python}
export CONTAINERS_CONF="$PWD/$HERE/containers.conf"
export ADK_MESH_IMAGE=${ADK_MESH_IMAGE:-localhost/adk-mesh:deploy-test}
BASE_IMAGE=localhost/adk-mesh-base:bookworm
POSTGRES_IMAGE=localhost/adk-mesh-test-postgres:15
export ADK_MESH_TEST_POSTGRES_IMAGE=$POSTGRES_IMAGE
CA_BUNDLE=/etc/ssl/certs/ca-certificates.crt

started=$SECONDS
step() { printf '== deploy-test: %s (%ss)\n' "$1" "$((SECONDS - started))"; }

# --- tools --------------------------------------------------------------------------------
missing=()
for tool in podman runc debootstrap; do
    command -v "$tool" >/dev/null || missing+=("$tool")
done
if ((${#missing[@]})); then
    step "installing ${missing[*]} with apt"
    if [ "$(id -u)" != 0 ]; then
        echo "deploy-test: ${missing[*]} missing; install them (apt-get install podman runc debootstrap)" >&2
        exit 2
    fi
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq podman runc debootstrap >/dev/null
fi
podman --version

# --- base image: debootstrap + import, once -----------------------------------------------
debian_mirror() {
    # The Debian mirror apt uses here (deb822 or one-line sources), else deb.debian.org.
    local uri
    uri=$(grep -hsE '^\s*URIs:' /etc/apt/sources.list.d/*.sources 2>/dev/null \
        | awk '{print $2}' | grep -v -- '-security' | head -1 || true)
    if [ -z "$uri" ]; then
        uri=$(grep -hsE '^\s*deb\s' /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null \
            | awk '{for (i = 2; i <= NF; i++) if ($i ~ /^https?:/) {print $i; exit}}' \
            | grep -v -- '-security' | head -1 || true)
    fi
    echo "${uri:-http://deb.debian.org/debian}"
}

if [ "${ADK_MESH_DEPLOY_REBUILD_BASE:-0}" = 1 ] || ! podman image exists "$BASE_IMAGE"; then
    mirror=$(debian_mirror)
    step "making $BASE_IMAGE with debootstrap from $mirror"
    rootfs=$(mktemp -d /var/tmp/adk-mesh-rootfs.XXXXXX)
    trap 'rm -rf "$rootfs"' EXIT
    debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates \
        bookworm "$rootfs" "$mirror" >"$rootfs.log" 2>&1 \
        || { tail -30 "$rootfs.log"; exit 1; }
    rm -f "$rootfs.log"
    # What a slim image leaves out: package caches, documentation, translations.
    rm -rf "$rootfs"/var/cache/apt/* "$rootfs"/var/lib/apt/lists/* \
        "$rootfs"/usr/share/doc/* "$rootfs"/usr/share/man/* "$rootfs"/usr/share/locale/*
    tar -C "$rootfs" -c . | podman import --change 'CMD ["/bin/bash"]' - "$BASE_IMAGE" >/dev/null
    rm -rf "$rootfs"
    trap - EXIT
fi

# --- images -------------------------------------------------------------------------------
step "building $ADK_MESH_IMAGE"
secret=()
[ -s "$CA_BUNDLE" ] && secret=(--secret "id=ca,src=$CA_BUNDLE")
# --format docker keeps the HEALTHCHECK (the OCI format has none).
podman build --quiet --format docker -f deploy/container/Containerfile \
    --build-arg "BASE_IMAGE=$BASE_IMAGE" \
    --build-arg "REVISION=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)" \
    --build-arg "CREATED=$(date -u +%Y-%m-%dT%H:%M:%SZ)" \
    "${secret[@]}" -t "$ADK_MESH_IMAGE" . >/dev/null

if ! podman image exists "$POSTGRES_IMAGE"; then
    step "building $POSTGRES_IMAGE (the PostgreSQL stand-in)"
    podman build --quiet -f "$HERE/postgres.Containerfile" --build-arg "BASE_IMAGE=$BASE_IMAGE" \
        -t "$POSTGRES_IMAGE" "$HERE" >/dev/null
fi

# --- stacks a killed run left behind ------------------------------------------------------
# test_compose.py names its project after its process (adk-mesh-deploy-test-<pid>) and takes
# it down when it ends; a run killed outright (SIGKILL, a CI timeout) cannot, and its pod still
# holds the host ports and starts containers beside the next stack. Remove every such stack
# whose process is gone before this run starts its own.
stale_pid() {  # the pid in an object's name, if that process no longer runs
    local pid
    pid=$(sed -nE 's/.*adk-mesh-deploy-test-([0-9]+).*/\1/p' <<<"$1")
    [ -n "$pid" ] && ! kill -0 "$pid" 2>/dev/null
}
remove_stale() {  # remove_stale KIND LIST-ARGS... : each listed name of a dead run, removed
    local kind=$1 name
    shift
    while read -r name; do
        if [ -n "$name" ] && stale_pid "$name"; then
            echo "deploy-test: removing $kind $name of a run that is gone"
            podman $kind rm -f "$name" >/dev/null || true
        fi
    done < <("$@" 2>/dev/null || true)
}
remove_stale container podman ps -a --format '{{.Names}}' --filter name=adk-mesh-deploy-test-
remove_stale pod podman pod ps --format '{{.Name}}' --filter name=adk-mesh-deploy-test-
remove_stale network podman network ls --format '{{.Name}}' --filter name=adk-mesh-deploy-test-
remove_stale volume podman volume ls --format '{{.Name}}' --filter name=adk-mesh-deploy-test-

# --- the stack ----------------------------------------------------------------------------
step "running $HERE/test_compose.py"
status=0
ADK_MESH_DEPLOY_TEST=1 "$PY" -m pytest "$HERE" -p no:cacheprovider -v || status=$?
step "done (exit $status)"
exit "$status"
