#!/bin/bash
# How the third 2026-12-02 gpu-bench run was driven on the lent GPU machine, one phase per
# device call (tools/gpu_bench/__main__.py). build/whl/part-XX: the wheel tar in 55 MiB parts
# (tools/gpu_bench/pack_wheels.sh); build/bench: cdk.out's templates, Qwen3's tokenizer, the
# commit, the tar's md5. E.g. `bash docs/gpu-bench/2026-12-02-device-run3.sh first aa`
# (carry build/whl/part-aa). New in this run: UCX's cuda_ipc GET zero-copy on (hand_off.py).
export PYTHONPATH=/root/site:$PWD PYTHONUNBUFFERED=1 GPU_BENCH_STATE=/root/gpu-bench
B="python3 -m tools.gpu_bench"
T0=$(date +%s)
left() { echo "gpu-bench: phase at $(( $(date +%s) - T0 )) s"; }
budget() { echo $(( $1 - ($(date +%s) - T0) )); }
case "$1" in
  first) rm -rf /root/wheels.tar /root/gpu-bench; cat build/whl/part-$2 >> /root/wheels.tar
         ls -la /root/wheels.tar; nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv
         nproc; free -g | head -2 ;;
  chunk) cat build/whl/part-$2 >> /root/wheels.tar; ls -la /root/wheels.tar ;;
  p1)
    cat build/whl/part-$2 >> /root/wheels.tar; md5sum /root/wheels.tar; cat build/bench/wheels.md5
    mkdir -p /root/whl && tar xf /root/wheels.tar -C /root/whl || exit 1
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
      --target /root/site /root/whl/*.whl 2>&1 | tail -3; left
    gunzip -f build/bench/tokenizer/tokenizer.json.gz
    $B prepare --cdk-out build/bench/cdk.out --model-config catalog/model_configs/Qwen3-8B.json \
      --tokenizer build/bench/tokenizer --commit "$(cat build/bench/commit)" || exit 1
    $B engines; rc=$?; tail -3 /root/gpu-bench/decode.log; left
    if [ $rc = 0 ] && ! $B probe direct --timeout 45; then
      grep -i -m8 "error\|nixl\|ucx" /root/gpu-bench/decode.log /root/gpu-bench/prefill.log | tail -12
      $B stop; $B transport off; $B engines; $B probe direct --timeout 90
    fi
    $B probe direct --timeout 30; left
    timeout $(budget 570) $B sweep direct random; left; $B collect $OUT ;;
  p2)
    timeout $(budget 150) $B sweep direct prefix; left
    timeout $(budget 270) $B sweep aggregated random prefix; left
    $B metrics direct; $B stop; sleep 3; nvidia-smi --query-gpu=memory.used --format=csv
    $B serve; left
    timeout $(budget 575) $B wait; left; $B collect $OUT ;;
  p3)
    timeout $(budget 400) $B wait || tail -c 2000 /root/gpu-bench/serve-status.json
    $B probe deployed --timeout 60; left
    timeout $(budget 330) $B sweep deployed random prefix; $B metrics deployed; left
    timeout $(budget 420) $B ingress 2; left
    timeout $(budget 575) $B sweep deployed-ingress-2 random; $B metrics ingress2; left
    $B collect $OUT ;;
  *) eval "$2"; $B collect $OUT ;;
esac
tail -3 /root/gpu-bench/bench.log 2>/dev/null
