#!/bin/sh
# Install superfluid into ./.venv.
#   scripts/install.sh          everything the test suite needs (dev, llamacpp, mlx, demo extras)
#   scripts/install.sh demo     what the demo server needs (llamacpp, demo extras)
#
# llama-cpp-python is source-only on PyPI. On x86_64 Linux its default native build can emit
# instructions (AMX) that crash at the first decode, so it is built for a portable AVX2 target.
# pip's wheel cache ignores CMAKE_ARGS, so the wheel is built once per (version, flags) into a
# wheelhouse of our own and installed from there; other platforms use the default build.
set -eu
cd "$(dirname "$0")/.."

case "${1:-test}" in
  test) extras="dev,llamacpp,mlx,demo" ;;
  demo) extras="llamacpp,demo" ;;
  *) echo "usage: scripts/install.sh [test|demo]" >&2; exit 2 ;;
esac

LLAMA_CPP_VERSION=0.3.36
PYTHON=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
.venv/bin/python -m pip install --quiet --upgrade pip

if [ "$(uname -s)-$(uname -m)" = "Linux-x86_64" ]; then
  CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON"
  export CMAKE_ARGS
fi
key=$(printf '%s %s' "$LLAMA_CPP_VERSION" "${CMAKE_ARGS:-default}" | cksum | cut -d' ' -f1)
wheelhouse="${XDG_CACHE_HOME:-$HOME/.cache}/superfluid/wheels/llama-cpp-python-$key"
if ! ls "$wheelhouse"/llama_cpp_python-*.whl >/dev/null 2>&1; then
  echo "building llama-cpp-python $LLAMA_CPP_VERSION (a few minutes, once)" >&2
  .venv/bin/python -m pip wheel --quiet --no-cache-dir --no-deps \
    "llama-cpp-python==$LLAMA_CPP_VERSION" -w "$wheelhouse.tmp"
  rm -rf "$wheelhouse" && mv "$wheelhouse.tmp" "$wheelhouse"
fi
.venv/bin/python -m pip install --quiet --no-cache-dir --find-links "$wheelhouse" \
  -e ".[$extras]"
