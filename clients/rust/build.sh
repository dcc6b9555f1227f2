#!/usr/bin/env bash
# Build the Rust test client once per content, and reuse it from any clone on this machine.
# The binary is cached as $RUST_CACHE/bin-<hash of Cargo.toml, Cargo.lock and src/>; cargo's own
# target dir (about 360 crates at opt-level 0: 378 CPU-s the first time, Cargo.toml) lives there too, so a
# fresh clone with the same sources links the cached binary in under a second.
#
#   clients/rust/build.sh                 build now (make rust-client)
#   clients/rust/build.sh --background    link the cached binary, or start the build in the background and
#                                         return at once (make test: the Python tiers run meanwhile, and
#                                         tests/integration/rust_client.py waits for the build it finds in
#                                         build/rust-client.pid; its log is build/rust-client.log)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
cache="${RUST_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/rocketmq-ha-refcluster/rust}"
hash=$(cd "$here" && cat Cargo.toml Cargo.lock $(find src -type f | sort) | sha256sum | cut -c1-16)
bin="$cache/bin-$hash"
link="$here/target/release/rmq-rust-client"
mkdir -p "$cache" "$(dirname "$link")"
if [ ! -x "$bin" ]; then
  command -v cargo >/dev/null || { echo "error: cargo not found; install Rust (rustup.rs) or run the tests with RUST_CLIENT=skip" >&2; exit 1; }
  if [ "${1:-}" = "--background" ]; then
    pidfile="$root/build/rust-client.pid"
    mkdir -p "$root/build"
    if [ -f "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null; then
      echo "rust client: already building in the background (pid $(cat "$pidfile"), log build/rust-client.log)"
      exit 0
    fi
    nohup "$0" > "$root/build/rust-client.log" 2>&1 &
    echo $! > "$pidfile"
    echo "rust client: not cached; building in the background (pid $!, log build/rust-client.log); the tests that use it wait for it"
    exit 0
  fi
  echo "==> building clients/rust (sources $hash; the first build on a machine downloads and compiles about 360 crates, about 380 CPU-s)"
  CARGO_TARGET_DIR="$cache/target" cargo build --release --locked --manifest-path "$here/Cargo.toml"
  cp "$cache/target/release/rmq-rust-client" "$bin.tmp" && mv "$bin.tmp" "$bin"
fi
ln -sfn "$bin" "$link"
echo "rust client: $link -> $bin"
