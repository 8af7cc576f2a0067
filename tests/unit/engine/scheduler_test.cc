// Scheduler policy on its own: decodes first, budgets, max_running, preemption newest-first,
// removal freeing pages at once.
#include "engine/scheduler.h"

#include <gtest/gtest.h>

namespace fg {
namespace {

std::unique_ptr<Sequence> make_seq(uint64_t id, int prompt_len, int priority = 0) {
  auto s = std::make_unique<Sequence>();
  s->id = id;
  s->arrival = id;
  s->priority = priority;
  s->tokens.assign(size_t(prompt_len), 1);
  s->num_prompt = prompt_len;
  s->max_output_tokens = 100;
  s->events = std::make_shared<EventStream>();
  return s;
}

// Commits a plan as the engine would, appending a token to every sampled sequence.
void run_plan(const StepPlan& plan) {
  for (const ScheduledSeq& s : plan.seqs) {
    Scheduler::commit(s);
    if (s.sample) s.seq->tokens.push_back(2);
  }
}

TEST(Scheduler, DecodesFirstThenPrefillChunksWithinBudget) {
  PagePool pool(100, 4);
  SchedulerConfig config;
  config.max_batch_tokens = 10;
  config.admission_watermark = 0.0;
  Scheduler sched(config, pool);
  sched.add(make_seq(1, 3));
  StepPlan p1 = sched.schedule();
  ASSERT_EQ(p1.seqs.size(), 1u);
  EXPECT_TRUE(p1.seqs[0].sample);
  run_plan(p1);
  sched.add(make_seq(2, 25));
  sched.add(make_seq(3, 2));
  StepPlan p2 = sched.schedule();
  ASSERT_EQ(p2.seqs.size(), 2u);
  EXPECT_EQ(p2.seqs[0].seq->id, 1u);  // the decode
  EXPECT_EQ(p2.seqs[0].num_new, 1);
  EXPECT_EQ(p2.seqs[1].seq->id, 2u);  // then 9 tokens of the long prompt; seq 3 waits (FCFS)
  EXPECT_EQ(p2.seqs[1].num_new, 9);
  EXPECT_FALSE(p2.seqs[1].sample);
  EXPECT_EQ(p2.num_tokens, 10);
  EXPECT_EQ(p2.num_decode, 1);
  EXPECT_EQ(pool.num_held(), 1 + 3);  // seq 1: 4 tokens in 1 page; seq 2: 9 tokens in 3 pages
  run_plan(p2);
  StepPlan p3 = sched.schedule();
  ASSERT_EQ(p3.seqs.size(), 2u);
  EXPECT_EQ(p3.seqs[1].seq->id, 2u);
  EXPECT_EQ(p3.seqs[1].num_new, 9);
}

TEST(Scheduler, MaxRunningLimitsAdmission) {
  PagePool pool(100, 4);
  SchedulerConfig config;
  config.max_running = 2;
  Scheduler sched(config, pool);
  for (uint64_t i = 1; i <= 4; ++i) sched.add(make_seq(i, 3));
  StepPlan p = sched.schedule();
  EXPECT_EQ(p.seqs.size(), 2u);
  EXPECT_EQ(sched.num_running(), 2u);
  EXPECT_EQ(sched.num_waiting(), 2u);
}

TEST(Scheduler, PreemptsTheNewestWhenPagesRunOut) {
  PagePool pool(4, 2);  // 8 slots
  SchedulerConfig config;
  config.admission_watermark = 0.0;
  Scheduler sched(config, pool);
  sched.add(make_seq(1, 4));  // 2 pages
  sched.add(make_seq(2, 4));  // 2 pages
  StepPlan p1 = sched.schedule();
  ASSERT_EQ(p1.seqs.size(), 2u);
  EXPECT_EQ(pool.num_free(), 0);
  run_plan(p1);  // both now hold 5 tokens: each decode needs a third page
  StepPlan p2 = sched.schedule();
  ASSERT_EQ(p2.preempted.size(), 1u);
  EXPECT_EQ(p2.preempted[0]->id, 2u);
  EXPECT_EQ(p2.preempted[0]->num_computed, 0);
  EXPECT_EQ(p2.preempted[0]->num_preemptions, 1);
  ASSERT_EQ(p2.seqs.size(), 1u);
  EXPECT_EQ(p2.seqs[0].seq->id, 1u);
  EXPECT_EQ(sched.num_preemptions(), 1);
  EXPECT_EQ(sched.num_waiting(), 1u);
  EXPECT_EQ(pool.num_held(), 3);
  // Finishing seq 1 frees its pages at once; seq 2 is resumed by recompute with its output kept.
  run_plan(p2);
  auto done = sched.remove(1);
  ASSERT_NE(done, nullptr);
  EXPECT_EQ(pool.num_held(), 0);
  StepPlan p3 = sched.schedule();
  ASSERT_EQ(p3.seqs.size(), 1u);
  EXPECT_EQ(p3.seqs[0].seq->id, 2u);
  EXPECT_EQ(p3.seqs[0].num_new, 5);
  EXPECT_TRUE(p3.seqs[0].sample);
}

TEST(Scheduler, PreemptionRespectsPriority) {
  PagePool pool(4, 2);
  SchedulerConfig config;
  config.admission_watermark = 0.0;
  Scheduler sched(config, pool);
  sched.add(make_seq(1, 4, /*priority=*/0));
  sched.add(make_seq(2, 4, /*priority=*/3));  // newer but more important
  StepPlan p1 = sched.schedule();
  EXPECT_EQ(p1.seqs[0].seq->id, 2u);
  run_plan(p1);
  StepPlan p2 = sched.schedule();
  ASSERT_EQ(p2.preempted.size(), 1u);
  EXPECT_EQ(p2.preempted[0]->id, 1u);
}

TEST(Scheduler, RemoveWaitingOrRunningFreesPagesNow) {
  PagePool pool(10, 4);
  Scheduler sched(SchedulerConfig{}, pool);
  sched.add(make_seq(1, 9));
  sched.add(make_seq(2, 3));
  StepPlan p = sched.schedule();
  EXPECT_EQ(pool.num_held(), 4);
  EXPECT_NE(sched.remove(1), nullptr);
  EXPECT_EQ(pool.num_held(), 1);
  EXPECT_EQ(sched.remove(1), nullptr);
  EXPECT_NE(sched.remove(2), nullptr);
  EXPECT_EQ(pool.num_free(), 10);
  EXPECT_FALSE(sched.has_work());
}

// The prefill chunk under a latency budget (engine/step_latency.h), fed synthetic step times:
// 5 ms per decode-only step, 20 us per prefill token on top.
double synthetic_seconds(const StepPlan& p) {
  return 5e-3 + 20e-6 * p.num_prefill_tokens();
}

TEST(Scheduler, LatencyBudgetCutsPrefillOnlyWhileDecodesRun) {
  PagePool pool(1000, 4);
  SchedulerConfig config;
  config.max_batch_tokens = 1000;
  config.admission_watermark = 0.0;
  config.latency.adaptive = true;
  config.latency.decode_factor = 2.0;
  config.latency.min_prefill_tokens = 50;
  Scheduler sched(config, pool);
  sched.add(make_seq(1, 3));
  sched.add(make_seq(2, 900));
  // Nothing decodes yet: the whole token budget goes to prefill.
  StepPlan p1 = sched.schedule();
  EXPECT_EQ(p1.num_tokens, 903);
  EXPECT_EQ(p1.num_prefill_tokens(), 903);
  run_plan(p1);
  sched.observe_step(p1, synthetic_seconds(p1));  // no decodes: says nothing
  EXPECT_FALSE(sched.step_model().knows_decode());
  // Two decodes run, seq 3 waits. No decode-only step has been timed: this step times one.
  sched.add(make_seq(3, 2000));
  StepPlan p2 = sched.schedule();
  EXPECT_EQ(p2.num_decode, 2);
  EXPECT_EQ(p2.num_prefill_tokens(), 0);
  run_plan(p2);
  sched.observe_step(p2, synthetic_seconds(p2));
  EXPECT_DOUBLE_EQ(sched.step_model().decode_seconds(), 5e-3);
  EXPECT_DOUBLE_EQ(sched.step_latency_stats().budget_seconds, 10e-3);
  // The cost of prefill is unknown: the floor.
  StepPlan p3 = sched.schedule();
  EXPECT_EQ(p3.num_prefill_tokens(), 50);
  EXPECT_EQ(p3.seqs.back().seq->id, 3u);
  run_plan(p3);
  sched.observe_step(p3, synthetic_seconds(p3));
  // Measured: 20 us a token, so 5 ms of room in the 10 ms budget is 250 tokens — but at most
  // twice the latest chunk, so 100 first.
  StepPlan p4 = sched.schedule();
  EXPECT_EQ(p4.num_prefill_tokens(), 100);
  run_plan(p4);
  sched.observe_step(p4, synthetic_seconds(p4));
  for (int i = 0; i < 5; ++i) {
    StepPlan p = sched.schedule();
    EXPECT_EQ(p.num_decode, 2);
    EXPECT_LE(p.num_prefill_tokens(), 250);
    EXPECT_LE(synthetic_seconds(p), 10e-3 + 1e-12);
    run_plan(p);
    sched.observe_step(p, synthetic_seconds(p));
  }
  EXPECT_EQ(sched.step_latency_stats().prefill_chunk, 250);
  EXPECT_GT(sched.step_latency_stats().limited_steps, 0);
  // Once nothing decodes, the chunk grows back to the whole budget.
  for (uint64_t id : {1u, 2u}) ASSERT_NE(sched.remove(id), nullptr);
  sched.add(make_seq(4, 2000));
  StepPlan p5 = sched.schedule();
  EXPECT_EQ(p5.num_decode, 0);
  EXPECT_EQ(p5.num_prefill_tokens(), 1000);
}

TEST(Scheduler, LatencyBudgetOffKeepsTheOldPlans) {
  // The same workload with the policy off: every step with decodes fills the token budget,
  // whatever the step times say.
  PagePool pool(1000, 4);
  SchedulerConfig config;
  config.max_batch_tokens = 1000;
  config.admission_watermark = 0.0;
  EXPECT_FALSE(config.latency.adaptive) << "off unless asked for (the command line asks)";
  Scheduler sched(config, pool);
  sched.add(make_seq(1, 3));
  sched.add(make_seq(2, 5));
  StepPlan p1 = sched.schedule();
  run_plan(p1);
  sched.add(make_seq(3, 3000));
  for (int i = 0; i < 3; ++i) {
    StepPlan p = sched.schedule();
    EXPECT_EQ(p.num_decode, 2);
    EXPECT_EQ(p.num_prefill_tokens(), 998);
    run_plan(p);
    sched.observe_step(p, synthetic_seconds(p));
    StepPlan decode_only;  // and a decode-only step's time
    decode_only.seqs = {p.seqs[0]};
    decode_only.num_tokens = decode_only.num_decode = 1;
    sched.observe_step(decode_only, 5e-3);
  }
  EXPECT_EQ(sched.step_latency_stats().budget_seconds, 0.0);
  EXPECT_EQ(sched.step_latency_stats().limited_steps, 0);
}

}  // namespace
}  // namespace fg
