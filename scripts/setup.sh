#!/usr/bin/env bash
# Fresh machine to first tokens: install dependencies, build, fetch the default model, and generate with a
# fixture model and with the default model.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
./scripts/build.sh
./scripts/fetch-model.sh  # the default model (SmolLM2-135M-Instruct, Q4_1 GGUF) into models/
echo "--- flashgen generate on the tiny fixture model (tests/fixtures/models/llama):"
./build/flashgen generate --model tests/fixtures/models/llama --prompt-ids "1,15,27,99,4" --max-new-tokens 16 --json
echo "--- flashgen generate with the default model (models/SmolLM2-135M-Instruct.Q4_1.gguf):"
./build/flashgen generate --prompt-ids "1,4093,198,19556,17,2,198,1,520,9531,198" --max-new-tokens 16 --json
