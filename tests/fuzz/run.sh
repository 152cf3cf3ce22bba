#!/usr/bin/env bash
# Builds the libFuzzer targets (clang, ASan + UBSan) and fuzzes them side by side for N seconds each
# (default 60), starting from the committed seeds (tests/fuzz/seeds/<target>) plus whatever earlier runs kept in
# tests/fuzz/corpus-run/<target>. Exits non-zero on any crash, sanitizer report, leak or timeout; the input that
# caused it is saved as tests/fuzz/crash-* (or leak-*, timeout-*).
#   safetensors  the safetensors header parser on raw bytes (tests/fuzz/fuzz_safetensors.c)
#   config       config.json parsing (tests/fuzz/fuzz_config.c)
#   image        image/video decode + preprocessing (tests/fuzz/fuzz_image.c; each seed starts with two control
#                bytes, mode and knob, that the target reads before the file)
#   tokenizer    tokenizer.json / tiktoken loading, then encode and decode with what loaded
#                (tests/fuzz/fuzz_tokenizer.c)
#   chat         the chat template renderer (Lua) on conversations made from the bytes, on an embedded LuaJIT
#                (tests/fuzz/fuzz_chat.c + fuzz_chat.lua; the first byte picks JSON text or the generator)
# Usage: tests/fuzz/run.sh [seconds] [target ...]      (default: all five)
set -euo pipefail
seconds=${1:-60}
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(safetensors config image tokenizer chat)
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
build=build-fuzz
mkdir -p "$build"
cc=${CC_FUZZ:-clang}
flags=(-std=gnu11 -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all
       -fno-omit-frame-pointer -Wall -Wextra -Wno-unused-parameter -I. -Icore)
libs=($(pkg-config --libs libcjson libpcre2-8) -lm -lpthread)

sources_for() {
  case $1 in
    safetensors|config) echo core/base/error.c core/base/tensor.c core/io/safetensors.c core/io/config.c ;;
    image) echo core/base/error.c core/media/image.c ;;
    tokenizer) echo core/base/error.c core/text/tokenizer.c core/text/tokenizer_json.c core/text/tokenizer_split.c \
                    core/text/tokenizer_tables.c core/text/tokenizer_unicode.c ;;
    chat) ;;   # Lua: the renderer is loaded from lua/ at run time
    *) echo "unknown fuzz target '$1'" >&2; exit 2 ;;
  esac
}
# Compiler and linker flags a target needs besides the common ones.
extra_for() {
  case $1 in
    chat) echo "$(pkg-config --cflags --libs luajit) -DGLM53_FUZZ_ROOT=\"$root\"" ;;
  esac
}
max_len_for() {
  case $1 in
    image) echo 65536 ;;
    tokenizer) echo 32768 ;;   # the bundled models/tiny/tokenizer.json (30 KB) is a seed
    *) echo 16384 ;;
  esac
}

for t in "${targets[@]}"; do
  "$cc" "${flags[@]}" $(sources_for "$t") "tests/fuzz/fuzz_$t.c" $(extra_for "$t") "${libs[@]}" -o "$build/fuzz_$t"
done

export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
pids=()
for t in "${targets[@]}"; do
  corpus=tests/fuzz/corpus-run/$t
  mkdir -p "$corpus"
  "$build/fuzz_$t" "$corpus" "tests/fuzz/seeds/$t" -dict="tests/fuzz/$t.dict" \
    -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len="$(max_len_for "$t")" -print_final_stats=1 \
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
