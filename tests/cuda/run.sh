#!/usr/bin/env bash
# tests/cuda/run.sh - build the CUDA backend and run its op tests (tests/cuda/test_cuda_ops.c) on a GPU machine.
#
# Prints one line per check while running, then the timings, then the table (op, shape, dtype, max rel err,
# threshold, PASS/FAIL) and "cuda ops: N passed, M failed" last. Exit status 0 only when every check passed.
#
# If the first run dies (a kernel fault loses the CUDA context: exit 3; a crash; a hang past the timeout), every
# op group is rerun in its own process so one broken kernel cannot hide the others, and the groups' tables are
# printed together at the end.
#
# Usage: tests/cuda/run.sh [test_cuda_ops arguments, e.g. --only matmul,kda --no-bench]
# The whole run is expected to take about a minute after the build; RUN_TIMEOUT (default 300 s) bounds the first
# run and GROUP_TIMEOUT (default 60 s) each rerun, so a hang still leaves time for the fallback inside a 10-minute
# session command.
set -uo pipefail
cd "$(dirname "$0")/../.."

# TEST=path/to/test_cuda_ops runs a binary built elsewhere (the H200 machine lacks our C dependencies' headers,
# so tests/cuda/h200_check.sh carries one built on the development machine); otherwise build it here.
if [ -z "${TEST:-}" ]; then
    BUILD=${BUILD:-build-cuda}
    mkdir -p "$BUILD"
    if ! cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release >"$BUILD/configure.log" 2>&1; then
        cat "$BUILD/configure.log"
        echo "cuda ops: configure failed"
        exit 1
    fi
    if ! cmake --build "$BUILD" -j16 --target test_cuda_ops; then
        echo "cuda ops: build failed"
        exit 1
    fi
    TEST="$BUILD/test_cuda_ops"
fi
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null || true

timeout "${RUN_TIMEOUT:-300}" "$TEST" "$@"
rc=$?
if [ $rc -eq 0 ] || [ $rc -eq 1 ]; then
    exit $rc   # the table is already the last thing printed
fi

echo
echo "test_cuda_ops stopped abnormally (exit $rc): rerunning each op group in its own process"
logs=$(mktemp -d)
passed=0
failed=0
for g in $("$TEST" --list); do
    timeout "${GROUP_TIMEOUT:-60}" "$TEST" --only "$g" --no-bench >"$logs/$g.log" 2>&1
    grc=$?
    tail -n 3 "$logs/$g.log" | sed "s/^/[$g] /"
    summary=$(grep -E '^cuda ops: [0-9]+ passed, [0-9]+ failed' "$logs/$g.log" | tail -n 1)
    if [ -n "$summary" ] && { [ $grc -eq 0 ] || [ $grc -eq 1 ]; }; then
        p=$(echo "$summary" | sed -E 's/cuda ops: ([0-9]+) passed, ([0-9]+) failed/\1/')
        f=$(echo "$summary" | sed -E 's/cuda ops: ([0-9]+) passed, ([0-9]+) failed/\2/')
        passed=$((passed + p))
        failed=$((failed + f))
    else
        echo "[$g] group did not finish (exit $grc): counted as one failure"
        failed=$((failed + 1))
    fi
done

echo
echo "--- table (all groups) ---"
cat "$logs"/*.log | grep -m 1 '^op ' || true
for g in $("$TEST" --list); do
    # the rows between a group's table markers, without its header; a group that died early has none
    sed -n '/^--- table ---$/,/^--- end table ---$/p' "$logs/$g.log" \
        | grep -v -e '^--- table ---$' -e '^--- end table ---$' -e '^op '
done
echo "--- end table ---"
echo "logs per group: $logs"
echo "cuda ops: $passed passed, $failed failed"
[ $failed -eq 0 ]
