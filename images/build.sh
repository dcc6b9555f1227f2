#!/usr/bin/env bash
# Build the project's container images without any container registry.
#
#   images/build.sh [base|broker|toxiproxy|all|apache|rust]... [--force]
#
#   base       rmqha/base       Debian bookworm minbase + python3, made with debootstrap, `docker import`ed
#   broker     rmqha/broker     base + /opt/venv (Twisted, grpcio from wheels downloaded on the host) + rmqha/broker/, rmqha/controls/, rmqha/proxy/
#   toxiproxy  rmqha/toxiproxy  base + toxiproxy-server (images/toxiproxy, Rust, built on the host)
#   apache     rmqha/apache     base + Debian's openjdk-17-jre-headless + the Apache RocketMQ 4.9.x binary
#                               distribution at ROCKETMQ_HOME (the user's; not part of `all`)
#   rust       rmqha/rust       base + rocketmq-rust's broker binary built by `make peer-broker` (not part of `all`)
#
# Each image is tagged :<content hash of its inputs> and :latest, and carries the
# hash in the label rmqha.inputs. An image whose hash tag exists is not rebuilt,
# so a second run is a no-op. Caches live under build/images/ (git-ignored).
# Environment: FORCE=1 (same as --force), DEBIAN_MIRROR, DOCKER_BUILDKIT (default 0).
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
CACHE="$ROOT/build/images"
LOGS="$CACHE/logs"
FORCE=${FORCE:-0}
export DOCKER_BUILDKIT=${DOCKER_BUILDKIT:-0}
T0=$SECONDS

# ---------------------------------------------------------------- helpers
bold=""; dim=""; red=""; off=""
if [ -t 1 ]; then bold=$'\e[1m'; dim=$'\e[2m'; red=$'\e[31m'; off=$'\e[0m'; fi

say()  { printf '%s[%4ds]%s %s\n' "$dim" $((SECONDS - T0)) "$off" "$*"; }
step() { STEP_NAME=$1; STEP_T=$SECONDS; say "${bold}$1${off}"; }
done_step() { say "  ok: $STEP_NAME ($((SECONDS - STEP_T))s)${1:+ - $1}"; }
die() {
    # die WHAT HINT
    printf '%s[%4ds] error: %s%s\n' "$red" $((SECONDS - T0)) "$1" "$off" >&2
    [ -n "${2:-}" ] && printf '         next: %s\n' "$2" >&2
    exit 1
}
# Prefix every line of a long-running command with the elapsed seconds.
# Lines are cut at 120 characters to keep the output condensed.
stamp() { local line; while IFS= read -r line; do printf '%s[%4ds]%s   %s\n' "$dim" $((SECONDS - T0)) "$off" "${line:0:120}"; done; }

sha() { sha256sum | cut -c1-16; }
tree_hash() {  # tree_hash DIR [find-args...]: hash of relative paths and contents
    local dir=$1; shift
    [ -d "$dir" ] || { echo "absent" | sha; return; }
    (cd "$dir" && find . -type f ! -name '*.pyc' ! -path '*/__pycache__/*' ! -path './target/*' "$@" -print0 \
        | LC_ALL=C sort -z | xargs -0 -r sha256sum) | sha
}
# Untag superseded content-hash tags of a repository (keeps :latest and KEEP).
prune_old() {  # prune_old REPO KEEP_TAG
    local old
    old=$(docker images --format '{{.Repository}}:{{.Tag}}' "$1" | grep -v -e ':latest$' -e ":$2\$" || true)
    [ -z "$old" ] && return
    say "  untagging superseded: $(echo $old)"
    echo "$old" | xargs -r docker rmi >/dev/null 2>&1 || true
}
image_exists() { docker image inspect "$1" >/dev/null 2>&1; }
image_size() { docker image inspect -f '{{.Size}}' "$1" | awk '{printf "%.0f MB", $1/1000000}'; }

# Run `docker build`, showing only the step lines; the full output goes to a log.
docker_build() {  # docker_build NAME CONTEXT ARGS...
    local name=$1 ctx=$2; shift 2
    local log="$LOGS/$name-docker-build.log"
    say "  docker build ($name), full log: ${log#$ROOT/}"
    # --network none: a build must not need the network inside a container.
    if ! docker build --network none "$@" "$ctx" 2>&1 | tee "$log" \
            | grep --line-buffered -E '^(Step [0-9]+/[0-9]+ :|#[0-9]+ \[|Successfully tagged|ERROR|error|twisted [0-9])' \
            | stamp; then
        tail -n 30 "$log" >&2
        die "docker build of $name failed (log: $log)" \
            "read the log above; if the base image is missing run: images/build.sh base --force"
    fi
}

check_docker() {
    command -v docker >/dev/null || die "docker CLI not found" "apt-get install -y docker.io"
    docker info >/dev/null 2>&1 || die "the Docker engine does not answer" \
        "start it (systemctl start docker, or dockerd &) and check 'docker info'"
}

pick_python() {
    if [ -x "$ROOT/.venv/bin/python" ]; then echo "$ROOT/.venv/bin/python"; return; fi
    command -v python3 >/dev/null || die "python3 not found on the host" "apt-get install -y python3 python3-pip"
    echo python3
}

# ---------------------------------------------------------------- base
base_hash() {
    { echo "recipe-v1 bookworm minbase"; cat "$HERE/base/packages.txt" "$HERE/base/mkrootfs.sh"; } | sha
}

build_base() {
    [ -n "${BASE_IMAGE:-}" ] && return  # once per run
    local hash; hash=$(base_hash)
    BASE_IMAGE="rmqha/base:$hash"
    if [ "$FORCE" != 1 ] && image_exists "$BASE_IMAGE"; then
        docker tag "$BASE_IMAGE" rmqha/base:latest
        say "base: $BASE_IMAGE is up to date ($(image_size "$BASE_IMAGE"))"
        return
    fi
    local tarball="$CACHE/base-rootfs-$hash.tar.gz"
    if [ "$FORCE" = 1 ] || [ ! -s "$tarball" ]; then
        if ! command -v debootstrap >/dev/null; then
            step "base: installing debootstrap (apt-get)"
            [ "$(id -u)" = 0 ] || die "debootstrap is not installed" "sudo apt-get install -y debootstrap"
            { apt-get update -qq && apt-get install -y -qq debootstrap; } 2>&1 | stamp \
                || die "could not install debootstrap" "check that Debian mirrors are reachable: apt-get update"
            done_step
        fi
        [ "$(id -u)" = 0 ] || die "debootstrap needs root" "run images/build.sh base as root (or with sudo)"
        step "base: debootstrap bookworm (minbase + $(grep -v '^#' "$HERE/base/packages.txt" | xargs | tr ' ' ','))"
        bash "$HERE/base/mkrootfs.sh" "$tarball.new" 2>&1 | stamp \
            || die "debootstrap failed" \
                   "check that Debian mirrors are reachable: apt-get update (DEBIAN_MIRROR=... overrides the mirror)"
        rm -f "$CACHE"/base-rootfs-*.tar.gz
        mv "$tarball.new" "$tarball"
        done_step "$(du -h "$tarball" | cut -f1) rootfs tarball"
    else
        say "base: reusing cached rootfs ${tarball#$ROOT/}"
    fi
    step "base: docker import -> $BASE_IMAGE"
    docker import \
        --change 'ENV LANG=C.UTF-8' \
        --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
        --change "LABEL rmqha.inputs=$hash" \
        --change 'CMD ["/bin/bash"]' \
        -m "rmqha base: debian bookworm minbase, recipe $hash" \
        "$tarball" "$BASE_IMAGE" >/dev/null \
        || die "docker import failed" "check 'docker info' and free disk space under /var/lib/docker"
    docker tag "$BASE_IMAGE" rmqha/base:latest
    prune_old rmqha/base "$hash"
    done_step "$(image_size "$BASE_IMAGE")"
}

# ---------------------------------------------------------------- broker
# Runtime requirements: the [project] dependencies of pyproject.toml, each at the version requirements.lock
# pins (the ranges are for those who install the package; the image runs what the project tests).
broker_requirements() {
    "$PY" - "$ROOT/pyproject.toml" "$ROOT/requirements.lock" <<'EOF'
import re, sys, tomllib
def norm(name):
    return re.sub(r"[-_.]+", "-", name).lower()
with open(sys.argv[1], "rb") as f:
    deps = tomllib.load(f)["project"]["dependencies"]
with open(sys.argv[2]) as f:
    pins = {norm(x.split("==")[0]): x.strip() for x in f if "==" in x}
out = []
for d in deps:
    name = norm(re.match(r"[A-Za-z0-9_.-]+", d).group(0))
    if name not in pins:
        sys.exit(f"requirements.lock pins no version of {d}: run make lock")
    out.append(pins[name])
print("\n".join(out))
EOF
}

fetch_wheels() {  # -> sets WHEELS dir
    local reqs=$1 rhash
    rhash=$(printf 'cp311-manylinux-x86_64\n%s\n' "$reqs" | sha)
    WHEELS="$CACHE/wheels-$rhash"
    if [ -f "$WHEELS/.complete" ]; then
        say "broker: reusing $(ls "$WHEELS"/*.whl | wc -l) cached wheels (${WHEELS#$ROOT/})"
        return
    fi
    step "broker: pip download wheels for cp311 manylinux x86_64: $(echo "$reqs" | xargs)"
    rm -rf "$WHEELS"; mkdir -p "$WHEELS"
    local req_file="$WHEELS/requirements.txt"
    echo "$reqs" > "$req_file"
    PIP_FIND_LINKS= "$PY" -m pip download --disable-pip-version-check --progress-bar off \
        --only-binary=:all: --implementation cp --python-version 3.11 --abi cp311 \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
        --platform manylinux2014_x86_64 --platform manylinux_2_5_x86_64 --platform manylinux1_x86_64 \
        -r "$req_file" -d "$WHEELS" 2>&1 | grep --line-buffered -E '^(Collecting|Saved|ERROR)' | stamp \
        || die "pip download failed" "check that PyPI is reachable: $PY -m pip download Twisted==26.10.0 -d /tmp/w"
    touch "$WHEELS/.complete"
    done_step "$(ls "$WHEELS"/*.whl | wc -l) wheels"
}

build_broker() {
    build_base
    PY=$(pick_python)
    local reqs; reqs=$(broker_requirements) || die "cannot read dependencies from pyproject.toml" "check pyproject.toml"
    fetch_wheels "$reqs"
    local src_hash hash
    src_hash=$(tree_hash "$ROOT/rmqha/broker"; tree_hash "$ROOT/rmqha/controls"; tree_hash "$ROOT/rmqha/proxy")
    hash=$({ echo "$BASE_IMAGE"; cat "$HERE/broker/Dockerfile"; echo "$reqs"; ls "$WHEELS"; echo "$src_hash"; } | sha)
    local image="rmqha/broker:$hash"
    if [ "$FORCE" != 1 ] && image_exists "$image"; then
        docker tag "$image" rmqha/broker:latest
        say "broker: $image is up to date ($(image_size "$image"))"
        return
    fi
    step "broker: docker build -> $image"
    local ctx="$CACHE/ctx-broker"
    rm -rf "$ctx"; mkdir -p "$ctx/wheels" "$ctx/rmqha/broker" "$ctx/rmqha/controls" "$ctx/rmqha/proxy"
    cp "$HERE/broker/Dockerfile" "$ctx/"
    cp "$WHEELS"/*.whl "$WHEELS/requirements.txt" "$ctx/wheels/"
    cp "$ROOT/rmqha/__init__.py" "$ctx/rmqha/"
    if [ -d "$ROOT/rmqha/broker" ]; then
        tar -C "$ROOT/rmqha/broker" --exclude=__pycache__ --exclude='*.pyc' -cf - . | tar -C "$ctx/rmqha/broker" -xf -
    else
        say "  warning: $ROOT/rmqha/broker is missing; the image carries an empty broker package"
    fi
    # the planted bugs (plantBug=, tests of the audit): the broker loads them by name only when that is set
    tar -C "$ROOT/rmqha/controls" --exclude=__pycache__ --exclude='*.pyc' -cf - . | tar -C "$ctx/rmqha/controls" -xf -
    # the 5.x gRPC proxy runs from the same image (its own compose service)
    tar -C "$ROOT/rmqha/proxy" --exclude=__pycache__ --exclude='*.pyc' -cf - . | tar -C "$ctx/rmqha/proxy" -xf -
    docker_build broker "$ctx" --build-arg "BASE=$BASE_IMAGE" --label "rmqha.inputs=$hash" \
        -t "$image" -t rmqha/broker:latest
    prune_old rmqha/broker "$hash"
    done_step "$(image_size "$image")"
}

# ---------------------------------------------------------------- toxiproxy
build_toxiproxy_binary() {  # -> sets TOXI_BIN
    command -v cargo >/dev/null || die "cargo not found" \
        "install a Rust toolchain (rustup, or apt-get install -y cargo if new enough for axum 0.8)"
    local src="$HERE/toxiproxy" shash
    shash=$({ rustc -V 2>/dev/null; cat "$src/Cargo.toml" "$src/Cargo.lock"; tree_hash "$src/src"; } | sha)
    # per user, not per clone (as clients/rust/build.sh): a fresh clone reuses the binary, and so the image
    local tcache="${TOXI_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/rocketmq-ha-refcluster/toxiproxy}"
    local out="$tcache/bin-$shash"
    TOXI_BIN="$out/toxiproxy-server"
    if [ -x "$TOXI_BIN" ]; then
        say "toxiproxy: reusing cached binary $TOXI_BIN"
        return
    fi
    step "toxiproxy: cargo build --release (images/toxiproxy)"
    local log="$LOGS/toxiproxy-cargo.log"
    CARGO_TARGET_DIR="$tcache/target" cargo build --release --locked \
        --manifest-path "$src/Cargo.toml" 2>&1 | tee "$log" \
        | grep --line-buffered -E '^\s*(Compiling|Finished|error)' | stamp \
        || { tail -n 30 "$log" >&2; die "cargo build of toxiproxy-server failed (log: $log)" \
            "check that crates.io is reachable (cargo fetch --manifest-path images/toxiproxy/Cargo.toml) and read the errors above"; }
    rm -rf "$tcache"/bin-*
    mkdir -p "$out"
    cp "$tcache/target/release/toxiproxy-server" "$TOXI_BIN.tmp" && mv "$TOXI_BIN.tmp" "$TOXI_BIN"
    done_step "$(du -h "$TOXI_BIN" | cut -f1) binary"
}

# The binary's cargo build (CPU) runs beside build_base's debootstrap (network, dpkg): started before the
# base, joined before the image is made. Its output is shown when it ends.
prebuild_toxiproxy() {
    ( build_toxiproxy_binary ) > "$LOGS/toxiproxy-binary.out" 2>&1 &
    TOXI_PID=$!
}

build_toxiproxy() {
    build_base
    if [ -n "${TOXI_PID:-}" ]; then
        local rc=0
        wait "$TOXI_PID" || rc=$?
        TOXI_PID=""
        cat "$LOGS/toxiproxy-binary.out"
        [ "$rc" = 0 ] || exit "$rc"
    fi
    build_toxiproxy_binary
    local hash
    hash=$({ echo "$BASE_IMAGE"; cat "$HERE/toxiproxy/Dockerfile"; sha256sum < "$TOXI_BIN"; } | sha)
    local image="rmqha/toxiproxy:$hash"
    if [ "$FORCE" != 1 ] && image_exists "$image"; then
        docker tag "$image" rmqha/toxiproxy:latest
        say "toxiproxy: $image is up to date ($(image_size "$image"))"
        return
    fi
    step "toxiproxy: docker build -> $image"
    local ctx="$CACHE/ctx-toxiproxy"
    rm -rf "$ctx"; mkdir -p "$ctx"
    cp "$HERE/toxiproxy/Dockerfile" "$TOXI_BIN" "$ctx/"
    docker_build toxiproxy "$ctx" --build-arg "BASE=$BASE_IMAGE" --label "rmqha.inputs=$hash" \
        -t "$image" -t rmqha/toxiproxy:latest
    prune_old rmqha/toxiproxy "$hash"
    done_step "$(image_size "$image")"
}

# ---------------------------------------------------------------- apache
# Debian's openjdk-17-jre-headless and whatever of its dependencies the base image lacks, as .debs: apt on
# the host resolves them against the base image's own dpkg status (not the host's), so the build inside
# `docker build --network none` only runs dpkg -i.
fetch_jre_debs() {  # -> sets DEBS dir
    command -v apt-get >/dev/null || die "apt-get not found" "the apache image takes Debian's JRE: build it on a Debian host"
    local status="$CACHE/base-dpkg-status" dhash
    docker run --rm --network none --entrypoint cat "$BASE_IMAGE" /var/lib/dpkg/status > "$status.new" \
        || die "cannot read the base image's dpkg status" "images/build.sh base --force"
    mv "$status.new" "$status"
    dhash=$({ echo openjdk-17-jre-headless; cat "$status"; apt-cache policy openjdk-17-jre-headless | sed -n 2,3p; } | sha)
    DEBS="$CACHE/debs-$dhash"
    if [ -f "$DEBS/.complete" ]; then
        say "apache: reusing $(ls "$DEBS"/*.deb | wc -l) cached .debs (${DEBS#$ROOT/})"
        return
    fi
    step "apache: apt-get download openjdk-17-jre-headless and the dependencies the base image lacks"
    rm -rf "$DEBS"; mkdir -p "$DEBS/partial"
    # Debug::NoLocking: another apt on the host may hold its locks; this touches neither its status nor
    # its cache (the package caches are off, the archives go to DEBS)
    apt-get install --download-only --no-install-recommends -y -q \
        -o Dir::State::status="$status" -o Dir::Cache::archives="$DEBS" \
        -o Dir::Cache::pkgcache= -o Dir::Cache::srcpkgcache= -o Debug::NoLocking=1 \
        openjdk-17-jre-headless 2>&1 | grep --line-buffered -E '^(Get|E:|W:)' | stamp || true
    ls "$DEBS"/openjdk-17-jre-headless_*.deb >/dev/null 2>&1 \
        || die "apt-get could not download openjdk-17-jre-headless" "apt-get update, then images/build.sh apache again"
    rm -rf "$DEBS/partial" "$DEBS/lock"
    touch "$DEBS/.complete"
    done_step "$(ls "$DEBS"/*.deb | wc -l) .debs, $(du -sh "$DEBS" | cut -f1)"
}

build_apache() {
    [ -n "${ROCKETMQ_HOME:-}" ] || die "images/build.sh apache needs ROCKETMQ_HOME" \
        "ROCKETMQ_HOME=<an Apache RocketMQ 4.9.x binary distribution> images/build.sh apache"
    local home dist
    home=$(cd "$ROCKETMQ_HOME" 2>/dev/null && pwd) || die "ROCKETMQ_HOME=$ROCKETMQ_HOME is not a directory" \
        "point ROCKETMQ_HOME at the unpacked binary distribution (bin/, conf/, lib/)"
    dist=$(cd "$ROOT" && python3 -m rmqha.cluster.implementations.apache_image hash "$home") \
        || die "cannot use $home" "point ROCKETMQ_HOME at the unpacked binary distribution (bin/, conf/, lib/)"
    build_base
    fetch_jre_debs
    local hash image="" ctx="$CACHE/ctx-apache"
    hash=$({ echo "$BASE_IMAGE"; cat "$HERE/apache/Dockerfile" "$HERE/apache/rmqha-run"; ls "$DEBS"; echo "$dist"; } | sha)
    image="rmqha/apache:$hash"
    if [ "$FORCE" != 1 ] && image_exists "$image"; then
        say "apache: $image is up to date ($(image_size "$image")), distribution $home ($dist)"
        return
    fi
    step "apache: docker build -> $image from $home ($dist)"
    rm -rf "$ctx"; mkdir -p "$ctx/debs" "$ctx/rocketmq"
    cp "$HERE/apache/Dockerfile" "$HERE/apache/rmqha-run" "$ctx/"
    cp "$DEBS"/*.deb "$ctx/debs/"
    cp -R "$home/bin" "$home/conf" "$home/lib" "$ctx/rocketmq/"
    docker_build apache "$ctx" --build-arg "BASE=$BASE_IMAGE" --label "rmqha.inputs=$hash" \
        --label "rmqha.distribution=$dist" -t "$image"
    rm -rf "$ctx"
    # older images of the same distribution (a new base or JRE); other distributions keep theirs
    local old
    old=$(docker images --filter "label=rmqha.distribution=$dist" --format '{{.Repository}}:{{.Tag}}' rmqha/apache \
        | grep -v ":$hash\$" || true)
    [ -n "$old" ] && { say "  untagging superseded: $(echo $old)"; echo "$old" | xargs -r docker rmi >/dev/null 2>&1 || true; }
    done_step "$(image_size "$image")"
}

# ---------------------------------------------------------------- rust
# rocketmq-rust's broker as `make peer-broker` built it on this host (Debian bookworm, as the base image):
# nothing but the binary is copied in.
build_rust() {
    local bin sum
    bin=$(cd "$ROOT" && python3 -m rmqha.cluster.implementations.rust_image binary) \
        || die "rocketmq-rust's broker is not built" "make peer-broker (about 40 min on 2 shared cores), then images/build.sh rust"
    sum=$(cd "$ROOT" && python3 -m rmqha.cluster.implementations.rust_image hash "$bin") || die "cannot read $bin" "make peer-broker"
    build_base
    local hash image ctx="$CACHE/ctx-rust"
    hash=$({ echo "$BASE_IMAGE"; cat "$HERE/rust/Dockerfile" "$HERE/rust/rmqha-rust-broker"; echo "$sum"; } | sha)
    image="rmqha/rust:$hash"
    if [ "$FORCE" != 1 ] && image_exists "$image"; then
        say "rust: $image is up to date ($(image_size "$image")), binary $bin ($sum)"
        return
    fi
    step "rust: docker build -> $image from $bin ($sum)"
    rm -rf "$ctx"; mkdir -p "$ctx"
    cp "$HERE/rust/Dockerfile" "$HERE/rust/rmqha-rust-broker" "$ctx/"
    cp "$bin" "$ctx/rocketmq-broker-rust"
    docker_build rust "$ctx" --build-arg "BASE=$BASE_IMAGE" --label "rmqha.inputs=$hash" \
        --label "rmqha.rust-binary=$sum" -t "$image"
    rm -rf "$ctx"
    prune_old rmqha/rust "$hash"
    done_step "$(image_size "$image")"
}

# ---------------------------------------------------------------- main
targets=()
for arg in "$@"; do
    case "$arg" in
        base|broker|toxiproxy|all|apache|rust) targets+=("$arg") ;;
        --force|-f) FORCE=1 ;;
        -h|--help) sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) die "unknown argument: $arg" "usage: images/build.sh [base|broker|toxiproxy|all|apache|rust]... [--force]" ;;
    esac
done

mkdir -p "$CACHE" "$LOGS"
check_docker
[ ${#targets[@]} -gt 0 ] || targets=(all)
case " ${targets[*]} " in *" all "*|*" toxiproxy "*) prebuild_toxiproxy ;; esac
for target in "${targets[@]}"; do
    case "$target" in
        base) build_base ;;
        broker) build_broker ;;
        toxiproxy) build_toxiproxy ;;
        all) build_base; build_broker; build_toxiproxy ;;
        apache) build_apache ;;
        rust) build_rust ;;
    esac
done
say "images ready ($((SECONDS - T0))s): $(docker images --format '{{.Repository}}:{{.Tag}}' 'rmqha/*' | grep -c . ) tags; \
docker images 'rmqha/*' lists them"
