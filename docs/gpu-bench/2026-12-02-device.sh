#!/bin/bash
# How the second 2026-12-02 run was driven (2026-12-02-h200-qwen3-8b-deployed.json): first aa,
# chunk ab..ae, p1 af. p1's push probe timed out, it switched to pull, and the call's 10-minute
# limit ended while the engines restarted; two calls then finished by hand what p1-p3 do: start
# the missing decode engine and the proxy, probe, `sweep direct random --concurrency 1 8 32`,
# `sweep aggregated random --concurrency 1 8 32`, `metrics direct`, `stop`, `serve`; then
# `wait`, `probe deployed`, `sweep deployed random --concurrency 1 8 32`, `metrics deployed`.
# gpu-bench on the lent GPU machine, one phase per device call (tools/gpu_bench/__main__.py).
# .whl/part-XX: the wheel tar in 55 MiB parts (docs/gpu-bench/wheels-cp312.txt); .bench: cdk.out's
# templates, the tokenizer, the commit. E.g. `bash .bench/device.sh first aa` (carry .whl/part-aa).
export PYTHONPATH=/root/site:$PWD PYTHONUNBUFFERED=1 GPU_BENCH_STATE=/root/gpu-bench
B="python3 -m tools.gpu_bench"
left() { echo "gpu-bench: phase at $(( $(date +%s) - T0 )) s"; }
T0=$(date +%s)
case "$1" in
  first) rm -f /root/wheels.tar; cat .whl/part-$2 >> /root/wheels.tar; ls -la /root/wheels.tar
         nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv; nproc; free -g | head -2 ;;
  chunk) cat .whl/part-$2 >> /root/wheels.tar; ls -la /root/wheels.tar ;;
  p1)
    cat .whl/part-$2 >> /root/wheels.tar; md5sum /root/wheels.tar; cat .bench/wheels.md5
    mkdir -p /root/whl && tar xf /root/wheels.tar -C /root/whl || exit 1
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /root/site /root/whl/*.whl || exit 1
    left
    [ -f .bench/tokenizer/tokenizer.json.gz ] && gunzip -f .bench/tokenizer/tokenizer.json.gz
    $B prepare --cdk-out .bench/cdk.out --model-config catalog/model_configs/Qwen3-8B.json --tokenizer .bench/tokenizer --commit "$(cat .bench/commit)" --hand-off push || exit 1
    $B engines; rc=$?; tail -5 /root/gpu-bench/decode.log; left
    if [ $rc = 0 ] && ! $B probe direct --timeout 90; then
      grep -i -m5 "error\|nixl" /root/gpu-bench/decode.log /root/gpu-bench/prefill.log | tail -10
      $B stop; $B hand-off pull; $B engines; $B probe direct --timeout 90
    fi
    left
    timeout $(( 560 - ($(date +%s) - T0) )) $B sweep direct random
    left; $B collect $OUT ;;
  p2)
    timeout 300 $B sweep direct prefix; left
    timeout 200 $B sweep aggregated random prefix; left
    $B metrics direct; $B stop; sleep 3; nvidia-smi --query-gpu=memory.used --format=csv
    $B serve; left; $B collect $OUT ;;
  p3)
    timeout 400 $B wait || { tail -c 3000 /root/gpu-bench/serve-status.json; }
    $B probe deployed --timeout 60; left
    timeout $(( 560 - ($(date +%s) - T0) )) $B sweep deployed random prefix; $B metrics deployed; left; $B collect $OUT ;;
  p4)
    $B ingress 2; left
    timeout $(( 560 - ($(date +%s) - T0) )) $B sweep deployed-ingress-2 random prefix; $B metrics ingress2; left; $B collect $OUT ;;
  *) eval "$2"; $B collect $OUT ;;
esac
tail -3 /root/gpu-bench/bench.log 2>/dev/null
