#!/usr/bin/env bash
# Runs every test suite and ends with one line "N passed, M failed" over all of them:
#   1. C tests (ctest) in the normal build;
#   2. the bad-input C tests (ctest label "asan") again in an AddressSanitizer + UBSan build;
#   3. Lua tests (busted under LuaJIT);
#   4. the Lua specs of API misuse and async steps again, against the AddressSanitizer build of the library.
# Usage: scripts/run_tests.sh [build-dir]
set -uo pipefail
build=${1:-build}
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
passed=0; failed=0

count_ctest() {   # adds the counts of the ctest output given as $1
  local out=$1; printf '%s\n' "$out"
  local line; line=$(printf '%s\n' "$out" | grep -E 'tests passed, [0-9]+ tests? failed out of' | tail -1)
  if [ -z "$line" ]; then failed=$((failed + 1)); return; fi
  local f t; f=$(sed -E 's/.* ([0-9]+) tests? failed out of ([0-9]+).*/\1/' <<<"$line")
  t=$(sed -E 's/.* failed out of ([0-9]+).*/\1/' <<<"$line")
  passed=$((passed + t - f)); failed=$((failed + f))
}

count_busted() {   # adds the counts of the busted output given as $1 (a sanitizer report counts as a failure)
  local out=$1; printf '%s\n' "$out"
  local line; line=$(printf '%s\n' "$out" | grep -E '[0-9]+ success' | tail -1)
  if [ -z "$line" ] || grep -qE "ERROR: AddressSanitizer|runtime error:" <<<"$out"; then
    failed=$((failed + 1)); return
  fi
  local s f e
  s=$(grep -oE '[0-9]+ success' <<<"$line" | grep -oE '[0-9]+')
  f=$(grep -oE '[0-9]+ failure' <<<"$line" | grep -oE '[0-9]+' || echo 0)
  e=$(grep -oE '[0-9]+ error' <<<"$line" | grep -oE '[0-9]+' || echo 0)
  passed=$((passed + s)); failed=$((failed + f + e))
}

echo "== C tests (ctest, $build)"
count_ctest "$(cd "$build" && ctest --output-on-failure -j "$(nproc)" 2>&1)"

echo "== bad-input C tests under AddressSanitizer (build-asan)"
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DGLM53_SANITIZE=ON -DGLM53_CUDA=OFF >/dev/null &&
  cmake --build build-asan -j "$(nproc)" >/dev/null 2>&1 || echo "asan build failed"
count_ctest "$(cd build-asan && ASAN_OPTIONS=detect_leaks=1 ctest --output-on-failure -L asan 2>&1)"

echo "== Lua tests (busted, LuaJIT)"
count_busted "$(GLM53_BUILD="$root/$build" busted --lua=luajit -o utfTerminal tests/lua 2>&1)"

echo "== Lua misuse, async and parallel specs under AddressSanitizer (build-asan)"
asan_rt="$(gcc -print-file-name=libasan.so) $(gcc -print-file-name=libubsan.so)"
count_busted "$(LD_PRELOAD="$asan_rt" ASAN_OPTIONS=detect_leaks=0 UBSAN_OPTIONS=halt_on_error=1 \
  GLM53_BUILD="$root/build-asan" busted --lua=luajit -o utfTerminal tests/lua/misuse_spec.lua \
  tests/lua/async_step_spec.lua tests/lua/parallel_spec.lua 2>&1)"

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
