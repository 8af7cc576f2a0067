#!/usr/bin/env bash
# Fresh machine to first tokens: install dependencies, build, and generate with a fixture model.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
./scripts/build.sh
echo "--- flashgen generate on the tiny fixture model (tests/fixtures/models/llama):"
./build/flashgen generate --model tests/fixtures/models/llama --prompt-ids "1,15,27,99,4" --max-new-tokens 16 --json
