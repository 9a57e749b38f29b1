#!/bin/sh
# The llama.cpp superfluid builds: llama-cpp-python's sdist at the pinned version, with the patches
# in scripts/patches/ applied to its vendored llama.cpp. scripts/install.sh builds the wheel from
# it and bench/build_llama_server.sh builds the peer llama-server from the same tree.
#   scripts/llama_cpp_source.sh version     the pinned llama-cpp-python version
#   scripts/llama_cpp_source.sh key         a checksum of the version and the patches (cache keys)
#   scripts/llama_cpp_source.sh fetch DIR   download, unpack and patch into DIR; print the sdist root
# The patched package is versioned <version>+superfluid.<key>, so an install can tell it from
# PyPI's build and from a build of other patches.
set -eu
here=$(cd "$(dirname "$0")" && pwd)

LLAMA_CPP_VERSION=0.3.36
PYTHON=${PYTHON:-python3}

key() {
  { echo "$LLAMA_CPP_VERSION"; cat "$here"/patches/*.patch; } | cksum | cut -d' ' -f1
}

case "${1:-}" in
  version) echo "$LLAMA_CPP_VERSION" ;;
  key) key ;;
  fetch)
    [ -n "${2:-}" ] || { echo "usage: scripts/llama_cpp_source.sh fetch DIR" >&2; exit 2; }
    dir=$2
    mkdir -p "$dir"
    "$PYTHON" -m pip download --quiet --no-binary :all: --no-deps \
      "llama-cpp-python==$LLAMA_CPP_VERSION" -d "$dir/sdist"
    tar -xzf "$dir/sdist/llama_cpp_python-$LLAMA_CPP_VERSION.tar.gz" -C "$dir"
    root="$dir/llama_cpp_python-$LLAMA_CPP_VERSION"
    for patch in "$here"/patches/*.patch; do
      patch -p1 --forward --silent -d "$root" <"$patch" \
        || { echo "scripts/patches/$(basename "$patch") does not apply to llama-cpp-python $LLAMA_CPP_VERSION" >&2; exit 1; }
    done
    sed -i "s/^__version__ = \".*\"/__version__ = \"$LLAMA_CPP_VERSION+superfluid.$(key)\"/" \
      "$root/llama_cpp/__init__.py"
    echo "$root"
    ;;
  *) echo "usage: scripts/llama_cpp_source.sh version|key|fetch DIR" >&2; exit 2 ;;
esac
