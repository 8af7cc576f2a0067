// A fake StepRunner for engine tests: a "model" whose KV cache stores (position, token) per slot,
// and whose logits for a row are a pseudo-random function of every token the sequence holds in
// the cache up to that row. Wrong slot mappings, block tables, stale or shared pages, or skipped
// positions change the logits (or fail the step loudly), so the engine's paging is checked end to
// end. It is batch-invariant by construction: any difference between a request alone and in a
// crowd is the engine's fault.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/sampling_rule.h"
#include "engine/step_runner.h"

namespace fg::test {

struct FakeModelShape {
  int32_t vocab = 61;
  int32_t max_model_len = 512;
  int32_t num_pages = 256;
  int32_t page_size = 4;
  std::vector<int32_t> eos = {0};
  float eos_bias = 0.0f;  // added to the eos logit, to make outputs end early at random
  // > 0: a row's logits depend on the last `context` tokens only (and their distance), so greedy
  // outputs fall into loops that n-gram lookup catches; 0: on every (position, token) so far.
  int32_t context = 0;
  // > 0: every layer attends through this sliding window: a row's logits depend on the tokens of
  // the last `window` positions only (and the runner reads nothing older, like a windowed model),
  // and kv_window() reports it, so the engine releases the pages before it.
  int32_t window = 0;
  uint64_t salt = 0x1234;  // another salt is another model (a draft that disagrees)
  float scale = 6.0f;      // logits are uniform in [0, scale): larger is peakier
};

// The fake model's logits after tokens[0..n) (the row of position n - 1), as forward computes them
// from the cache: out [vocab].
inline void fake_logits(const FakeModelShape& shape, std::span<const int32_t> tokens, float* out) {
  const int32_t pos = int32_t(tokens.size()) - 1;
  uint64_t h = shape.salt;
  for (int32_t p = 0; p <= pos; ++p) {
    if (shape.window > 0 && p <= pos - shape.window) continue;
    if (shape.context == 0) {
      h = mix64(h ^ uint64_t((int64_t(p) << 32) | uint32_t(tokens[size_t(p)])));
    } else if (p > pos - shape.context) {
      h = mix64(h ^ (uint64_t(pos - p) << 32 | uint32_t(tokens[size_t(p)])));
    }
  }
  for (int32_t t = 0; t < shape.vocab; ++t) out[t] = shape.scale * sample_uniform(h, uint64_t(t));
  for (int32_t e : shape.eos) out[e] += shape.eos_bias;
}

class FakeRunner : public StepRunner {
 public:
  explicit FakeRunner(const FakeModelShape& shape)
      : shape_(shape),
        backend_(make_cpu_backend()),
        slots_(size_t(shape.num_pages) * size_t(shape.page_size), kEmpty) {}

  Backend& backend() override { return *backend_; }
  int32_t vocab_size() const override { return shape_.vocab; }
  int32_t max_model_len() const override { return shape_.max_model_len; }
  std::vector<int32_t> eos_token_ids() const override { return shape_.eos; }
  int32_t kv_num_pages() const override { return shape_.num_pages; }
  int32_t kv_page_size() const override { return shape_.page_size; }
  int32_t kv_window() const override { return shape_.window; }
  int64_t num_forwards() const { return num_forwards_; }
  int64_t max_step_tokens() const { return max_step_tokens_; }
  int64_t max_step_seqs() const { return max_step_seqs_; }
  int64_t tokens_computed() const { return tokens_computed_; }  // new tokens over all forwards

  // Called for every page a step writes into; returning false fails the step (tests use it to
  // prove no step ever writes into a page that is shared or published in the prefix cache).
  void set_write_guard(std::function<bool(int32_t page)> may_write) { may_write_ = std::move(may_write); }

  StepWriter begin_step(const StepShape& shape) override {
    const int pages = std::max(1, (shape.max_kv_len + shape_.page_size - 1) / shape_.page_size);
    const StepLayout layout = StepLayout::make(shape.total_q, shape.num_seqs, shape.num_logits, pages, false);
    block_.assign(layout.words, -1);
    return StepWriter(layout, block_.data(), shape_.page_size);
  }

  Result<Tensor> forward(const StepMetadata& b) override {
    ++num_forwards_;
    max_step_tokens_ = std::max<int64_t>(max_step_tokens_, b.total_q());
    max_step_seqs_ = std::max<int64_t>(max_step_seqs_, b.num_seqs());
    tokens_computed_ += b.total_q();
    const int32_t P = shape_.page_size;
    // 1. Write the new tokens into their slots, checking the slot agrees with the block table.
    for (int32_t s = 0; s < b.num_seqs(); ++s) {
      const int32_t q0 = b.cu_seqlens_q[size_t(s)], q1 = b.cu_seqlens_q[size_t(s) + 1];
      if (b.seqlens_kv[size_t(s)] - (q1 - q0) < 0) return internal_error("kv length shorter than the new tokens");
      for (int32_t q = q0; q < q1; ++q) {
        const int32_t pos = b.positions[size_t(q)];
        if (pos != b.seqlens_kv[size_t(s)] - (q1 - q0) + (q - q0)) return internal_error("position out of order");
        const int32_t page = b.block_table[size_t(s) * size_t(b.max_pages_per_seq) + size_t(pos / P)];
        if (b.slot_mapping[size_t(q)] != page * P + pos % P) return internal_error("slot disagrees with block table");
        if (may_write_ && !may_write_(page)) {
          return internal_error("step writes position " + std::to_string(pos) + " into shared or published page " +
                                std::to_string(page));
        }
        slots_[size_t(b.slot_mapping[size_t(q)])] = encode(pos, b.token_ids[size_t(q)]);
      }
    }
    // 2. Logits of the requested rows: hash the sequence's cached tokens [0, pos].
    if (logits_.bytes() < size_t(b.num_logits()) * size_t(shape_.vocab) * 4) {
      logits_ = backend_->alloc(size_t(std::max(b.num_logits(), 64)) * size_t(shape_.vocab) * 4);
    }
    float* out = static_cast<float*>(logits_.data());
    for (int32_t r = 0; r < b.num_logits(); ++r) {
      const int32_t row = b.logits_indices[size_t(r)];
      // Rows come in any order (prompt-logprob rows follow the sampled ones): the row's sequence.
      const auto s =
          int32_t(std::upper_bound(b.cu_seqlens_q.begin(), b.cu_seqlens_q.end(), row) - b.cu_seqlens_q.begin()) - 1;
      const int32_t pos = b.positions[size_t(row)];
      cached_.assign(size_t(pos) + 1, 0);  // positions before a window are never read
      for (int32_t p = shape_.window > 0 ? std::max(0, pos - shape_.window + 1) : 0; p <= pos; ++p) {
        const int32_t page = b.block_table[size_t(s) * size_t(b.max_pages_per_seq) + size_t(p / P)];
        const int64_t v = slots_[size_t(page * P + p % P)];
        if (v == kEmpty || int32_t(v >> 32) != p) {
          return internal_error("slot of position " + std::to_string(p) + " holds another position");
        }
        cached_[size_t(p)] = int32_t(uint32_t(v));
      }
      fake_logits(shape_, cached_, out + size_t(r) * size_t(shape_.vocab));
    }
    return Tensor::contiguous(out, DType::kF32, Device::kCpu, {b.num_logits(), shape_.vocab});
  }

  // A draft model for speculative decoding (a second fake with its own cache).
  void set_draft(std::unique_ptr<FakeRunner> draft) { draft_ = std::move(draft); }
  StepRunner* draft() override { return draft_.get(); }

  // Marks every slot empty again (to check that a fresh run never reads old contents).
  void poison() { std::fill(slots_.begin(), slots_.end(), kEmpty); }
  // Overwrites one page with garbage (a position no sequence has): reading it fails the step.
  void poison_page(int32_t page) {
    const auto first = slots_.begin() + ptrdiff_t(size_t(page) * size_t(shape_.page_size));
    std::fill(first, first + shape_.page_size, encode(-7, 0x5eed));
  }

 private:
  static constexpr int64_t kEmpty = -1;
  static int64_t encode(int32_t pos, int32_t token) { return (int64_t(pos) << 32) | uint32_t(token); }

  FakeModelShape shape_;
  std::unique_ptr<Backend> backend_;
  std::vector<int64_t> slots_;
  std::vector<int32_t> block_;   // the step metadata block begin_step hands out
  std::vector<int32_t> cached_;  // tokens of one row's sequence, read back from the slots
  std::unique_ptr<FakeRunner> draft_;
  Buffer logits_;
  int64_t num_forwards_ = 0;
  int64_t max_step_tokens_ = 0;
  int64_t max_step_seqs_ = 0;
  int64_t tokens_computed_ = 0;
  std::function<bool(int32_t)> may_write_;
};

}  // namespace fg::test
