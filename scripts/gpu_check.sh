#!/usr/bin/env bash
# Every GPU test and check in one go, for a machine with an NVIDIA GPU. Results and a tarball of
# each step's log go to $OUT (or ./gpu-check-out); the short table at the end is what to read.
# The optional extras (cupti-python, matplotlib, torch) must be installed into the interpreter, not
# only on PYTHONPATH: the boxed workers run `python -I`, which ignores it, so a trace there would fall
# back to CUDA events and say that cupti-python is not installed.
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH=.${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 COLUMNS=${COLUMNS:-150}
# The box: bubblewrap, from the system or unpacked from a Debian package carried to the machine
# (apt-get download bubblewrap; its folder in BOX_DEBS, default .box/), since a GPU host may have none.
if ! command -v bwrap >/dev/null 2>&1 && [ -z "${ATTNLAB_BWRAP:-}" ]; then
    for deb in "${BOX_DEBS:-.box}"/bubblewrap_*.deb; do
        [ -f "$deb" ] && dpkg -x "$deb" /tmp/attnlab-bwrap && export ATTNLAB_BWRAP=/tmp/attnlab-bwrap/usr/bin/bwrap
    done
fi
out=${OUT:-gpu-check-out}
logs=$(mktemp -d)
mkdir -p "$out"
summary=()
step() {  # step NAME EXPECTED-EXIT COMMAND...: runs it, logs it, records its exit status against the expected
    local name=$1 expected=$2; shift 2
    # ONLY (a regular expression over step names) runs a part of the list, to fit a time limit per call
    [[ -z "${ONLY:-}" || "$name" =~ ^(${ONLY})$ ]] || return 0
    echo "=== $name: $*"
    local started=$SECONDS
    "$@" 2>&1 | tee "$logs/$name.log"
    local status=${PIPESTATUS[0]}
    local verdict=ok; [ "$status" = "$expected" ] || verdict=UNEXPECTED
    summary+=("$(printf '%-28s exit %-3s (expected %s) %4ss  %s' "$name" "$status" "$expected" $((SECONDS - started)) "$verdict")")
}

timed_grade() {  # the whole `grade lab2` of the shipped solution, end to end: seconds (budget 15 s) and SPEEDUP
    # (on a fresh machine the first grade also fills NVRTC's and CuPy's compile caches: 17 to 20 s, then 7 s)
    local started ended
    started=$(date +%s.%N)
    python3 -m labrunner grade lab2 kernels/lab2/solution.cu --json "$out/lab2-timed.json"
    local status=$?
    ended=$(date +%s.%N)
    python3 - "$started" "$ended" "$out/lab2-timed.json" <<'PY'
import json, sys
seconds = float(sys.argv[2]) - float(sys.argv[1])
timing = json.load(open(sys.argv[3])).get("timing") or {}
print(f"grade lab2 solution: {seconds:.1f} s end to end (budget 15 s: {'ok' if seconds <= 15 else 'OVER'}); "
      f"SPEEDUP {timing.get('speedup', float('nan')):.2f}x (17.7x to 17.9x on an H200 with the current solution); "
      f"{timing.get('input_sets')} input sets, checked calls {timing.get('verified_calls')}, "
      f"oracle proof {timing.get('oracle_proof')}")
sys.exit(0 if seconds <= 15 else 1)
PY
    local over=$?
    [ "$status" = 0 ] && return $over
    return $status
}
fixture_verdict() {  # fixture_verdict FILE: grades one hostile fixture with timing and prints verdict and case
    python3 -m labrunner grade lab2 "$1" --json "$out/fixture.json"
    local status=$?
    python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print('verdict', r['verdict'], 'case', r['decisive_case'], 'timing', r.get('timing'))" "$out/fixture.json"
    return $status
}
every_seed() {  # every_seed LAB FILE: every case of FILE on five seeds, no timing; the first failure stops it
    local seed status
    for seed in 1 2 3 4 5; do
        python3 -m labrunner grade "$1" "$2" --seed "$seed" --no-timing > "$logs/seed.log" 2>&1
        status=$?
        echo "seed $seed: $(tail -n 1 "$logs/seed.log")"
        [ "$status" = 0 ] || { cat "$logs/seed.log"; return "$status"; }
    done
}

step box-doctor 0 python3 -m labrunner doctor
step triton-fixtures-lab2 0 python3 tests/fixture_suite.py --device gpu --lab lab2 --jobs 4 --match '\.py$'
step triton-fixtures-lab3 0 python3 tests/fixture_suite.py --device gpu --lab lab3 --jobs 2 --match '\.py$'
step triton-bench-lab2-vs-sdpa 0 python3 -m labrunner bench lab2 kernels/lab2/solution.py --vs sdpa
step triton-grade-lab2 0 python3 -m labrunner grade lab2 kernels/lab2/solution.py
step triton-grade-lab3 0 python3 -m labrunner grade lab3 kernels/lab3/solution.py
step grade-lab3-cu 0 python3 -m labrunner grade lab3 kernels/lab3/solution.cu
# LATENCY_AGAINST: an earlier checkout (unpacked from git archive) timed beside this tree in the same run
step grade-latency 0 python3 scripts/grade_latency.py --runs 5 --warm-up --batch 40 --batch-lab lab2 --jobs auto \
    ${LATENCY_AGAINST:+--against "$LATENCY_AGAINST"} --json "$out/latency.json"
# On a host of several GPUs: an 80-file batch over all of them, per GPU and for the host, each SPEEDUP beside
# the file alone (issue of the multi-GPU batch); on one GPU it grades on that one, which says nothing new
step grade-latency-gpus 0 python3 scripts/grade_latency.py --labs lab2 --runs 1 --batch 80 --batch-lab lab2 --jobs auto \
    --json "$out/latency-gpus.json"
step race-check-flood 4 python3 -m labrunner grade lab2 tests/fixtures/lab2/hostile/race_printf_flood.cu --race-check --no-timing
step race-check-slow 4 python3 -m labrunner grade lab2 tests/fixtures/lab2/hostile/race_slow_under_sanitizer.cu --race-check --no-timing --timeout 2
step bench-lab1-physics 1 python3 -m labrunner bench lab1 tests/fixtures/lab1/hostile/softmax_left_to_wsum.cu --budget 0.5
step fixtures-lab1 0 python3 tests/fixture_suite.py --device gpu --lab lab1 --jobs 6
step fixtures-lab2 0 python3 tests/fixture_suite.py --device gpu --lab lab2 --jobs 6
step gpu-tests 0 python3 -m pytest -q -n 0 -m gpu -s -p no:cacheprovider tests/
step grade-lab2-timed-15s 0 timed_grade
step fixture-v-rescaled 1 fixture_verdict tests/fixtures/lab2/hostile/v_rescaled.cu
step lab1-starter-unfilled 1 python3 -m labrunner grade lab1 kernels/lab1/starter.cu --no-timing
step bench-lab1 0 python3 -m labrunner bench lab1 --budget 0.5
step grade-lab1-solution 0 python3 -m labrunner grade lab1 kernels/lab1/solution.cu --budget 0.5 --json "$out/lab1.json"
step grade-lab2-solution 0 python3 -m labrunner grade lab2 kernels/lab2/solution.cu --json "$out/lab2.json"
step grade-lab2-starter 0 python3 -m labrunner grade lab2 kernels/lab2/starter.cu --budget 1
step calibrate-lab2 0 python3 -m labrunner calibrate lab2 -o "$out/gates.json" --fraction 0.5
step gated-solution 0 python3 -m labrunner grade lab2 kernels/lab2/solution.cu --gates "$out/gates.json" --budget 1
step gated-starter 5 python3 -m labrunner grade lab2 kernels/lab2/starter.cu --gates "$out/gates.json" --budget 1
step profile-lab1 0 python3 -m labrunner profile lab1 kernels/lab1/solution.cu --trace "$out/trace1.json"
step profile-lab2 0 python3 -m labrunner profile lab2 kernels/lab2/solution.cu --ncu-csv "$out/ncu-lab2.csv" --plot "$out/roofline-lab2.png" --json "$out/profile-lab2.json"
step profile-lab3 0 python3 -m labrunner profile lab3 kernels/lab3/solution.cu --trace "$out/trace3.json" --json "$out/profile-lab3.json"
step grade-lab2-profile 0 python3 -m labrunner grade lab2 kernels/lab2/solution.cu --budget 0.5 --profile
step cpu-vs-gpu 0 python3 scripts/compare_backends.py
step batch-vs-alone 0 python3 scripts/batch_vs_alone.py --jobs 4
step batch-course 0 python3 scripts/gpu_batch_check.py --out "$out/batch-course"
step expert-five-seeds 0 every_seed lab2 kernels/lab2/expert.cu
step lab1-five-seeds 0 every_seed lab1 kernels/lab1/solution.cu
step bench-lab2-vs-sdpa 0 python3 -m labrunner bench lab2 --vs sdpa
step bench-expert-vs-sdpa 0 python3 -m labrunner bench lab2 kernels/lab2/expert.cu --vs sdpa
step bench-lab2-vs-expert 0 python3 -m labrunner bench lab2 --vs expert
step bench-lab1-vs-torch 0 python3 -m labrunner bench lab1 --vs torch
step mma-peak 0 python3 scripts/mma_peak.py
step gpu-ptx-peers 0 python3 -m pytest -q -n 0 -m gpu -p no:cacheprovider tests/test_cpu_ptx.py tests/test_peers.py
step grade-lab3-solution 0 python3 -m labrunner grade lab3 kernels/lab3/solution.cu --budget 1 --json "$out/lab3.json"
step grade-lab3-starter 5 python3 -m labrunner grade lab3 kernels/lab3/starter.cu --budget 1
step fixtures-lab3 0 python3 tests/fixture_suite.py --device gpu --lab lab3
step race-check-gpu 0 python3 scripts/barrier_variants.py --device gpu
# The races the CPU finds unasked (its fixtures are CPU only: on a GPU the warps' order decides whether
# they show): --race-check must find each on the GPU too.
step race-check-softmax-max 4 python3 -m labrunner grade lab1 tests/fixtures/lab1/wrong/softmax_max_overwritten.cu --race-check --no-timing
step race-check-tile-early 4 python3 -m labrunner grade lab2 tests/fixtures/lab2/wrong/tile_overwritten_early.cu --race-check --no-timing
step race-check-merge-unsynced 4 python3 -m labrunner grade lab3 tests/fixtures/lab3/wrong/partial_merge_unsynced.cu --race-check --no-timing
step bench-stability 0 python3 scripts/bench_stability.py
step bench-stability-rounds3 0 python3 scripts/bench_stability.py 3

tar czf "$out/step-logs.tgz" -C "$logs" .
echo
echo "=== summary"
printf '%s\n' "${summary[@]}"
