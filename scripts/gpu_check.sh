#!/usr/bin/env bash
# The GPU check, one command on a machine with an NVIDIA GPU (elsewhere it says "no GPU" and
# exits 0):
#
#   bash scripts/gpu_check.sh [STAGE_DIR]    # default STAGE_DIR: target/gpu-stage
#
# STAGE_DIR is what scripts/gpu_stage.sh made where PyPI is reachable: ONNX Runtime 1.31.1's
# CUDA libraries (libonnxruntime.so*, libonnxruntime_providers_cuda.so,
# libonnxruntime_providers_shared.so from the onnxruntime-gpu wheel) in parts under 64 MiB with
# SHA256SUMS and MANIFEST, and optionally the binaries (ckpt-bin.tar.gz). It
#   1. checks every part's checksum, reassembles each file and checks it again;
#   2. finds CUDA 13's libraries where the machine's PyTorch keeps them
#      (site-packages/nvidia/*/lib) and puts them on LD_LIBRARY_PATH;
#   3. builds ckpt-opt and the truth table with `--features cuda` (or takes the staged ones:
#      the GPU machines have no network and no cargo registry);
#   4. runs the truth table on the CUDA provider and two main jobs with
#      `--provider cuda --validate`, printing predicted vs measured;
#   5. runs 20 steps of each output through the runner (`ckpt_opt.Session`, CUDA EP) and reads
#      device-level bytes beside the recorded cap (scripts/gpu_runner_check.py).
# It stops after GPU_CHECK_TIMEOUT seconds (default 540: the whole check stays under 10
# minutes). Outputs go to target/gpu-check/.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then
  echo "gpu_check: no GPU (no nvidia-smi, or it lists no device): nothing to check"
  exit 0
fi
start=$(date +%s)
budget="${GPU_CHECK_TIMEOUT:-540}"
left() { echo $(( budget - ($(date +%s) - start) )); }
stage="${1:-$root/target/gpu-stage}"
out="$root/target/gpu-check"
lib="$out/ort"
mkdir -p "$lib"
nvidia-smi -L

# 1. Reassemble, checking every checksum.
[ -f "$stage/MANIFEST" ] && [ -f "$stage/SHA256SUMS" ] ||
  { echo "gpu_check: $stage has no MANIFEST/SHA256SUMS: run scripts/gpu_stage.sh where PyPI is reachable and copy its directory here" >&2; exit 1; }
(cd "$stage" && grep '\.part[0-9][0-9]$' SHA256SUMS | sha256sum --quiet -c -) ||
  { echo "gpu_check: a part's checksum does not match" >&2; exit 1; }
while read -r name parts bytes; do
  cat "$stage/$name".part* > "$out/$name"
  [ "$(stat -c %s "$out/$name")" = "$bytes" ] || { echo "gpu_check: $name: size differs from MANIFEST" >&2; exit 1; }
  case "$name" in libonnxruntime*) mv "$out/$name" "$lib/$name";; esac
done < "$stage/MANIFEST"
(cd "$stage" && grep -v '\.part[0-9][0-9]$' SHA256SUMS) | while read -r sum name; do
  f="$lib/$name"; [ -f "$f" ] || f="$out/$name"
  [ "$(sha256sum "$f" | cut -d' ' -f1)" = "$sum" ] || { echo "gpu_check: $name: checksum differs" >&2; exit 1; }
done
ortlib="$(ls "$lib"/libonnxruntime.so.* | head -n 1)"
ln -sf "$(basename "$ortlib")" "$lib/libonnxruntime.so"
echo "gpu_check: ONNX Runtime CUDA libraries reassembled in $lib"

# 2. CUDA 13 libraries from PyTorch's nvidia-* wheels.
python="${GPU_CHECK_PYTHON:-python3}"
cuda_dirs="$("$python" - <<'PY'
import glob, os, site, sys
roots = site.getsitepackages() + [site.getusersitepackages()]
try:
    import torch
    roots.insert(0, os.path.dirname(os.path.dirname(torch.__file__)))
except Exception:
    pass
dirs = []
for r in roots:
    for d in sorted(glob.glob(os.path.join(r, "nvidia", "*", "lib"))) + sorted(glob.glob(os.path.join(r, "nvidia", "cu13", "lib"))):
        if d not in dirs:
            dirs.append(d)
print(":".join(dirs))
PY
)"
[ -n "$cuda_dirs" ] || { echo "gpu_check: no site-packages/nvidia/*/lib found for $python (PyTorch's CUDA wheels)" >&2; exit 1; }
export LD_LIBRARY_PATH="$lib:$cuda_dirs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export ORT_DYLIB_PATH="$ortlib"
echo "gpu_check: CUDA libraries from $cuda_dirs"

# 3. The binaries: staged, else built here.
if [ -f "$out/ckpt-bin.tar.gz" ]; then
  tar -C "$out" -xzf "$out/ckpt-bin.tar.gz"
  bin="$out/bin"
  export LD_LIBRARY_PATH="$bin:$LD_LIBRARY_PATH"
  ckpt="$bin/ckpt-opt"; table="$bin/truth_table"
else
  command -v cargo >/dev/null 2>&1 || { echo "gpu_check: no cargo here and no staged binaries (GPU_STAGE_BINARIES=1 scripts/gpu_stage.sh)" >&2; exit 1; }
  (cd "$root" && timeout "$(left)" cargo build --release --offline --features cuda --bin ckpt-opt --example truth_table)
  tdir="${CARGO_TARGET_DIR:-$root/target}/release"
  ckpt="$tdir/ckpt-opt"; table="$tdir/examples/truth_table"
fi

# 4. The truth table on the CUDA provider, then two main jobs validated on it.
cd "$root"
status=0
echo "gpu_check: truth table on CUDA (predicted vs measured need, gpu_mem_limit bisection)"
TRUTH_TABLE_PROVIDER=cuda timeout "$(left)" "$table" gpt2_d0 | tee "$out/truth_table.txt" || status=$?
for m in examples/gpt2_4l_train.onnx tests/fixtures/hfgpt2_d0_aot.onnx; do
  name="$(basename "$m" .onnx)"
  echo "gpu_check: $name at 90% with --provider cuda --validate"
  timeout "$(left)" "$ckpt" "$m" --ceiling 90% --provider cuda --initial-chunk default --validate \
    --ort-lib "$ortlib" -o "$out/$name.ckpt.onnx" --receipt "$out/$name.receipt.json" || status=$?
done

# 5. The runner's loop on CUDA: 20 steps through ckpt_opt.Session, device-level bytes beside
#    the recorded cap (cudaMemGetInfo counts what cuDNN's transient workspaces take outside
#    the arena). Needs onnxruntime-gpu 1.31.1 for this python.
if PYTHONPATH="$root/python" "$python" -c "import onnxruntime as o, sys; sys.exit('CUDAExecutionProvider' not in o.get_available_providers())" 2>/dev/null; then
  for name in gpt2_4l_train hfgpt2_d0_aot; do
    [ -f "$out/$name.ckpt.onnx" ] || continue
    echo "gpu_check: $name: 20 runner steps on CUDA, device bytes against the ceiling"
    PYTHONPATH="$root/python" timeout "$(left)" "$python" scripts/gpu_runner_check.py "$out/$name.ckpt.onnx" 20 \
      | tee "$out/$name.runner.json" || status=$?
  done
else
  echo "gpu_check: the runner's CUDA loop skipped: $python has no onnxruntime with CUDAExecutionProvider (pip install onnxruntime-gpu==1.31.1)"
fi
echo "gpu_check: done in $(( $(date +%s) - start )) s (exit $status); outputs in $out"
exit "$status"
