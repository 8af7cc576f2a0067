// tokenizer_bench: encodes a corpus file with flashgen's tokenizer on one thread and prints the
// throughput. The corpus is cut into documents of about --chunk-bytes (at line ends), each
// encoded with one encode(text, add_special_tokens=false) call, as a server encodes prompts.
// The checksum of all ids lets tokenizer_bench_hf.py confirm that Hugging Face produced the
// same tokens.
//
//   tokenizer_bench --model DIR --corpus FILE [--chunk-bytes 4096] [--repeat 3] [--json]
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Documents of at least chunk_bytes, cut after a '\n' (the last one may be shorter).
std::vector<std::string> split_chunks(const std::string& corpus, size_t chunk_bytes) {
  std::vector<std::string> chunks;
  size_t start = 0;
  while (start < corpus.size()) {
    size_t end = start + chunk_bytes;
    if (end >= corpus.size()) {
      end = corpus.size();
    } else {
      const size_t nl = corpus.find('\n', end - 1);
      end = nl == std::string::npos ? corpus.size() : nl + 1;
    }
    chunks.push_back(corpus.substr(start, end - start));
    start = end;
  }
  return chunks;
}

int usage() {
  std::fprintf(stderr, "usage: tokenizer_bench --model DIR --corpus FILE [--chunk-bytes N] [--repeat N] [--json]\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  std::string model, corpus_path;
  size_t chunk_bytes = 4096;
  int repeat = 3;
  bool json = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (a == "--model")
      model = next();
    else if (a == "--corpus")
      corpus_path = next();
    else if (a == "--chunk-bytes")
      chunk_bytes = std::strtoull(next().c_str(), nullptr, 10);
    else if (a == "--repeat")
      repeat = std::atoi(next().c_str());
    else if (a == "--json")
      json = true;
    else
      return usage();
  }
  if (model.empty() || corpus_path.empty() || chunk_bytes == 0 || repeat <= 0) return usage();

  std::ifstream in(corpus_path, std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "tokenizer_bench: cannot read %s\n", corpus_path.c_str());
    return 1;
  }
  std::ostringstream ss;
  ss << in.rdbuf();
  const std::string corpus = ss.str();
  const auto chunks = split_chunks(corpus, chunk_bytes);

  const double t_load = now_s();
  auto tok = fg::Tokenizer::load(model);
  const double load_s = now_s() - t_load;
  if (!tok.is_ok()) {
    std::fprintf(stderr, "tokenizer_bench: %s\n", tok.status().to_string().c_str());
    return 1;
  }

  double best = 1e30, first = 0;
  uint64_t tokens = 0, checksum = 0;
  std::vector<int32_t> ids;
  for (int r = 0; r < repeat; ++r) {
    tokens = 0;
    checksum = 1469598103934665603ULL;
    const double t0 = now_s();
    for (const auto& c : chunks) {
      ids.clear();
      (*tok)->encode_into(c, false, ids);
      tokens += ids.size();
      for (int32_t id : ids) checksum = (checksum ^ static_cast<uint64_t>(id)) * 1099511628211ULL;
    }
    const double s = now_s() - t0;
    if (r == 0) first = s;
    best = std::min(best, s);
  }
  const double mb = static_cast<double>(corpus.size()) / 1e6;
  if (json) {
    std::printf(
        "{\"bytes\": %zu, \"chunks\": %zu, \"tokens\": %llu, \"checksum\": \"%016llx\", \"load_s\": %.4f, "
        "\"first_s\": %.4f, \"best_s\": %.4f, \"mb_per_s\": %.3f, \"tokens_per_s\": %.0f}\n",
        corpus.size(), chunks.size(), static_cast<unsigned long long>(tokens),
        static_cast<unsigned long long>(checksum), load_s, first, best, mb / best, static_cast<double>(tokens) / best);
  } else {
    std::printf("model        %s\ncorpus       %s (%.2f MB, %zu chunks of ~%zu bytes)\n", model.c_str(),
                corpus_path.c_str(), mb, chunks.size(), chunk_bytes);
    std::printf("load         %.3f s\ntokens       %llu (checksum %016llx)\n", load_s,
                static_cast<unsigned long long>(tokens), static_cast<unsigned long long>(checksum));
    std::printf("encode       first %.3f s, best of %d %.3f s\nthroughput   %.2f MB/s, %.0f tokens/s (one thread)\n",
                first, repeat, best, mb / best, static_cast<double>(tokens) / best);
  }
  return 0;
}
