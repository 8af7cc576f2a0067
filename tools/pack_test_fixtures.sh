#!/usr/bin/env bash
# Packs the third-party test fixtures (Hugging Face tokenizers, llama.cpp vocab tests, chat
# templates; provenance and licences in tests/fixtures/SOURCES.md) into the archives committed
# under tests/fixtures/. CMake extracts them into <build>/test_fixtures/ at configure time, and the
# tests read them only from there.
#
#   tools/pack_test_fixtures.sh SRC     SRC holds tokenizers/, vocab_tests/ and chat_templates/
#                                       laid out as SOURCES.md lists them
#
# Only what the tests read is packed: no SentencePiece tokenizer.model (flashgen does not read it),
# the vocab tests that have a tokenizer.json, and the GGUF vocabularies the GGUF tokenizer tests load
# (gpt-2, llama-spm, phi-3, and deepseek-coder for the refusal of an unsupported pre-tokenizer). The archives are
# reproducible: sorted names, fixed owner, mode and mtime, single-threaded xz.
set -euo pipefail

src=${1:?usage: tools/pack_test_fixtures.sh SRC}
out=$(cd "$(dirname "$0")/.." && pwd)/tests/fixtures

pack() {  # pack NAME FILE... (paths relative to SRC)
  local name=$1
  shift
  for f in "$@"; do
    [[ -f "$src/$f" ]] || { echo "missing: $src/$f" >&2; exit 1; }
  done
  tar -C "$src" --sort=name --owner=0 --group=0 --numeric-owner --mtime='2026-01-01 00:00Z' \
      --mode='a+rX,u+w,go-w' -cf - "$@" | xz -9e -T1 > "$out/$name.tar.xz"
  echo "$out/$name.tar.xz: $# files, $(stat -c %s "$out/$name.tar.xz") bytes"
}

cd "$src"
mapfile -t tokenizer_files < <(find tokenizers -type f \( -name '*.json' \) | LC_ALL=C sort)
mapfile -t template_files < <(find chat_templates -type f -name '*.jinja' | LC_ALL=C sort)
vocab_files=()
for v in gpt-2 llama-bpe llama-spm phi-3 qwen2; do
  vocab_files+=("vocab_tests/ggml-vocab-$v.gguf.inp" "vocab_tests/ggml-vocab-$v.gguf.out")
done
for v in deepseek-coder gpt-2 llama-spm phi-3; do
  vocab_files+=("vocab_tests/ggml-vocab-$v.gguf")
done

pack tokenizers "${tokenizer_files[@]}"
pack vocab_tests "${vocab_files[@]}"
pack chat_templates "${template_files[@]}"
