#!/usr/bin/env bash
# Builds the image/video preprocessing libFuzzer target (clang, ASan + UBSan) and fuzzes it for N seconds
# (default 60), starting from the committed seeds (tests/fuzz/seeds/image: small PNG, JPEG, BMP, GIF and animated
# GIF files) plus whatever earlier runs kept in tests/fuzz/corpus-run/image. Each seed starts with two control
# bytes (mode, knob) that tests/fuzz/fuzz_image.c reads before the file. Exits non-zero on any crash, sanitizer
# report, leak or timeout; the input that caused it is saved as tests/fuzz/crash-* (or leak-*, timeout-*).
# Usage: tests/fuzz/run_image.sh [seconds]
set -euo pipefail
seconds=${1:-60}
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
build=build-fuzz
mkdir -p "$build"
cc=${CC_FUZZ:-clang}
flags=(-std=gnu11 -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all
       -fno-omit-frame-pointer -Wall -Wextra -Wno-unused-parameter -Icore -Ikernels)
"$cc" "${flags[@]}" core/error.c core/image.c tests/fuzz/fuzz_image.c -lm -lpthread -o "$build/fuzz_image"

export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
corpus=tests/fuzz/corpus-run/image
mkdir -p "$corpus"
status=0
"$build/fuzz_image" "$corpus" tests/fuzz/seeds/image -dict=tests/fuzz/image.dict -max_total_time="$seconds" \
  -timeout=10 -rss_limit_mb=2048 -max_len=65536 -print_final_stats=1 -artifact_prefix=tests/fuzz/ \
  >"$build/fuzz_image.log" 2>&1 || status=1
if [ $status = 0 ]; then
  echo "== fuzz_image: ok (log: $build/fuzz_image.log)"
  grep -E '^#[0-9]+.*(DONE|pulse|NEW|REDUCE)' "$build/fuzz_image.log" | tail -1
  grep -E '^stat::' "$build/fuzz_image.log"
else
  echo "== fuzz_image: FAILED (log: $build/fuzz_image.log)"
  tail -40 "$build/fuzz_image.log"
fi
exit $status
