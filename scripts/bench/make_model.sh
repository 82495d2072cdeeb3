#!/usr/bin/env bash
# Exports a scale-bench model into target/bench/ (git-ignored): a fixture's training graph
# (forward + loss + backward, the fixture's route, dropout 0, parameters as graph inputs, so
# the file holds no weights) at issue 10's sizes:
#   llama_8l   HF LlamaForCausalLM, 8 layers, hidden 512, intermediate 1376, 8 heads, 8 kv
#              heads, vocab 10000, seq 512, batch 1 (35.55M parameters; issue 10 quotes 35.7M
#              and 272 MiB of parameters + gradients)
#   resnet18   torchvision ResNet-18 (width 64), 8x3x128x128, 1000 classes (11.69M parameters)
#   hf_gpt2_12l  HF GPT2LMHeadModel, GPT-2 small: 12 layers, 12 heads, 768 embd, vocab 50257,
#              ctx 1024, batch 1, its LM head tied to the token embedding as PyTorch trains it
#              (124.44M parameters: one input and one gradient for the shared weight)
#   bert_2l    HF BERT (sequence classification), 2 layers, hidden 768, 12 heads,
#              intermediate 3072, vocab 30522, seq 128, batch 8, 2 classes
#
#   bash scripts/bench/make_model.sh NAME           # target/bench/NAME.onnx
#   CHECK=1 bash scripts/bench/make_model.sh NAME   # also check loss and gradients on ORT against torch
#   FORCE=1 bash scripts/bench/make_model.sh NAME   # regenerate even if present
#   TORCH_ANCHOR=1 bash scripts/bench/make_model.sh NAME   # PyTorch's peak and FLOPs for one step
#              of NAME, with and without HF per-layer checkpointing (torch_anchor.py; HF models)
#
# Idempotent: skipped when the file exists (and CHECK is unset). Uses the fixtures' pinned torch
# stack (.venv-fixtures/main, created by scripts/fixtures/make_fixtures.sh's ensure_venv logic;
# override with FIXTURES_MAIN_VENV). Then: cargo bench --bench scale -- NAME
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
name="${1:-}"
case "$name" in
  llama_8l) args=(--model llama --size n_layer=8 --size hidden=512 --size intermediate=1376
                  --size n_head=8 --size n_kv_head=8 --size vocab=10000 --size ctx=512
                  --size batch=1) ;;
  resnet18) args=(--model resnet18 --size width=64 --size image=128 --size batch=8
                  --size classes=1000) ;;
  hf_gpt2_12l) args=(--model hf_gpt2 --size n_layer=12 --size n_head=12 --size n_embd=768
                     --size vocab=50257 --size ctx=1024 --size batch=1) ;;
  bert_2l) args=(--model bert --size n_layer=2 --size hidden=768 --size n_head=12
                 --size intermediate=3072 --size vocab=30522 --size ctx=128 --size batch=8
                 --size classes=2) ;;
  *) echo "make_model: usage: make_model.sh llama_8l|resnet18|hf_gpt2_12l|bert_2l (got '${name}')" >&2; exit 2 ;;
esac
if [ -n "${TORCH_ANCHOR:-}" ]; then
  who=make_model
  # shellcheck source=torch_venv.sh
  . "$here/torch_venv.sh"
  exec "$venv/bin/python" "$here/torch_anchor.py" "${args[@]}"
fi
out="$root/target/bench"
file="$out/$name.onnx"
mkdir -p "$out"
if [ -f "$file" ] && [ -z "${FORCE:-}" ] && [ -z "${CHECK:-}" ]; then
  echo "make_model: $file exists, skipping"
  exit 0
fi

who=make_model
# shellcheck source=torch_venv.sh
. "$here/torch_venv.sh"
args+=(--out "$file")
[ -n "${FORCE:-}" ] && args+=(--force)
[ -n "${CHECK:-}" ] && args+=(--check)
"$venv/bin/python" "$here/gen_bench.py" "${args[@]}"
echo "make_model: done; run: cargo bench --bench scale -- $name"
