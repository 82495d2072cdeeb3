#!/usr/bin/env bash
# Builds the `memprobe` helper used by alloc_probe.py / alloc_sim.py in a scratch crate outside the
# repository (so the workspace is untouched) and prints the binary's path.
# Usage: bash scripts/ort_probe/memprobe/build.sh [SCRATCH_DIR]   (default /tmp/memprobe)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../../.." && pwd)"
dir="${1:-/tmp/memprobe}"
mkdir -p "$dir/src"
cat > "$dir/Cargo.toml" <<TOML
[package]
name = "memprobe"
version = "0.1.0"
edition = "2021"
[dependencies]
ckpt-runtime = { path = "$repo/runtime" }
serde_json = "1"
[workspace]
TOML
cp "$here/main.rs" "$dir/src/main.rs"
cp "$repo/Cargo.lock" "$dir/Cargo.lock"
(cd "$dir" && cargo build --quiet 1>&2)
echo "$dir/target/debug/memprobe"
