#!/bin/sh
# Build llama.cpp's own `llama-server` (the peer bench/http_bench.py measures superfluid against)
# once, from the same patched llama.cpp tree scripts/install.sh builds the wheel from
# (scripts/llama_cpp_source.sh) and with the same CPU flags (scripts/llama_cpp_cpu_flags.sh). The
# patches change no default (GGML_CPU_FA_TILED, GGML_CPU_REPACK_GEMM, GGML_CPU_TILED_ROW_ORDER,
# GGML_CPU_Q0_OFFSET_DOT and GGML_CPU_Q0_PREFETCH are unset here), so the peer runs llama.cpp's own
# kernels. The binary is cached outside the repo and reused:
#   ${XDG_CACHE_HOME:-~/.cache}/superfluid/llama-server-<version>-<flagshash>/bin/llama-server
#
#   bench/build_llama_server.sh           build if absent, print the binary's path
#   bench/build_llama_server.sh --path    print where the binary is (or would be); build nothing
# JOBS (default: nproc) sets the build's parallelism. About 10 minutes on 2 cores.
set -eu
cd "$(dirname "$0")/.."

LLAMA_CPP_VERSION=$(sh scripts/llama_cpp_source.sh version)
CPU_FLAGS=$(sh scripts/llama_cpp_cpu_flags.sh)
SERVER_FLAGS="-DLLAMA_BUILD_SERVER=ON -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_CURL=OFF -DBUILD_SHARED_LIBS=OFF -DCMAKE_BUILD_TYPE=Release"
key=$(printf '%s %s %s' "$(sh scripts/llama_cpp_source.sh key)" "$CPU_FLAGS" "$SERVER_FLAGS" | cksum | cut -d' ' -f1)
dest="${XDG_CACHE_HOME:-$HOME/.cache}/superfluid/llama-server-$LLAMA_CPP_VERSION-$key"
binary="$dest/bin/llama-server"

if [ "${1:-}" = "--path" ]; then echo "$binary"; exit 0; fi
if [ -x "$binary" ]; then echo "$binary"; exit 0; fi

PYTHON=${PYTHON:-python3}
work="$dest.tmp"
rm -rf "$work" && mkdir -p "$work"
echo "building llama-server from llama-cpp-python $LLAMA_CPP_VERSION's patched llama.cpp (about 10 min on 2 cores, once)" >&2
src=$(PYTHON="$PYTHON" sh scripts/llama_cpp_source.sh fetch "$work")/vendor/llama.cpp
# shellcheck disable=SC2086  # the flag lists are meant to split
cmake -S "$src" -B "$work/build" $CPU_FLAGS $SERVER_FLAGS >"$work/cmake.log" 2>&1 \
  || { tail -40 "$work/cmake.log" >&2; exit 1; }
cmake --build "$work/build" --target llama-server -j "${JOBS:-$(nproc)}" >"$work/build.log" 2>&1 \
  || { tail -40 "$work/build.log" >&2; exit 1; }
# Static libraries (BUILD_SHARED_LIBS=OFF): the binary stands alone; keep it, drop the tree.
mkdir -p "$work/bin"
cp "$work/build/bin/llama-server" "$work/bin/"
rm -rf "$dest" && mkdir -p "$dest" && mv "$work/bin" "$dest/bin" && rm -rf "$work"
echo "$binary"
