#!/bin/bash
# How the 2026-12-02 run was driven: /work/main/.bench held tools/gpu_bench, cdk.out, the Qwen3-8B
# config and tokenizer, .whl/ the wheel tar in 54 MiB parts; one phase per device call, e.g.
# `bash .bench/device.sh chunk ab` (carry .whl/part-ab), `bash .bench/device.sh p1 ah` (carry .bench).
# gpu-bench on the lent GPU machine, one phase per call (see tools/gpu_bench/__main__.py).
export PYTHONPATH=/root/site:$PWD PYTHONUNBUFFERED=1 GPU_BENCH_STATE=/root/gpu-bench
cp -r .bench/gpu_bench tools/
B="python3 -m tools.gpu_bench"
case "$1" in
  first) rm -f /root/wheels.tar; cat .whl/part-$2 >> /root/wheels.tar; ls -la /root/wheels.tar; nvidia-smi --query-gpu=name,memory.used --format=csv ;;
  chunk) cat .whl/part-$2 >> /root/wheels.tar; ls -la /root/wheels.tar ;;
  p1)
    cat .whl/part-$2 >> /root/wheels.tar; ls -la /root/wheels.tar; md5sum /root/wheels.tar
    mkdir -p /root/whl && tar xf /root/wheels.tar -C /root/whl || exit 1
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /root/site /root/whl/*.whl || exit 1
    cp -r .bench/gpu_bench tools/
    $B prepare --cdk-out .bench/cdk.out --model-config .bench/Qwen3-8B.json --tokenizer .bench/tokenizer --commit "$(cat .bench/commit)" || exit 1
    $B engines; rc=$?; tail -5 /root/gpu-bench/decode.log
    [ $rc = 0 ] && $B sweep direct random
    $B collect $OUT ;;
  p2)
    $B sweep aggregated random; $B sweep direct prefix; $B sweep aggregated prefix
    $B metrics direct; $B stop; sleep 5; nvidia-smi --query-gpu=memory.used --format=csv
    $B serve; $B collect $OUT ;;
  p3)
    $B wait || { tail -40 /root/gpu-bench/serve-status.json; }
    $B sweep deployed random prefix; $B metrics deployed; $B collect $OUT ;;
  p4)
    $B ingress 2; $B sweep deployed-ingress-2 random; $B metrics ingress2; $B collect $OUT ;;
  *) eval "$2"; $B collect $OUT ;;
esac
tail -3 /root/gpu-bench/bench.log 2>/dev/null
