#!/usr/bin/env bash
# Fresh machine to first tokens: install dependencies, build, and generate with a fixture model.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
./scripts/build.sh
echo "--- flashgen generate on the tiny fixture model (tests/fixtures/models/chat_llama):"
./build/flashgen generate --model tests/fixtures/models/chat_llama --prompt "Hello" --max-new-tokens 16 --json
