#!/usr/bin/env bash
# Fresh machine to a first chat reply: install dependencies, build, fetch the default model
# (SmolLM2-135M-Instruct, Q4_1 GGUF, into models/) and ask it a question.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
./scripts/build.sh
./scripts/fetch-model.sh
echo "--- flashgen generate --chat with the default model (models/SmolLM2-135M-Instruct.Q4_1.gguf):"
./build/flashgen generate --prompt "What is the capital of France?" --chat --max-new-tokens 32
