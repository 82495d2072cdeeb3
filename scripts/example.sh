#!/usr/bin/env bash
# The main job end to end on the bundled example: plan, rewrite, validate on ONNX Runtime,
# write the receipt. Installs what it needs first (scripts/setup.sh).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
"$root/scripts/setup.sh"
export ORT_DYLIB_PATH="${ORT_DYLIB_PATH:-$(ls "$root"/.venv/lib/python3*/site-packages/onnxruntime/capi/libonnxruntime.so.* 2>/dev/null | head -n 1)}"
cargo build --release --locked --quiet
mkdir -p target/example
"${CARGO_TARGET_DIR:-target}/release/ckpt-opt" examples/gpt2_4l_train.onnx --ceiling 90% \
  -o target/example/gpt2_4l_train.ckpt.onnx --validate --receipt target/example/receipt.json
echo "receipt: target/example/receipt.json"
