#!/usr/bin/env bash
# Exports the scale-bench models into target/bench/ (git-ignored): the fixtures' hand-written
# GPT-2 training graph (forward + loss + backward, route A, dropout 0, parameters as graph
# inputs, so the files hold no weights) at full size.
#
#   bash scripts/bench/make_gpt2.sh          # both
#   bash scripts/bench/make_gpt2.sh 12       # GPT-2 small: 12 layers, 12 heads, 768 embd, vocab 50257, ctx 1024, batch 1
#   bash scripts/bench/make_gpt2.sh 48       # the same with 48 layers
#   bash scripts/bench/make_gpt2.sh 96       # 96 layers at ctx 256 (~14k nodes: issue 10's < 30 s target)
#   bash scripts/bench/make_gpt2.sh 132      # 132 layers at ctx 256, embd 384 (20.4k nodes: the < 60 s target)
#
# The two deepest are exported at ctx 256, and the deepest at embd 384 (12 heads of 32): the
# export runs the model in torch, and at ctx 1024 the 132-layer one needs more than 19 GiB, at
# ctx 256 and embd 768 more than 15 GiB; at embd 384 it peaks at 6.3 GiB and takes 15 min on 2
# cores. The node count depends on neither.
#   FORCE=1 bash scripts/bench/make_gpt2.sh  # regenerate even if present
#
# Idempotent: a model whose file exists is skipped. Uses the fixtures' pinned torch stack
# (.venv-fixtures/main, created by scripts/fixtures/make_fixtures.sh's ensure_venv logic;
# override with FIXTURES_MAIN_VENV). Then: cargo bench --bench scale
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
which="${1:-all}"
case "$which" in all|12|48|96|132) ;; *) echo "usage: $0 [all|12|48|96|132]" >&2; exit 1;; esac
out="$root/target/bench"
mkdir -p "$out"

want=()
[ "$which" = all ] || [ "$which" = 12 ] && want+=(12)
[ "$which" = all ] || [ "$which" = 48 ] && want+=(48)
[ "$which" = 96 ] && want+=(96)
[ "$which" = 132 ] && want+=(132)
missing=0
for l in "${want[@]}"; do
  [ -f "$out/gpt2_${l}l.onnx" ] && [ -z "${FORCE:-}" ] || missing=1
done
if [ "$missing" = 0 ]; then
  for l in "${want[@]}"; do echo "make_gpt2: $out/gpt2_${l}l.onnx exists, skipping"; done
  exit 0
fi

who=make_gpt2
# shellcheck source=torch_venv.sh
. "$here/torch_venv.sh"
for l in "${want[@]}"; do
  ctx=1024
  [ "$l" -gt 48 ] && ctx=256
  embd=768
  [ "$l" -gt 96 ] && embd=384
  args=(--out "$out/gpt2_${l}l.onnx" --layers "$l" --heads 12 --embd "$embd" --vocab 50257 --ctx "$ctx" --batch 1)
  [ -n "${FORCE:-}" ] && args+=(--force)
  "$venv/bin/python" "$here/gen_gpt2.py" "${args[@]}"
done
echo "make_gpt2: done; run: cargo bench --bench scale"
