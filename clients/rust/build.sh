#!/usr/bin/env bash
# Build the Rust test client once per content, and reuse it from any clone on this machine.
# The binary is cached as $RUST_CACHE/bin-<hash of Cargo.toml, Cargo.lock and src/>; cargo's own
# target dir (dependencies: about 360 crates, 13 min the first time here) lives there too, so a fresh
# clone with the same sources links the cached binary in under a second.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cache="${RUST_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/rocketmq-ha-refcluster/rust}"
hash=$(cd "$here" && cat Cargo.toml Cargo.lock $(find src -type f | sort) | sha256sum | cut -c1-16)
bin="$cache/bin-$hash"
link="$here/target/release/rmq-rust-client"
mkdir -p "$cache" "$(dirname "$link")"
if [ ! -x "$bin" ]; then
  command -v cargo >/dev/null || { echo "error: cargo not found; install Rust (rustup.rs) or run the tests with RUST_CLIENT=skip" >&2; exit 1; }
  echo "==> building clients/rust (sources $hash; the first build on a machine downloads and compiles about 360 crates, ~13 min here)"
  CARGO_TARGET_DIR="$cache/target" cargo build --release --locked --manifest-path "$here/Cargo.toml"
  cp "$cache/target/release/rmq-rust-client" "$bin.tmp" && mv "$bin.tmp" "$bin"
fi
ln -sfn "$bin" "$link"
echo "rust client: $link -> $bin"
