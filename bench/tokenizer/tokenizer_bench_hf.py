#!/usr/bin/env python3
"""Companion of tokenizer_bench: times Hugging Face `tokenizers` on the same corpus chunks
(single thread: RAYON_NUM_THREADS=1, TOKENIZERS_PARALLELISM=false, one encode() call per chunk),
runs flashgen's tokenizer_bench on the same file, checks that both produced the same ids
(checksum) and prints the throughput ratio.

  python3 bench/tokenizer/tokenizer_bench_hf.py --bench build/bench/tokenizer/tokenizer_bench \\
      --model build/test_fixtures/tokenizers/llama-3.2-instruct [--corpus FILE] [--make-corpus FILE]

Without --corpus, a corpus is built (and written to --make-corpus, default
/tmp/fg_tokenizer_corpus.txt) from text found on this machine: the licence texts in
/usr/share/common-licenses, the repository's sources and docs, and the multilingual tokenizer
test corpus, repeated to --corpus-mb megabytes.
Needs: pip install tokenizers
"""
import argparse
import glob
import json
import os
import subprocess
import sys
import time

os.environ["RAYON_NUM_THREADS"] = "1"
os.environ["TOKENIZERS_PARALLELISM"] = "false"

from tokenizers import Tokenizer  # noqa: E402  (after the thread settings)

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.normpath(os.path.join(HERE, "..", ".."))


def build_corpus(path, megabytes):
    parts = []
    for f in sorted(glob.glob("/usr/share/common-licenses/*")):
        if os.path.isfile(f):
            parts.append(open(f, encoding="utf-8", errors="replace").read())
    for pattern in ("src/**/*.cc", "src/**/*.h", "docs/*.md", "tools/*.py"):
        for f in sorted(glob.glob(os.path.join(REPO, pattern), recursive=True)):
            parts.append(open(f, encoding="utf-8", errors="replace").read())
    fixture = os.path.join(REPO, "tests", "fixtures", "tokenizer", "gpt2.json")
    if os.path.exists(fixture):
        for case in json.load(open(fixture, encoding="utf-8"))["cases"]:
            if "input" in case:
                parts.append(case["input"] + "\n")
    base = "\n".join(parts)
    text = base
    while len(text.encode("utf-8")) < megabytes * 1_000_000:
        text += base
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    return path


def split_chunks(data, chunk_bytes):
    """Same cut as tokenizer_bench: at least chunk_bytes, ending after a newline."""
    chunks, start = [], 0
    while start < len(data):
        end = start + chunk_bytes
        if end >= len(data):
            end = len(data)
        else:
            nl = data.find(b"\n", end - 1)
            end = len(data) if nl < 0 else nl + 1
        chunks.append(data[start:end].decode("utf-8"))
        start = end
    return chunks


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bench", required=True, help="path of the tokenizer_bench executable")
    ap.add_argument("--model", required=True, help="folder with tokenizer.json")
    ap.add_argument("--corpus")
    ap.add_argument("--make-corpus", default="/tmp/fg_tokenizer_corpus.txt")
    ap.add_argument("--corpus-mb", type=float, default=4.0)
    ap.add_argument("--chunk-bytes", type=int, default=4096)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()

    corpus = args.corpus or build_corpus(args.make_corpus, args.corpus_mb)
    data = open(corpus, "rb").read()
    chunks = split_chunks(data, args.chunk_bytes)

    t0 = time.perf_counter()
    tok = Tokenizer.from_file(os.path.join(args.model, "tokenizer.json"))
    hf_load = time.perf_counter() - t0
    hf_best, hf_first, tokens, checksum = 1e30, 0.0, 0, 0
    for r in range(args.repeat):
        tokens, checksum = 0, 1469598103934665603
        t0 = time.perf_counter()
        encoded = [tok.encode(c, add_special_tokens=False).ids for c in chunks]
        s = time.perf_counter() - t0
        for ids in encoded:
            tokens += len(ids)
            for i in ids:
                checksum = ((checksum ^ i) * 1099511628211) & 0xFFFFFFFFFFFFFFFF
        hf_first = s if r == 0 else hf_first
        hf_best = min(hf_best, s)

    out = subprocess.run([args.bench, "--model", args.model, "--corpus", corpus, "--chunk-bytes",
                          str(args.chunk_bytes), "--repeat", str(args.repeat), "--json"],
                         check=True, capture_output=True, text=True).stdout
    fg = json.loads(out)
    mb = len(data) / 1e6
    same = fg["checksum"] == "%016x" % checksum and fg["tokens"] == tokens
    print("model      %s" % args.model)
    print("corpus     %s (%.2f MB, %d chunks of ~%d bytes, %d tokens)" % (corpus, mb, len(chunks), args.chunk_bytes,
                                                                          tokens))
    print("same ids   %s" % ("yes" if same else "NO (checksum %s vs %016x)" % (fg["checksum"], checksum)))
    print("%-22s %10s %10s %10s %12s" % ("", "load s", "best s", "MB/s", "tokens/s"))
    print("%-22s %10.3f %10.3f %10.2f %12.0f" % ("HF tokenizers %s" % sys.modules["tokenizers"].__version__, hf_load,
                                                 hf_best, mb / hf_best, tokens / hf_best))
    print("%-22s %10.3f %10.3f %10.2f %12.0f" % ("flashgen", fg["load_s"], fg["best_s"], fg["mb_per_s"],
                                                 fg["tokens_per_s"]))
    print("ratio      flashgen is %.2fx the speed of HF tokenizers (one thread, best of %d)" %
          (hf_best / fg["best_s"], args.repeat))
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
