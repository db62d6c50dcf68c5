#!/usr/bin/env bash
# The GPU machine's checks (issues 30 and 31), prepared so that each part fits one device call
# (at most 10 minutes; a session has about 15 minutes of device time in all, start included).
# Run from the project's root on that machine, after the prefix that
# `bash ../shared/device/wheels.sh` prints (it installs Dask and Zarr from the carried .whl/):
#
#   <prefix> bash benchmarks/device_checks.sh tests      # GPU tests, then 20,000 and 100,000 rows
#   <prefix> bash benchmarks/device_checks.sh large      # 1,000,000 rows; Nystrom at 10,000,000
#   <prefix> bash benchmarks/device_checks.sh cores      # 16-core scaling and MDD, no GPU needed
#   <prefix> bash benchmarks/device_checks.sh first      # one call: the most telling of each
#   <prefix> bash benchmarks/device_checks.sh rest       # a shorter second call: what first omits
#   <prefix> bash benchmarks/device_checks.sh fused      # fused streamed GPU tiles; stripes
#   <prefix> bash benchmarks/device_checks.sh open       # one call: what stop 45 left open
#   <prefix> bash benchmarks/device_checks.sh nystrom    # syrk; first fit; Nystrom at 10,000,000
#   <prefix> bash benchmarks/device_checks.sh accuracy   # 1,000,000 rows against float64 at 1e-10
#   <prefix> bash benchmarks/device_checks.sh pass       # Nystrom's pass one task at a time; both
#   <prefix> bash benchmarks/device_checks.sh vector     # the exp pass in 16-byte vectors
#   <prefix> bash benchmarks/device_checks.sh next       # 10,000 x 784; cluster shapes; Nystrom
#   <prefix> bash benchmarks/device_checks.sh strips     # Nystrom's GPU strips, length and accuracy
#   <prefix> bash benchmarks/device_checks.sh quiet      # 16-core shapes, plain and quiet; Nystrom
#   <prefix> bash benchmarks/device_checks.sh shm        # 16-core shapes; sums; MDD's solver; Nystrom
#   <prefix> bash benchmarks/device_checks.sh spread     # 4 x 4, 8 x 2 twice; MDD's solver; 10^6 rows
#   <prefix> bash benchmarks/device_checks.sh mdd32      # MDD's spectra in float32, 1 and 16 threads
#
# Every figure is printed with the command that made it; each command has its own time limit,
# so one that hangs does not take the rest of the call with it.
set -u
PY=${PY:-python3}
part=${1:-tests}

DEADLINE=${DEADLINE:-560}  # seconds from the start: no step runs past it (the call's limit)
run() {  # run LIMIT COMMAND...: print the command, run it under a time limit, note its status
  local limit=$1
  shift
  local left=$((DEADLINE - SECONDS))
  if [ "$left" -lt 30 ]; then
    echo "=== skipped (${left} s left before the deadline): $*"
    return
  fi
  [ "$limit" -gt "$left" ] && limit=$left
  echo "=== $* (limit ${limit} s)"
  timeout "$limit" "$@"
  echo "=== exit $?"
}

nvidia-smi --query-gpu=name,memory.total --format=csv,noheader 2>/dev/null
lscpu 2>/dev/null | grep -E '^(Model name|CPU\(s\)|Thread|Core|Socket|NUMA node\(s\))'
case "$part" in
  tests)
    run 150 "$PY" -m pytest -q -p no:cacheprovider -m gpu tests/test_gpu.py
    run 200 "$PY" benchmarks/bench_gpu.py --sizes 20000 100000 --timeout 90
    run 150 "$PY" benchmarks/bench_selection.py --only threads --device cuda --repeats 1
    ;;
  large)
    run 240 "$PY" benchmarks/bench_gpu.py --sizes 1000000 --only gpu --timeout 200
    run 320 "$PY" benchmarks/bench_gpu.py --solver nystrom --sizes 10000000 --float32 \
      --zarr benchmarks/results/blobs.zarr --only gpu cpu --timeout 150
    ;;
  first)  # for a session with one call: GPU tests, 100,000 rows, 16-core scaling, 1,000,000
    run 150 "$PY" -m pytest -q -p no:cacheprovider -m gpu tests/test_gpu.py
    run 200 "$PY" benchmarks/bench_gpu.py --sizes 100000 --only gpu cpu cpu64 --timeout 100
    run 200 "$PY" benchmarks/bench_scaling.py --n 100000 --configs threads:16 2x8 8x2 threads:4
    run 200 "$PY" benchmarks/bench_gpu.py --sizes 1000000 --only gpu --timeout 190
    ;;
  rest)  # after first: the other cluster shapes, then Nystrom at 10,000,000 rows
    run 60 "$PY" -m pytest -q -p no:cacheprovider -m gpu tests/test_gpu.py -k krylov
    run 130 "$PY" benchmarks/bench_scaling.py --n 100000 --configs threads:16 1x16 4x4
    run 200 "$PY" benchmarks/bench_gpu.py --solver nystrom --sizes 10000000 --float32 \
      --zarr /tmp/blobs.zarr --only gpu cpu --timeout 80
    ;;
  fused)  # the streamed GPU tile in one elementwise pass, nothing read back; striped tiles
    run 120 "$PY" -m pytest -q -p no:cacheprovider -m gpu tests/test_fused.py tests/test_gpu.py \
      -k "device_pass or fit_equals or krylov"
    run 60 "$PY" benchmarks/bench_gpu.py --stream-probe
    run 200 "$PY" benchmarks/bench_gpu.py --sizes 1000000 --only gpu --timeout 190
    run 170 "$PY" benchmarks/bench_scaling.py --n 100000 --configs threads:16 8x2 8x2:symmetric
    ;;
  open)  # GPU tests; 8 x 2 with rounded stripes; Nystrom's phases; MDD on the GPU; 1,000,000
    run 150 "$PY" -m pytest -q -p no:cacheprovider -m gpu tests/test_gpu.py tests/test_fused.py
    run 170 "$PY" benchmarks/bench_scaling.py --n 100000 --configs threads:16 8x2 8x2:symmetric
    run 150 "$PY" benchmarks/bench_gpu.py --solver nystrom --sizes 10000000 --float32 \
      --zarr /tmp/blobs.zarr --only gpu cpu --timeout 80
    run 90 "$PY" benchmarks/bench_selection.py --only threads --device cuda --repeats 1
    run 120 "$PY" benchmarks/bench_gpu.py --sizes 1000000 --only gpu --timeout 110
    ;;
  nystrom)  # the scatter by syrk, the first fit's compiles, Nystrom at 10,000,000 from Zarr
    run 90 "$PY" -m pytest -q -p no:cacheprovider -m gpu tests/test_gpu.py \
      -k "nystrom or crossproduct"
    run 110 "$PY" benchmarks/probe_nystrom_gpu.py 4000000
    run 300 "$PY" benchmarks/bench_gpu.py --solver nystrom --sizes 10000000 --float32 \
      --zarr /tmp/blobs.zarr --only gpu cpu --timeout 150
    ;;
  accuracy)  # 1,000,000 rows: the default fit, then the float64 reference at tol = 1e-10
    run 400 "$PY" benchmarks/bench_gpu.py --sizes 1000000 --only gpu gpu64 --timeout 320
    ;;
  pass)  # the Nystrom pass one task at a time on the GPU; 10,000,000 from Zarr; then accuracy
    run 60 "$PY" benchmarks/probe_nystrom_gpu.py 4000000
    run 220 "$PY" benchmarks/bench_gpu.py --solver nystrom --sizes 10000000 --float32 \
      --zarr /tmp/blobs.zarr --only gpu cpu --timeout 150
    run 400 "$PY" benchmarks/bench_gpu.py --sizes 1000000 --only gpu gpu64 --timeout 320
    ;;
  vector)  # the exp pass in 16-byte vectors: GPU tests, the stream probe, 1,000,000; Nystrom
    run 150 "$PY" -m pytest -q -p no:cacheprovider -m gpu tests/test_gpu.py tests/test_fused.py
    run 60 "$PY" benchmarks/bench_gpu.py --stream-probe
    run 130 "$PY" benchmarks/bench_gpu.py --sizes 1000000 --only gpu --timeout 120
    run 170 "$PY" benchmarks/bench_gpu.py --solver nystrom --sizes 10000000 --float32 \
      --zarr /tmp/blobs.zarr --only gpu cpu --timeout 75
    ;;
  next)  # what 2026-11-28 left: 10,000 x 784 after the one-thread bookkeeping, the cluster
        # shapes, Nystrom at 10,000,000 again (its CPU side moved 38.6-67.4 s between machines)
    run 90 "$PY" benchmarks/bench_krylov.py --repeat 2
    run 330 "$PY" benchmarks/bench_scaling.py --n 100000 --configs threads:16 1x16 2x8 4x4 8x2
    run 120 "$PY" benchmarks/bench_gpu.py --solver nystrom --sizes 10000000 --float32 \
      --zarr /tmp/blobs.zarr --only gpu cpu --timeout 75
    ;;
  strips)  # Nystrom's GPU strips sized for the GPU (8,192 float32 rows), not by block_size
    run 50 "$PY" -m pytest -q -p no:cacheprovider -m gpu tests/test_gpu.py \
      -k "nystrom or column_sums or strip"
    run 100 bash -c "cd benchmarks && $PY probe_nystrom_strips.py 4000000"
    run 170 "$PY" benchmarks/bench_gpu.py --solver nystrom --sizes 10000000 --float32 \
      --zarr /tmp/blobs.zarr --only gpu cpu --timeout 100
    ;;
  quiet)  # 4 x 4 and 8 x 2 with distributed's housekeeping and with quiet_housekeeping (on 2
         # cores quiet took 2 x 1 from 1.27 to 1.18 times the threaded fit), then the 8,192-row
         # Nystrom strips at 10,000,000 rows, not measured yet
    run 360 "$PY" benchmarks/bench_scaling.py --n 100000 --configs threads:16 4x4 4x4:quiet 8x2 \
      8x2:quiet
    run 170 "$PY" benchmarks/bench_gpu.py --solver nystrom --sizes 10000000 --float32 \
      --zarr /tmp/blobs.zarr --only gpu cpu --timeout 100
    ;;
  shm)  # the pass through shared memory (2026-11-28 on) and the client's sums in bands on its
       # cores (2026-11-29) in every 16-core shape, 8 x 2 in both layouts; what limits MDD's
       # draws on 16 threads; Nystrom's 8,192-row strips at 10,000,000 rows; the GPU tests
    run 300 "$PY" benchmarks/bench_scaling.py --n 100000 --configs threads:16 1x16 2x8 4x4 8x2 \
      8x2:symmetric
    run 30 "$PY" benchmarks/probe_partial_sums.py
    run 50 "$PY" benchmarks/probe_eigvalsh_threads.py --n 500 1000
    run 200 "$PY" benchmarks/bench_gpu.py --solver nystrom --sizes 10000000 --float32 \
      --zarr /tmp/blobs.zarr --only gpu cpu --timeout 120
    run 100 "$PY" -m pytest -q -p no:cacheprovider -m gpu tests/test_gpu.py tests/test_fused.py
    ;;
  spread)  # what one fit per shape cannot say (2026-11-29): 4 x 4 and 8 x 2 (symmetric by
          # default now, cached tiles dealt by a pass's work) over two rounds; MDD's solver in
          # float32 beside float64, and the memory triad; what freed memory costs to write
          # again (2026-11-30); 1,000,000 rows on the GPU with room for its warm-up
    run 280 "$PY" benchmarks/bench_scaling.py --n 100000 --configs threads:16 4x4 8x2 --rounds 2
    run 40 "$PY" benchmarks/probe_fresh_memory.py --gib 2 --pauses 0 2 10
    run 60 "$PY" benchmarks/probe_eigvalsh_threads.py --n 500
    run 210 "$PY" benchmarks/bench_gpu.py --sizes 1000000 --only gpu --timeout 200
    ;;
  mdd32)  # MDD's spectra in float32 (2026-11-30): does ssyevd scale on 16 threads, and MDD?
    run 60 "$PY" benchmarks/probe_eigvalsh_threads.py --n 500
    run 60 "$PY" benchmarks/probe_mdd_float32.py --threads 1 --sets 1
    run 60 "$PY" benchmarks/probe_mdd_float32.py --threads 16 --sets 1
    ;;
  cores)
    run 330 "$PY" benchmarks/bench_scaling.py --n 100000 --configs threads:16 1x16 2x8 4x4 8x2
    run 240 "$PY" benchmarks/bench_selection.py --only threads --repeats 1
    ;;
  *)
    echo "usage: bash benchmarks/device_checks.sh {tests|large|cores|first|rest|fused|open|nystrom|accuracy|pass|vector|next|strips|quiet|shm|spread|mdd32}" >&2
    exit 2
    ;;
esac
