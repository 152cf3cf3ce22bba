#!/usr/bin/env bash
# Greedy speculative decoding is exact on CUDA: for the trained bundled model (BF16) and its FP8 copy
# (training/make_fp8.py, FP8 weights: the tensor-core GEMV), 8 held-out prompts (two per text family), greedy
# generation with MTP drafts K = 1..4 (KS="1 3" for fewer) must give the token ids of plain greedy decoding
# (K = 0). Prints one line per model, K and prompt: equal or DIFFER, with the drafts accepted. Run on the H200
# from the project root, carrying .h200 and .debs.
set -u
. tests/cuda/h200/setup.sh
rm -rf /tmp/glm53-tiny-fp8
python3 training/make_fp8.py --src models/glm53-tiny --out /tmp/glm53-tiny-fp8 > /dev/null 2>&1 || echo "make_fp8 failed"
for model in models/glm53-tiny /tmp/glm53-tiny-fp8; do
  for fam in arith mc tools retrieval; do
    for n in 1 2; do
      prompt=$(sed -n "${n}p" evals/data/tiny/$fam.jsonl | luajit -e 'local l = io.read("a"); io.write((l:match([["content": "(.-[^\])"}]]):gsub("\\n", "\n"):gsub([[\"]], [["]])))')
      base=$(timeout 120 bin/glm53 generate --device cuda --model $model --temperature 0 --max-tokens 64 --json "$prompt" | luajit -e 'io.write(io.read("a"):match([=["ids": %[([^%]]*)%]]=]) or "?")')
      for k in ${KS:-1 2 3 4}; do
        out=$(timeout 120 bin/glm53 generate --device cuda --model $model --temperature 0 --max-tokens 64 --spec-k $k --json "$prompt")
        ids=$(echo "$out" | luajit -e 'io.write(io.read("a"):match([=["ids": %[([^%]]*)%]]=]) or "?")')
        acc=$(echo "$out" | luajit -e 'local s = io.read("a"); io.write((s:match([["accepted": (%d+)]]) or "?") .. "/" .. (s:match([["draft_tokens": (%d+)]]) or "?"))')
        if [ "$ids" = "$base" ] && [ "$ids" != "?" ]; then r=equal; else r=DIFFER; fi
        echo "$(basename $model) K=$k $fam#$n: $r (accepted $acc)"
      done
    done
  done
done
