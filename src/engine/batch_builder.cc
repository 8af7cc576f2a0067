// build_step (see batch_builder.h).
#include "engine/batch_builder.h"

#include <algorithm>

namespace fg {

StepMetadata build_step(const StepPlan& plan, StepRunner& runner) {
  // A verification step's sequences feed their last token then their drafts, and want every row.
  // Rows of owed prompt logprobs come after every sampled row.
  StepShape shape;
  for (const ScheduledSeq& s : plan.seqs) {
    ++shape.num_seqs;
    shape.total_q += s.num_new;
    shape.num_logits += s.sample ? 1 + s.num_draft : 0;
    shape.num_logits += s.prompt.count;
    shape.max_q_len = std::max(shape.max_q_len, s.num_new);
    shape.max_kv_len = std::max(shape.max_kv_len, s.seq->num_computed + s.num_new);
  }
  StepWriter writer = runner.begin_step(shape);
  for (const ScheduledSeq& s : plan.seqs) {
    Sequence& seq = *s.seq;
    SequenceChunk c;
    if (s.num_draft > 0) {
      seq.verify_input.assign(1, seq.tokens.back());
      seq.verify_input.insert(seq.verify_input.end(), seq.draft.begin(), seq.draft.begin() + s.num_draft);
      c.new_tokens = seq.verify_input;
      c.logits = LogitsWanted::kAll;
    } else {
      c.new_tokens = std::span<const int32_t>(seq.tokens).subspan(size_t(seq.num_computed), size_t(s.num_new));
      c.logits = s.sample ? LogitsWanted::kLast : LogitsWanted::kNone;
    }
    c.num_cached = seq.num_computed;
    c.pages = seq.pages;
    c.rope_length = seq.num_prompt;
    const Status st = writer.add(c);
    FG_CHECK(st.is_ok(), "build_step: the scheduler planned a sequence the step cannot hold: " + st.message());
  }
  int token = 0;
  for (const ScheduledSeq& s : plan.seqs) {
    if (s.prompt.count > 0) {
      const Status st = writer.add_logits_rows(token + (s.prompt.first_pos - 1 - s.seq->num_computed), s.prompt.count);
      FG_CHECK(st.is_ok(), "build_step: " + st.message());
    }
    token += s.num_new;
  }
  return writer.finish();
}

}  // namespace fg
