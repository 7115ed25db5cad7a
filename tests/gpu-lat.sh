#!/bin/sh
# The GPU completion-latency benchmark as a test (docs/GPU.md): a shorter run
# than tests/bench/device-run.sh's, with a looser bound on a shared machine. Skips
# (77) without a GPU, exactly as check_gpu does.
b=${builddir:-.}
bin=$b/tests/check_gpu
[ -x "$bin" ] || { echo "no $bin"; exit 99; }
NCCL_NVLS_ENABLE=0 RK_BENCH_GPU_LAT=1 RK_BENCH_GPU_ITERS=${RK_BENCH_GPU_ITERS:-2000} \
	RK_BENCH_GPU_MAX_RATIO=${RK_BENCH_GPU_MAX_RATIO:-1.25} exec "$bin"
