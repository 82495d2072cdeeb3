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
"${CARGO_TARGET_DIR:-target}/release/ckpt-opt" examples/gpt2_4l_train.onnx --ceiling 80% \
  -o target/example/gpt2_4l_train.ckpt.onnx --validate --receipt target/example/receipt.json
echo "receipt: target/example/receipt.json"

# Deploy: 10 training steps of the output through the runner (ckpt_opt.Session), under the
# arena cap the output records.
"$root/.venv/bin/python" -m ckpt_opt.run target/example/gpt2_4l_train.ckpt.onnx --steps 10 \
  --int-high input_ids=512 --int-high labels=512

# Decisions, not one plan: the frontier of the same example (plot in target/example/frontier/),
# and tail-only plans for the shape buckets of a bundled trace on the symbolic GPT-2.
"${CARGO_TARGET_DIR:-target}/release/ckpt-opt" frontier examples/gpt2_4l_train.onnx --points 6 \
  --out target/example/frontier
"${CARGO_TARGET_DIR:-target}/release/ckpt-opt" buckets tests/fixtures/symbolic/gpt2_d0_dynamic.onnx \
  --dim-map seq=max_seq_len,batch=microbatch_size --trace examples/trace.csv --ceiling 3500000 \
  --validate --out target/example/buckets
echo "frontier: target/example/frontier/frontier.svg; buckets: target/example/buckets/manifest.json"
