#!/bin/sh
# Trains the tiny model's tokenizer (training/tokenizer/tokenizer.json + tokenizer_config.json) on a sample of the
# training corpus. Deterministic: rerunning reproduces the committed files byte for byte (training/tests check it).
# Needs python3 (stdlib) and luajit with lua-cjson; about 2 seconds.
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 training/data.py corpus --out "$tmp/corpus.txt" >/dev/null
out=${1:-training/tokenizer}
mkdir -p "$out"
luajit scripts/train_tiny_tokenizer.lua "$tmp/corpus.txt" "$out/tokenizer.json" --merges 2000 --split-digits \
    --config "$out/tokenizer_config.json" --template training/chat_template.jinja
