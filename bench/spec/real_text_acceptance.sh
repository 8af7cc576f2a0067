#!/usr/bin/env bash
# Acceptance of n-gram speculation on real text: the default model (SmolLM2-135M-Instruct) drafts
# from its own prompt and output while summarizing (summarize.jsonl) and editing code
# (code_edit.jsonl), tasks whose outputs copy spans of the prompt. Greedy; checks that the outputs
# equal those without speculation and prints flashgen's speculative summary line.
#   bench/spec/real_text_acceptance.sh [extra generate flags, e.g. --backend cpu]
set -euo pipefail
cd "$(dirname "$0")/../.."
FG=${FLASHGEN:-./build/flashgen}
for set in summarize code_edit; do
  "$FG" generate --prompts bench/spec/$set.jsonl --kv-cache-memory 256MiB "$@" >/tmp/fg_spec_off.txt 2>/dev/null
  echo "== $set"
  "$FG" generate --prompts bench/spec/$set.jsonl --kv-cache-memory 256MiB --speculative ngram "$@" \
    2>&1 >/tmp/fg_spec_on.txt | grep -E "speculative"
  cmp -s /tmp/fg_spec_off.txt /tmp/fg_spec_on.txt && echo "outputs identical to plain decoding" ||
    { echo "outputs DIFFER from plain decoding"; exit 1; }
done
