#!/usr/bin/env bash
# Builds the libFuzzer targets (clang, ASan + UBSan) and fuzzes them side by side for N seconds each
# (default 60), starting from the committed seeds (tests/fuzz/seeds, written by gen_seeds.py) plus whatever
# earlier runs kept in tests/fuzz/corpus-run. Exits non-zero on any crash, sanitizer report, leak or timeout;
# the input that caused it is saved as tests/fuzz/crash-* (or leak-*, timeout-*).
# Usage: tests/fuzz/run.sh [seconds]
set -euo pipefail
seconds=${1:-60}
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
build=build-fuzz
mkdir -p "$build"
cc=${CC_FUZZ:-clang}
flags=(-std=gnu11 -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all
       -fno-omit-frame-pointer -Wall -Wextra -Wno-unused-parameter -Icore -Ikernels)
sources=(core/error.c core/tensor.c core/safetensors.c core/config.c)
libs=($(pkg-config --libs libcjson) -lm -lpthread)

targets=(safetensors config)
for t in "${targets[@]}"; do
  "$cc" "${flags[@]}" "${sources[@]}" "tests/fuzz/fuzz_$t.c" "${libs[@]}" -o "$build/fuzz_$t"
done

export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
pids=()
for t in "${targets[@]}"; do
  corpus=tests/fuzz/corpus-run/$t
  mkdir -p "$corpus"
  "$build/fuzz_$t" "$corpus" "tests/fuzz/seeds/$t" -dict="tests/fuzz/$t.dict" \
    -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len=16384 -print_final_stats=1 \
    -artifact_prefix=tests/fuzz/ >"$build/fuzz_$t.log" 2>&1 &
  pids+=($!)
done

status=0
for i in "${!targets[@]}"; do
  t=${targets[$i]}
  if wait "${pids[$i]}"; then result=ok; else result=FAILED; status=1; fi
  echo "== fuzz_$t: $result (log: $build/fuzz_$t.log)"
  if [ "$result" = ok ]; then
    grep -E '^#[0-9]+.*(DONE|pulse|NEW|REDUCE)' "$build/fuzz_$t.log" | tail -1
    grep -E '^stat::' "$build/fuzz_$t.log"
  else
    tail -40 "$build/fuzz_$t.log"
  fi
done
exit $status
