#!/usr/bin/env bash
# The prepared device session of issue 43 (part 6), one call on an H100 / H200 (~8 min):
#   device run: bash benchmarks/device_check.sh        (timeout_s 590)
# 1. solve_batch on 10 000 and 100 000 Ginkgo jets, the MAP trees read on the device (the
#    default on accelerators) and on the host: does compact.map_queue_device pay?
# 2. one jet at N = 18 and 20 (log Z, + MAP, + marginals; the size-class programs), peak
#    memory against the memory model. N = 21..24 need the class of 24 (notes/trellis.md,
#    "Memory model and a plan for 2^24 subsets on one GPU"), not built yet.
# Results in $OUT (the device tool brings them back), logs on stdout.
set -u
out=${OUT:-/tmp/device_check}
mkdir -p "$out"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > "$out/gpu.csv" 2>&1 || true
python -c "import jax, jaxhc; print('jax', jax.__version__, jax.devices(), 'jaxhc', jaxhc.__version__)"
timeout 330 python benchmarks/jets_gpu.py --jets 10000,100000 --trees-ab --skip-cpu --out "$out/jets_gpu.json"
timeout 200 python benchmarks/trellis_large.py --ns 18,20 --max-s 45 --out "$out/trellis_large.json"
ls -la "$out"
