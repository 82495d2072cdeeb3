#!/usr/bin/env bash
# Exports the scale-bench models into target/bench/ (git-ignored): the fixtures' hand-written
# GPT-2 training graph (forward + loss + backward, route A, dropout 0, parameters as graph
# inputs, so the files hold no weights) at full size.
#
#   bash scripts/bench/make_gpt2.sh          # both
#   bash scripts/bench/make_gpt2.sh 12       # GPT-2 small: 12 layers, 12 heads, 768 embd, vocab 50257, ctx 1024, batch 1
#   bash scripts/bench/make_gpt2.sh 48       # the same with 48 layers
#   FORCE=1 bash scripts/bench/make_gpt2.sh  # regenerate even if present
#
# Idempotent: a model whose file exists is skipped. Uses the fixtures' pinned torch stack
# (.venv-fixtures/main, created by scripts/fixtures/make_fixtures.sh's ensure_venv logic;
# override with FIXTURES_MAIN_VENV). Then: cargo bench --bench scale
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
which="${1:-all}"
case "$which" in all|12|48) ;; *) echo "usage: $0 [all|12|48]" >&2; exit 1;; esac
out="$root/target/bench"
mkdir -p "$out"

want=()
[ "$which" = all ] || [ "$which" = 12 ] && want+=(12)
[ "$which" = all ] || [ "$which" = 48 ] && want+=(48)
missing=0
for l in "${want[@]}"; do
  [ -f "$out/gpt2_${l}l.onnx" ] && [ -z "${FORCE:-}" ] || missing=1
done
if [ "$missing" = 0 ]; then
  for l in "${want[@]}"; do echo "make_gpt2: $out/gpt2_${l}l.onnx exists, skipping"; done
  exit 0
fi

venv="${FIXTURES_MAIN_VENV:-$root/.venv-fixtures/main}"
req="$root/scripts/fixtures/requirements.txt"
stamp="$venv/.requirements.sha256"
if ! { [ -x "$venv/bin/python" ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$(sha256sum "$req" | cut -d' ' -f1)" ]; }; then
  # the fixture script owns the venv logic; its `std` run creates/updates the venv (and
  # regenerates the committed fixtures, which are deterministic), so point at it instead.
  echo "make_gpt2: no up-to-date torch venv at $venv; create it with" >&2
  echo "  bash scripts/fixtures/make_fixtures.sh std   (or set FIXTURES_MAIN_VENV to a venv with $req)" >&2
  exit 1
fi
export PYTHONHASHSEED=0 OMP_NUM_THREADS="${OMP_NUM_THREADS:-2}" PYTHONWARNINGS=ignore
for l in "${want[@]}"; do
  args=(--out "$out/gpt2_${l}l.onnx" --layers "$l" --heads 12 --embd 768 --vocab 50257 --ctx 1024 --batch 1)
  [ -n "${FORCE:-}" ] && args+=(--force)
  "$venv/bin/python" "$here/gen_gpt2.py" "${args[@]}"
done
echo "make_gpt2: done; run: cargo bench --bench scale"
