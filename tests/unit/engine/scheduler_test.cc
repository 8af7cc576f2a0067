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

}  // namespace
}  // namespace fg
