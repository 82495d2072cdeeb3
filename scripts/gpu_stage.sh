#!/usr/bin/env bash
# Prepares ONNX Runtime's CUDA libraries for a GPU machine that has no network
# (scripts/gpu_check.sh reassembles them there). Run it where PyPI is reachable:
#
#   bash scripts/gpu_stage.sh [DIR]        # default DIR: target/gpu-stage (git-ignored)
#
# It downloads the onnxruntime-gpu==1.31.1 wheel (pip download --no-deps), extracts only
# libonnxruntime.so*, libonnxruntime_providers_cuda.so and libonnxruntime_providers_shared.so,
# and splits each into parts under 64 MiB (files travel to the GPU machine in pieces of at most
# 64 MiB per call). DIR then holds the parts (<lib>.partNN), SHA256SUMS (of every part and of
# every whole library) and MANIFEST (library, parts, bytes). Skips the download when the wheel
# is already in DIR/wheel. GPU_STAGE_BINARIES=1 also stages the binaries (below).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
ORT_GPU_VERSION="1.31.1"
PART_BYTES=$((60 * 1024 * 1024))
stage="${1:-$root/target/gpu-stage}"
mkdir -p "$stage/wheel"
python="${GPU_STAGE_PYTHON:-python3}"

wheel="$(ls "$stage"/wheel/onnxruntime_gpu-"$ORT_GPU_VERSION"-*.whl 2>/dev/null | head -n 1 || true)"
if [ -z "$wheel" ]; then
  echo "gpu_stage: downloading onnxruntime-gpu==$ORT_GPU_VERSION (Linux x86-64)"
  "$python" -m pip download -q --disable-pip-version-check --no-deps --only-binary=:all: \
    --implementation cp --python-version 3.11 \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    -d "$stage/wheel" "onnxruntime-gpu==$ORT_GPU_VERSION"
  wheel="$(ls "$stage"/wheel/onnxruntime_gpu-"$ORT_GPU_VERSION"-*.whl | head -n 1)"
fi

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
"$python" - "$wheel" "$work" <<'PY'
import sys, zipfile, os
wheel, out = sys.argv[1], sys.argv[2]
want = ("libonnxruntime.so", "libonnxruntime_providers_cuda.so", "libonnxruntime_providers_shared.so")
found = []
with zipfile.ZipFile(wheel) as z:
    for name in z.namelist():
        base = os.path.basename(name)
        if name.startswith("onnxruntime/capi/") and (base in want[1:] or base.startswith(want[0])):
            with z.open(name) as src, open(os.path.join(out, base), "wb") as dst:
                dst.write(src.read())
            found.append(base)
missing = [w for w in want if not any(f == w or (w == want[0] and f.startswith(w)) for f in found)]
if missing:
    sys.exit(f"gpu_stage: {wheel} lacks {missing}")
PY

rm -f "$stage"/*.part* "$stage/SHA256SUMS" "$stage/MANIFEST"
(
  cd "$work"
  for lib in libonnxruntime*.so*; do
    sha256sum "$lib" >> "$stage/SHA256SUMS"
    split -b "$PART_BYTES" -d -a 2 "$lib" "$stage/$lib.part"
    parts=$(ls "$stage/$lib".part* | wc -l)
    echo "$lib $parts $(stat -c %s "$lib")" >> "$stage/MANIFEST"
  done
)
# The GPU machine has no cargo registry and no network: with GPU_STAGE_BINARIES=1, also stage
# release builds (x86-64, `--features cuda`) of ckpt-opt and the truth table, with the shared
# libraries they link that are not part of the base system (CBC and its COIN-OR libraries).
if [ "${GPU_STAGE_BINARIES:-0}" = 1 ]; then
  (cd "$root" && cargo build --release --locked --features cuda --bin ckpt-opt --example truth_table)
  tdir="${CARGO_TARGET_DIR:-$root/target}/release"
  mkdir -p "$work/bin"
  cp "$tdir/ckpt-opt" "$tdir/examples/truth_table" "$work/bin/"
  ldd "$tdir/ckpt-opt" "$tdir/examples/truth_table" | awk '/=> \//{print $3}' | sort -u |
    grep -Ev '/(libc|libm|libdl|librt|libpthread|libgcc_s|libstdc\+\+|ld-linux[^/]*)\.so' |
    while read -r so; do cp -L "$so" "$work/bin/"; done
  tar -C "$work" -czf "$work/ckpt-bin.tar.gz" bin
  (cd "$work" && sha256sum ckpt-bin.tar.gz >> "$stage/SHA256SUMS"
   split -b "$PART_BYTES" -d -a 2 ckpt-bin.tar.gz "$stage/ckpt-bin.tar.gz.part"
   echo "ckpt-bin.tar.gz $(ls "$stage"/ckpt-bin.tar.gz.part* | wc -l) $(stat -c %s ckpt-bin.tar.gz)" >> "$stage/MANIFEST")
fi
(cd "$stage" && sha256sum ./*.part* | sed 's# \./# #' >> SHA256SUMS)
echo "gpu_stage: $stage"
(cd "$stage" && ls -l ./*.part* | awk '{printf "  %-55s %10d B\n", $9, $5}')
echo "copy $stage/*.part*, SHA256SUMS and MANIFEST to the GPU machine (one directory), then:"
echo "  bash scripts/gpu_check.sh DIR"
