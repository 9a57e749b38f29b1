#!/bin/sh
# The CPU flags llama.cpp is built with on x86_64 Linux, for this machine: scripts/install.sh builds
# the wheel and bench/build_llama_server.sh the peer llama-server with them, so both run the same
# kernels. Never the native build: on some x86_64 VMs it emits AMX, which crashes at the first
# decode. AVX2 always; AVX-512 (with VNNI, VBMI and BF16 where present) when /proc/cpuinfo lists
# it: steps of many rows — verify steps, several lanes — cost 25-40% less on the AMD EPYC 2-core
# machine, one-row steps the same (ADR 0017). The patches keep every row exact on either build.
set -eu
flags="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON"
cpu=" $(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null | cut -d: -f2) "
has() {
  case "$cpu" in *" $1 "*) return 0 ;; *) return 1 ;; esac
}
if has avx512f && has avx512cd && has avx512vl && has avx512dq && has avx512bw; then
  flags="$flags -DGGML_AVX512=ON"
  if has avx512_vnni; then flags="$flags -DGGML_AVX512_VNNI=ON"; fi
  if has avx512vbmi; then flags="$flags -DGGML_AVX512_VBMI=ON"; fi
  if has avx512_bf16; then flags="$flags -DGGML_AVX512_BF16=ON"; fi
fi
echo "$flags"
