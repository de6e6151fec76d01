#!/usr/bin/env bash
# Every GPU test and check in one go, for a machine with an NVIDIA GPU. Results and a tarball of
# each step's log go to $OUT (or ./gpu-check-out); the short table at the end is what to read.
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH=. PYTHONUNBUFFERED=1 COLUMNS=${COLUMNS:-150}
out=${OUT:-gpu-check-out}
logs=$(mktemp -d)
mkdir -p "$out"
summary=()
step() {  # step NAME EXPECTED-EXIT COMMAND...: runs it, logs it, records its exit status against the expected
    local name=$1 expected=$2; shift 2
    echo "=== $name: $*"
    local started=$SECONDS
    "$@" 2>&1 | tee "$logs/$name.log"
    local status=${PIPESTATUS[0]}
    local verdict=ok; [ "$status" = "$expected" ] || verdict=UNEXPECTED
    summary+=("$(printf '%-28s exit %-3s (expected %s) %4ss  %s' "$name" "$status" "$expected" $((SECONDS - started)) "$verdict")")
}

step gpu-tests 0 python3 -m pytest -q -m gpu -s -p no:cacheprovider tests/
step lab1-starter-unfilled 1 python3 -m labrunner grade lab1 kernels/lab1/starter.cu --no-timing
step bench-lab1 0 python3 -m labrunner bench lab1 --budget 0.5
step grade-lab1-solution 0 python3 -m labrunner grade lab1 kernels/lab1/solution.cu --budget 0.5 --json "$out/lab1.json"
step grade-lab2-solution 0 python3 -m labrunner grade lab2 kernels/lab2/solution.cu --json "$out/lab2.json"
step grade-lab2-starter 0 python3 -m labrunner grade lab2 kernels/lab2/starter.cu --budget 1
step calibrate-lab2 0 python3 -m labrunner calibrate lab2 -o "$out/gates.json" --fraction 0.5
step gated-solution 0 python3 -m labrunner grade lab2 kernels/lab2/solution.cu --gates "$out/gates.json" --budget 1
step gated-starter 5 python3 -m labrunner grade lab2 kernels/lab2/starter.cu --gates "$out/gates.json" --budget 1
step cpu-vs-gpu 0 python3 scripts/compare_backends.py
step batch-vs-alone 0 python3 scripts/batch_vs_alone.py --jobs 4
step bench-stability 0 python3 scripts/bench_stability.py
step bench-stability-rounds3 0 python3 scripts/bench_stability.py 3

tar czf "$out/step-logs.tgz" -C "$logs" .
echo
echo "=== summary"
printf '%s\n' "${summary[@]}"
