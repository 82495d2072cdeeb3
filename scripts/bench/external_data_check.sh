#!/usr/bin/env bash
# Issue 11's end-to-end check on GPT-2 small with external data (a bench, not CI: minutes, GBs):
# the model's weights in a .data file, planned and validated from an unrelated cwd, the output
# written to a third directory, then onnx.checker's full check and an ORT load from /.
#
#   bash scripts/bench/make_gpt2.sh 12 && bash scripts/bench/external_data_check.sh [CEILING]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
ceiling="${1:-90%}"
py="$root/.venv/bin/python"
bin="${CKPT_OPT_BIN:-$root/target/release/ckpt-opt}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/model" "$work/cwd" "$work/out"
"$py" "$root/scripts/bench/external_data.py" "$root/target/bench/gpt2_12l.onnx" "$work/model/gpt2.onnx"
# A decoy of the same name in the cwd: the weights must come from the model's directory.
cp "$work/model/gpt2.onnx.data" "$work/cwd/gpt2.onnx.data"
"$py" -c "import numpy as np,sys; p=sys.argv[1]; a=np.fromfile(p,np.uint8); a[:]=7; a.tofile(p)" "$work/cwd/gpt2.onnx.data"
cd "$work/cwd"
start=$(date +%s)
"$bin" ../model/gpt2.onnx --ceiling "$ceiling" -o ../out/gpt2.ckpt.onnx --validate --receipt ../out/receipt.json
echo "external_data_check: main job took $(( $(date +%s) - start )) s"
cd /
"$py" - "$work/out/gpt2.ckpt.onnx" "$work/out/receipt.json" <<'PY'
import json, sys
import onnx, onnxruntime as ort
out, receipt = sys.argv[1], sys.argv[2]
onnx.checker.check_model(out, full_check=True)
so = ort.SessionOptions()
so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
ort.InferenceSession(out, so, providers=["CPUExecutionProvider"])
r = json.load(open(receipt))
print("external_data_check: full check passed, ORT loads it from /;",
      "status", r["status"], "| data", json.dumps(r.get("output_data")),
      "| predicted", r["predicted_peak_bytes"], "| memory", json.dumps(r.get("memory", {}).get("rewritten")))
PY
