#!/bin/bash
# The wheels carried to the GPU machine (no package index there), packed into parts that fit one
# device call's carry (64 MiB): pip download of docs/gpu-bench/wheels-cp312.txt for the machine's
# CPython 3.12, minus what a one-GPU run never loads, then one tar in 55 MiB parts and its md5.
#   bash tools/gpu_bench/pack_wheels.sh <work folder> <parts folder>
# What is cut (zip -d) and why: vllm's _vllm_fa2_C.abi3.so serves only pre-Hopper GPUs (an H200
# runs FA3; the import is guarded), vllm-rs is used only with VLLM_RUST_FRONTEND_PATH, deep_gemm's
# builds for other Pythons, Ray's Java jars, and nixl_ep's builds for torches other than 2.11
# (vLLM 0.26 pins torch 2.11).
set -euo pipefail
work=$(realpath -m "$1") parts=$(realpath -m "$2")
list="$(dirname "$0")/../../docs/gpu-bench/wheels-cp312.txt"
mkdir -p "$work/whl" "$parts"
grep -v '^#' "$list" > "$work/requirements.txt"
pip download --no-deps -q --only-binary=:all: --python-version 3.12 --implementation cp \
  --abi cp312 --platform manylinux_2_35_x86_64 --platform manylinux_2_34_x86_64 \
  --platform manylinux_2_31_x86_64 --platform manylinux_2_28_x86_64 \
  --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 -d "$work/whl" -r "$work/requirements.txt"
cd "$work/whl"
zip -q -d vllm-0.26.0-*.whl 'vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so' 'vllm/vllm-rs' \
  'vllm/third_party/deep_gemm/_C.cpython-31[0134]-*' || true
zip -q -d ray-2.58.0-*.whl 'ray/jars/*' || true
zip -q -d nixl_cu13-1.3.1-*.whl 'nixl_ep_cu13/nixl_ep_cpp_torch21[23].*' || true
tar cf "$work/wheels.tar" ./*.whl
md5sum "$work/wheels.tar" | cut -d' ' -f1 > "$parts/wheels.md5"
rm -f "$parts"/part-*
split -b 55M "$work/wheels.tar" "$parts/part-"
ls -la "$parts"
