#!/bin/bash
# How the 2026-12-06 KV-reuse run was driven on the lent GPU machine, one phase per device call
# (tools/gpu_bench/kv_reuse.py). build/whl/part-XX: the wheel tar in 50 MiB parts
# (tools/gpu_bench/pack_wheels.sh); build/bench-kv/<variant>/: each variant's synthesized serving
# template (`cdk synth -c <override>`, kv_reuse.VARIANTS), build/bench-kv/commit.
# E.g. `bash docs/gpu-bench/2026-12-06-device-kv-reuse.sh first aa` (carry build/whl/part-aa).
export PYTHONPATH=/root/site:$PWD PYTHONUNBUFFERED=1 GPU_BENCH_STATE=/root/gpu-bench
K="python3 -m tools.gpu_bench.kv_reuse"
T0=$(date +%s)
left() { echo "kv-reuse: phase at $(( $(date +%s) - T0 )) s"; }
budget() { echo $(( $1 - ($(date +%s) - T0) )); }
variants() { for v in power-of-two prefix-affinity prefix-affinity-offload; do
  echo "--variant $v=build/bench-kv/$v"; done; }
case "$1" in
  first) rm -rf /root/wheels.tar /root/gpu-bench; cat build/whl/part-$2 >> /root/wheels.tar
         nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv; nproc; free -g | head -2 ;;
  chunk) cat build/whl/part-$2 >> /root/wheels.tar; ls -la /root/wheels.tar ;;
  p1)
    cat build/whl/part-$2 >> /root/wheels.tar; md5sum /root/wheels.tar; cat build/whl/wheels.md5
    mkdir -p /root/whl && tar xf /root/wheels.tar -C /root/whl || exit 1
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
      --target /root/site /root/whl/*.whl 2>&1 | tail -3; left
    $K prepare $(variants) --model-config catalog/model_configs/Qwen3-8B.json \
      --commit "$(cat build/bench-kv/commit)" || exit 1; left
    timeout $(budget 560) $K serve power-of-two; left
    $K collect $OUT ;;
  next) # sweep the variant that is up ($2), then deploy the next ($3)
    timeout $(budget 200) $K wait $2 && timeout $(budget 330) $K sweep $2; left
    [ -n "$3" ] && timeout $(budget 560) $K serve $3; left
    $K collect $OUT ;;
  *) eval "$2"; $K collect $OUT ;;
esac
tail -5 /root/gpu-bench/kv-reuse/bench.log 2>/dev/null
