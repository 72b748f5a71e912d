#!/bin/bash
# How the 2026-12-07 gpu-bench run was driven on the lent GPU machine, one phase per device call
# (tools/gpu_bench/__main__.py): the direct path, then the deployed application synthesized with
# serving.stream_batching_interval_ms at 10 and at 0 ms (tools/gpu_bench SYNTHESIZED), each
# point with the Serve processes' CPU. The recorded run (2026-12-07-h100-qwen3-8b-batching.json,
# one H100 after two failed starts) was `first aa`, `chunk ab` .. `chunk af`, `p1 ag direct`,
# `p2`, `next deployed-batching-10ms deployed-batching-0ms`, `next deployed-batching-0ms`, back
# to back (the machine is given back 30 s after a call): 1,577 of the session's 1,800 s of
# device time, the two failed starts included. The second run of the day
# (2026-12-07-h100-qwen3-8b-batching-50ms.json, one H100) measured Ray's default 50 ms beside 10 ms:
# `first aa`, `chunk ab` .. `chunk af`, `p1 ag deployed-batching-10ms`, `next
# deployed-batching-10ms deployed`, `next deployed`, `direct-last` (about 1,230 s of device time).
# build/whl/part-XX: the wheel tar in 50 MiB parts (tools/gpu_bench/pack_wheels.sh);
# build/gb/<variant>/: each variant's synthesized serving template (`cdk synth -c <override>`),
# build/gb/commit. Each phase sweeps the variant that is up, then deploys the next, so the
# engines start while no call waits on them twice. E.g. `bash <this> first aa`.
export PYTHONPATH=/root/site:$PWD PYTHONUNBUFFERED=1 GPU_BENCH_STATE=/root/gpu-bench
B="python3 -m tools.gpu_bench"
T0=$(date +%s)
left() { echo "gpu-bench: phase at $(( $(date +%s) - T0 )) s"; }
budget() { local b=$(( $1 - ($(date +%s) - T0) )); echo $(( b < 5 ? 5 : b )); }
up_then_sweep() { # $1: the variant that should be up
  timeout $(budget 300) $B wait $1 || tail -c 1500 /root/gpu-bench/serve-status.json
  $B probe $1 --timeout 60; left
  timeout $(budget 330) $B sweep $1 random; left
}
install_and_prepare() { # $1: the last chunk; then prepare's own options
  local chunk=$1; shift
  cat build/whl/part-$chunk >> /root/wheels.tar; md5sum /root/wheels.tar; cat build/whl/wheels.md5
  mkdir -p /root/whl && tar xf /root/wheels.tar -C /root/whl || return 1
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /root/site /root/whl/*.whl 2>&1 | tail -3; left
  $B prepare --cdk-out build/gb/deployed --model-config catalog/model_configs/Qwen3-8B.json \
    --variant deployed-batching-10ms=build/gb/deployed-batching-10ms \
    --variant deployed-batching-0ms=build/gb/deployed-batching-0ms \
    --commit "$(cat build/gb/commit)" "$@" || return 1; left
}
case "$1" in
  first) rm -rf /root/wheels.tar /root/gpu-bench; cat build/whl/part-$2 >> /root/wheels.tar
         nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv; nproc; free -g | head -2 ;;
  chunk) cat build/whl/part-$2 >> /root/wheels.tar; ls -la /root/wheels.tar ;;
  p1) # the last chunk ($2), the install, the direct engines or the first variant ($3)
    install_and_prepare $2 || exit 1
    if [ "$3" = direct ]; then
      $B engines || tail -20 /root/gpu-bench/prefill.log /root/gpu-bench/decode.log; left
      $B probe direct --timeout 60
    else # the lease left no room for the direct engines: the first deployed variant instead
      $B serve $3 && timeout $(budget 575) $B wait $3
    fi; left; $B collect $OUT ;;
  solo) # what a short lease allows in one call: the last chunk ($2), the install, one deployed
    # variant ($3) started and swept, the record copied out every 15 s in case the lease ends;
    # $4: decoder layers kept (fast engines: the Serve path's own ceiling)
    ( while sleep 15; do $B collect $OUT 2>/dev/null; done ) &
    install_and_prepare $2 ${4:+--layers $4} || exit 1
    $B serve $3 && timeout $(budget 450) $B wait $3; left
    $B probe $3 --timeout 30; timeout $(budget 585) $B sweep $3 random; left
    $B metrics $3; kill %1; $B collect $OUT ;;
  p2) # direct swept; the engines stopped; Ray and the 10 ms application started
    timeout $(budget 200) $B sweep direct random; left
    $B metrics direct; $B stop; sleep 3; nvidia-smi --query-gpu=memory.used --format=csv
    $B serve deployed-batching-10ms; timeout $(budget 570) $B wait deployed-batching-10ms; left
    $B collect $OUT ;;
  next) # sweep the variant that is up ($2), then deploy the next ($3, if any)
    up_then_sweep $2; $B metrics $2
    [ -n "$3" ] && $B serve $3 && timeout $(budget 575) $B wait $3; left
    $B collect $OUT ;;
  direct-last) # after the deployed variants: Ray stopped, the direct engines started and swept,
    # the record copied out every 15 s in case the lease ends
    $B collect $OUT; ( while sleep 15; do $B collect $OUT 2>/dev/null; done ) &
    $B metrics deployed; $B stop; sleep 3
    timeout 200 $B engines || tail -5 /root/gpu-bench/prefill.log /root/gpu-bench/decode.log
    $B probe direct --timeout 30; timeout 150 $B sweep direct random; $B metrics direct
    kill %1; $B collect $OUT ;;
  *) eval "$2"; $B collect $OUT ;;
esac
tail -4 /root/gpu-bench/bench.log 2>/dev/null
