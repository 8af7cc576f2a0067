// build_step (see batch_builder.h).
#include "engine/batch_builder.h"

#include <algorithm>

namespace fg {

StepMetadata build_step(const StepPlan& plan, StepRunner& runner) {
  StepShape shape;
  for (const ScheduledSeq& s : plan.seqs) {
    ++shape.num_seqs;
    shape.total_q += s.num_new;
    shape.num_logits += s.sample ? 1 : 0;
    shape.max_q_len = std::max(shape.max_q_len, s.num_new);
    shape.max_kv_len = std::max(shape.max_kv_len, s.seq->num_computed + s.num_new);
  }
  StepWriter writer = runner.begin_step(shape);
  for (const ScheduledSeq& s : plan.seqs) {
    const Sequence& seq = *s.seq;
    SequenceChunk c;
    c.new_tokens = std::span<const int32_t>(seq.tokens).subspan(size_t(seq.num_computed), size_t(s.num_new));
    c.num_cached = seq.num_computed;
    c.pages = seq.pages;
    c.logits = s.sample ? LogitsWanted::kLast : LogitsWanted::kNone;
    const Status st = writer.add(c);
    FG_CHECK(st.is_ok(), "build_step: the scheduler planned a sequence the step cannot hold: " + st.message());
  }
  return writer.finish();
}

}  // namespace fg
