#!/usr/bin/env bash
# The prepared device session of issue 43 (part 6), two calls on an H100 / H200 (~4-5 min each):
#   device run: bash benchmarks/device_check.sh jets       (timeout_s 360)
#   device run: bash benchmarks/device_check.sh trellis    (timeout_s 590)
# 1. (jets) solve_batch on 10 000 and 100 000 Ginkgo jets, the MAP trees read on the device (the
#    default on accelerators) and on the host: does compact.map_queue_device pay?
# 2. (trellis) one jet at N = 18 and 20 (log Z, + MAP, + marginals; the size-class programs), peak
#    memory against the memory model; then N = 21 and N = 24, log Z + MAP (the classes of one
#    N, chunks of 2^(N - 8) rows on an accelerator; target: N = 24 in <= 60 s), first call
#    only (notes/trellis.md, "Memory model and a plan for 2^24 subsets on one GPU").
# Results in $OUT (the device tool brings them back), logs on stdout.
set -u
out=${OUT:-/tmp/device_check}
mkdir -p "$out"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > "$out/gpu.csv" 2>&1 || true
python -c "import jax, jaxhc; print('jax', jax.__version__, jax.devices(), 'jaxhc', jaxhc.__version__)"
part=${1:-all}
if [ "$part" != trellis ]; then
timeout 330 python benchmarks/jets_gpu.py --jets 10000,100000 --trees-ab --skip-cpu --out "$out/jets_gpu.json"
fi
if [ "$part" != jets ]; then
timeout 200 python benchmarks/trellis_large.py --ns 18,20 --max-s 45 --out "$out/trellis_large.json"
timeout 90 python benchmarks/trellis_large.py --ns 21 --programs log_z,log_z_map --no-warm --out "$out/trellis_21.json"
timeout 200 python benchmarks/trellis_large.py --ns 24 --programs log_z_map --no-warm --out "$out/trellis_24.json"
fi
ls -la "$out"
