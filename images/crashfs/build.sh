#!/usr/bin/env bash
# Build the crash-consistency filesystem once per content, and reuse it from any clone on this machine.
# The binary is cached as $CRASHFS_CACHE/bin-<hash of Cargo.toml, Cargo.lock and src/>; cargo's target
# dir lives there too. Cold build here: about 3 crates' worth of work (fuser, nix, libc: ~1.5 min on 2
# busy cores); with the same sources a fresh clone only links the cached binary.
#   images/crashfs/build.sh        prints the binary's path on its last line
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cache="${CRASHFS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/rocketmq-ha-refcluster/crashfs}"
hash=$(cd "$here" && cat Cargo.toml Cargo.lock $(find src -type f | sort) | sha256sum | cut -c1-16)
bin="$cache/bin-$hash"
mkdir -p "$cache"
if [ ! -x "$bin" ]; then
  command -v cargo >/dev/null || { echo "error: cargo not found; install Rust (rustup.rs) to build images/crashfs" >&2; exit 1; }
  echo "==> building images/crashfs (sources $hash)" >&2
  (cd "$cache" && flock 9 && [ -x "$bin" ] || {
     CARGO_TARGET_DIR="$cache/target" cargo build --release --locked --manifest-path "$here/Cargo.toml" >&2
     cp "$cache/target/release/crashfs" "$bin.tmp" && mv "$bin.tmp" "$bin"; }) 9>"$cache/.lock"
fi
echo "$bin"
