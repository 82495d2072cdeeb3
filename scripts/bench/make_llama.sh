#!/usr/bin/env bash
# Exports the scale-bench Llama into target/bench/ (git-ignored): the fixtures' HF
# LlamaForCausalLM training graph (forward + loss + backward, route make_fx, dropout 0,
# parameters as graph inputs, so the file holds no weights) at issue 10's size: 8 layers,
# hidden 512, intermediate 1376, 8 heads, 8 kv heads, vocab 10000, seq 512, batch 1
# (35.55M parameters; issue 10 quotes 35.7M and 272 MiB of parameters + gradients).
#
#   bash scripts/bench/make_llama.sh           # target/bench/llama_8l.onnx
#   CHECK=1 bash scripts/bench/make_llama.sh   # also check loss and gradients on ORT against torch
#   FORCE=1 bash scripts/bench/make_llama.sh   # regenerate even if present
#
# Idempotent: skipped when the file exists (and CHECK is unset). Uses the fixtures' pinned torch
# stack (.venv-fixtures/main, created by scripts/fixtures/make_fixtures.sh's ensure_venv logic;
# override with FIXTURES_MAIN_VENV). Then: cargo bench --bench scale -- llama
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
out="$root/target/bench"
file="$out/llama_8l.onnx"
mkdir -p "$out"
if [ -f "$file" ] && [ -z "${FORCE:-}" ] && [ -z "${CHECK:-}" ]; then
  echo "make_llama: $file exists, skipping"
  exit 0
fi

who=make_llama
# shellcheck source=torch_venv.sh
. "$here/torch_venv.sh"
args=(--out "$file" --layers 8 --hidden 512 --intermediate 1376 --heads 8 --kv-heads 8
      --vocab 10000 --ctx 512 --batch 1)
[ -n "${FORCE:-}" ] && args+=(--force)
[ -n "${CHECK:-}" ] && args+=(--check)
"$venv/bin/python" "$here/gen_llama.py" "${args[@]}"
echo "make_llama: done; run: cargo bench --bench scale -- llama"
