// The prefix cache inside the engine, on the fake paged model (which reads every cached position
// back, so a wrong, stale or poisoned page changes the logits or fails the step):
//  - randomized workloads of shared prefixes of random lengths, duplicated prompts (n > 1),
//    staggered arrivals and cancellations, under a pool small enough to force eviction and
//    preemption, give exactly the greedy tokens of the cache-off run and of each request alone;
//    evicted pages are poisoned and no step may write into a shared or published page;
//  - exact hit-token accounting, the last-token rule, salts, and re-hits after preemption.
#include <gtest/gtest.h>

#include <random>

#include "engine_test_util.h"

namespace fg::test {
namespace {

std::vector<int32_t> seq_tokens(int n, int32_t first) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) t[size_t(i)] = 1 + (first + i) % 60;
  return t;
}

Request greedy(std::vector<int32_t> prompt, int max_new, uint64_t salt = 0) {
  Request r;
  r.prompt_ids = std::move(prompt);
  r.params.temperature = 0.0f;
  r.params.max_new_tokens = max_new;
  r.params.ignore_eos = true;
  r.cache_salt = salt;
  return r;
}

// Runs one request to completion on `core`; returns its output and the tokens the steps computed.
// Every event of the stream carries the same cached_tokens as the output.
RequestOutput run_one(EngineCore& core, const FakeRunner& runner, const Request& r, int64_t* computed) {
  const int64_t before = runner.tokens_computed();
  auto h = core.submit(r);
  EXPECT_TRUE(h.is_ok()) << h.status().to_string();
  while (core.has_work()) EXPECT_TRUE(core.step().is_ok());
  *computed = runner.tokens_computed() - before;
  RequestOutput out;
  std::vector<int32_t> cached;
  while (auto e = h->events->next()) {
    if (e->token) out.output_ids.push_back(*e->token);
    if (e->finish) out.finish_reason = *e->finish;
    cached.push_back(e->cached_tokens);
  }
  EXPECT_FALSE(cached.empty());
  out.cached_tokens = cached.empty() ? -1 : cached[0];
  for (int32_t c : cached) EXPECT_EQ(c, out.cached_tokens);
  return out;
}

TEST(PrefixCacheEngine, HitTokenAccountingAndTheLastTokenRule) {
  FakeModelShape shape;  // page size 4
  FakeRunner runner(shape);
  EngineCore core(EngineConfig{}, runner);
  ASSERT_NE(core.prefix_cache(), nullptr) << "the prefix cache is on by default";
  const std::vector<int32_t> a_prompt = seq_tokens(10, 0);
  int64_t computed = 0;

  // A: nothing cached. 10 prompt tokens + 2 decodes run (the 3rd output is never run).
  const RequestOutput a = run_one(core, runner, greedy(a_prompt, 3), &computed);
  EXPECT_EQ(a.cached_tokens, 0);
  EXPECT_EQ(computed, 12);
  // Its first 12 positions (prompt + 2 outputs) are 3 full pages, now cached.
  EXPECT_EQ(core.stats().prefix_cache.entries, 3);
  EXPECT_EQ(core.pool().num_cached(), 3);

  // B shares A's first 8 tokens (2 pages): only its last 2 prompt tokens are computed.
  std::vector<int32_t> b_prompt(a_prompt.begin(), a_prompt.begin() + 8);
  b_prompt.insert(b_prompt.end(), {50, 51});
  const RequestOutput b = run_one(core, runner, greedy(b_prompt, 3), &computed);
  EXPECT_EQ(b.cached_tokens, 8);
  EXPECT_EQ(computed, 2 + 2);

  // C repeats A's prompt: pages 0-1 hit; page 2 of the cache holds A's outputs, not C's prompt.
  const RequestOutput c = run_one(core, runner, greedy(a_prompt, 3), &computed);
  EXPECT_EQ(c.cached_tokens, 8);
  EXPECT_EQ(computed, 2 + 2);
  EXPECT_EQ(c.output_ids, a.output_ids);

  // D is exactly A's first 8 tokens, both pages cached: the last-token rule takes only
  // (8 - 1) / 4 = 1 page and recomputes the whole last page.
  const std::vector<int32_t> d_prompt(a_prompt.begin(), a_prompt.begin() + 8);
  const RequestOutput d = run_one(core, runner, greedy(d_prompt, 2), &computed);
  EXPECT_EQ(d.cached_tokens, 4);
  EXPECT_EQ(computed, 4 + 1);

  // E continues A's conversation: A's prompt + its 3 outputs + 1 token. Page 2 (which holds A's
  // generated tokens) is reused too: 12 tokens cached.
  std::vector<int32_t> e_prompt = a_prompt;
  e_prompt.insert(e_prompt.end(), a.output_ids.begin(), a.output_ids.end());
  e_prompt.push_back(33);
  const RequestOutput e = run_one(core, runner, greedy(e_prompt, 2), &computed);
  EXPECT_EQ(e.cached_tokens, 12);
  EXPECT_EQ(computed, 2 + 1);

  // F: A's prompt under another salt shares nothing.
  const RequestOutput f = run_one(core, runner, greedy(a_prompt, 3, /*salt=*/77), &computed);
  EXPECT_EQ(f.cached_tokens, 0);
  EXPECT_EQ(computed, 12);
  EXPECT_EQ(f.output_ids, a.output_ids) << "a salt changes what is shared, never the tokens";

  const EngineStats s = core.stats();
  EXPECT_TRUE(s.prefix_cache_enabled);
  EXPECT_EQ(s.prefix_cache_lookups, 6);
  EXPECT_EQ(s.prefix_cache_hits, 4);
  EXPECT_EQ(s.prefix_cache_hit_tokens, 8 + 8 + 4 + 12);
  EXPECT_EQ(s.prefix_cache_query_tokens, 10 + 10 + 10 + 8 + 14 + 10);
  EXPECT_DOUBLE_EQ(s.prefix_cache_hit_ratio(), 32.0 / 62.0);
  EXPECT_EQ(s.cached_prompt_tokens, 32);
  EXPECT_EQ(s.pages.held, 0);
  EXPECT_EQ(s.pages.free + s.pages.cached, shape.num_pages);

  // The same requests with the cache off: the same tokens, everything computed.
  FakeRunner off_runner(shape);
  EngineConfig off;
  off.enable_prefix_cache = false;
  EngineCore off_core(off, off_runner);
  EXPECT_EQ(off_core.prefix_cache(), nullptr);
  EXPECT_EQ(run_one(off_core, off_runner, greedy(b_prompt, 3), &computed).output_ids, b.output_ids);
  EXPECT_EQ(computed, 10 + 2);
  EXPECT_EQ(run_one(off_core, off_runner, greedy(e_prompt, 2), &computed).output_ids, e.output_ids);
  EXPECT_EQ(run_one(off_core, off_runner, greedy(d_prompt, 2), &computed).output_ids, d.output_ids);
  EXPECT_EQ(off_core.stats().prefix_cache_lookups, 0);
  EXPECT_EQ(off_core.stats().pages.cached, 0);
}

TEST(PrefixCacheEngine, CopiesOfOnePromptShareItsPages) {
  FakeModelShape shape;  // page size 4
  FakeRunner runner(shape);
  EngineCore core(EngineConfig{}, runner);
  const Request r = greedy(seq_tokens(20, 5), 6);
  std::vector<RequestHandle> handles;
  handles.push_back(*core.submit(r));
  ASSERT_TRUE(core.step().is_ok());  // the first copy's prompt: 5 full pages, published
  for (int i = 0; i < 7; ++i) handles.push_back(*core.submit(r));
  const int64_t before = runner.tokens_computed();
  ASSERT_TRUE(core.step().is_ok());
  // The first copy decodes (1 token); each new copy takes 4 pages and recomputes the last page
  // (the last-token rule) into a private page.
  EXPECT_EQ(runner.tokens_computed() - before, 1 + 7 * 4);
  // The first copy holds 6 pages (5 + one for its next token), 4 of them shared by every copy;
  // each other copy adds only its private last page.
  EXPECT_EQ(core.pool().num_held(), 6 + 7);
  while (core.has_work()) ASSERT_TRUE(core.step().is_ok());
  const RequestOutput first = handles[0].wait();
  EXPECT_EQ(first.cached_tokens, 0);
  for (size_t i = 1; i < handles.size(); ++i) {
    const RequestOutput o = handles[i].wait();
    EXPECT_EQ(o.output_ids, first.output_ids);
    EXPECT_EQ(o.cached_tokens, 16);
  }
  // Each copy recomputed page 4 (prompt) and filled page 5 (outputs), both already indexed by the
  // first copy, one step ahead.
  EXPECT_EQ(core.stats().prefix_cache.duplicates, 14);
}

TEST(PrefixCacheEngine, ABurstOfOnePromptComputesItOnce) {
  // Eight copies arrive together; the step budget (24) would let a second copy start its prompt
  // (20 tokens, 5 pages) next to the first. Instead the copies wait one step for the first one's
  // pages rather than computing the same prefix again.
  FakeModelShape shape;  // page size 4
  FakeRunner runner(shape);
  EngineConfig config;
  config.scheduler.max_batch_tokens = 24;
  EngineCore core(config, runner);
  const Request r = greedy(seq_tokens(20, 9), 3);
  std::vector<RequestHandle> handles;
  for (int i = 0; i < 8; ++i) handles.push_back(*core.submit(r));
  while (core.has_work()) ASSERT_TRUE(core.step().is_ok());
  std::vector<int32_t> want;
  for (size_t i = 0; i < handles.size(); ++i) {
    const RequestOutput o = handles[i].wait();
    if (i == 0) want = o.output_ids;
    EXPECT_EQ(o.output_ids, want) << "copy " << i;
    EXPECT_EQ(o.cached_tokens, i == 0 ? 0 : 16) << "copy " << i;
  }
  const EngineStats s = core.stats();
  EXPECT_GT(s.prefix_cache_deferred, 0);
  // The first copy: 20 prompt tokens + 2 decodes; each other copy: its last page (4) + 2 decodes.
  EXPECT_EQ(runner.tokens_computed(), (20 + 2) + 7 * (4 + 2));

  // Without the cache every copy computes everything.
  FakeRunner off_runner(shape);
  EngineConfig off = config;
  off.enable_prefix_cache = false;
  const RunResult plain = run_all(shape, off, std::vector<Request>(8, r));
  for (const auto& o : plain.outputs) EXPECT_EQ(o.output_ids, want);
  EXPECT_EQ(plain.stats.prefix_cache_deferred, 0);
}

TEST(PrefixCacheEngine, PreemptedSequenceRehitsItsOwnCachedPages) {
  PagePool pool(4, 2);  // 8 slots
  PrefixCache cache(pool);
  SchedulerConfig config;
  config.admission_watermark = 0.0;
  Scheduler sched(config, pool, &cache);
  auto make = [](uint64_t id, int32_t first) {
    auto s = std::make_unique<Sequence>();
    s->id = id;
    s->arrival = id;
    s->tokens = seq_tokens(4, first);
    s->num_prompt = 4;
    s->max_output_tokens = 16;
    s->events = std::make_shared<EventStream>();
    return s;
  };
  auto run = [&](const StepPlan& plan) {
    for (const ScheduledSeq& s : plan.seqs) {
      Scheduler::commit(s);
      sched.publish(*s.seq);
      if (s.sample) s.seq->tokens.push_back(59);
    }
  };
  sched.add(make(1, 0));
  sched.add(make(2, 30));
  run(sched.schedule());  // both prefilled: 2 pages each, all published; 5 tokens each now
  EXPECT_EQ(cache.stats().entries, 4);
  StepPlan p2 = sched.schedule();  // seq 1 needs a third page: seq 2 is preempted
  ASSERT_EQ(p2.preempted.size(), 1u);
  EXPECT_EQ(p2.preempted[0]->id, 2u);
  // Seq 2's pages were released leaf first and cached; seq 1's new page evicted the leaf.
  EXPECT_EQ(pool.stats().evictions, 1);
  EXPECT_EQ(pool.num_cached(), 1);
  run(p2);
  ASSERT_NE(sched.remove(1), nullptr);
  StepPlan p3 = sched.schedule();
  ASSERT_EQ(p3.seqs.size(), 1u);
  Sequence* resumed = p3.seqs[0].seq;
  EXPECT_EQ(resumed->id, 2u);
  EXPECT_EQ(resumed->num_computed, 2) << "its own first page, still cached, was hit";
  EXPECT_EQ(p3.seqs[0].num_new, 3);
  EXPECT_TRUE(p3.seqs[0].sample);
  EXPECT_EQ(sched.prefix_lookup_stats().hit_tokens, 2);
  EXPECT_EQ(sched.prefix_lookup_stats().lookups, 3);
  EXPECT_EQ(resumed->num_cached_tokens, 0) << "cached_tokens reports the first admission";
  run(p3);
  ASSERT_NE(sched.remove(2), nullptr);
  EXPECT_EQ(pool.num_held(), 0);
  EXPECT_EQ(pool.num_free() + pool.num_cached(), 4);
}

// ---- Randomized workloads ------------------------------------------------------------------

struct Workload {
  std::vector<Request> requests;
  std::vector<int> submit_step;  // the engine step before which the request is submitted
  std::vector<int> cancel_step;  // -1: never cancelled
};

// Requests built from a few "system prompts": each takes a random-length prefix of one (0 to all
// of it, so shared runs end anywhere in a page), then a random suffix; about a quarter repeat an
// earlier prompt exactly (n > 1), some are cancelled mid-flight, arrivals are staggered.
Workload shared_prefix_workload(int n, int vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  auto rnd = [&](int lo, int hi) { return lo + int(rng() % uint32_t(hi - lo + 1)); };
  std::vector<std::vector<int32_t>> systems(4);
  for (auto& s : systems) {
    s.resize(size_t(rnd(4, 40)));
    for (int32_t& t : s) t = int32_t(1 + rng() % uint32_t(vocab - 1));
  }
  Workload w;
  for (int i = 0; i < n; ++i) {
    Request r;
    if (i > 0 && rnd(0, 3) == 0) {
      r = w.requests[size_t(rnd(0, i - 1))];
    } else {
      const auto& sys = systems[size_t(rnd(0, 3))];
      const int take = rnd(0, 3) == 0 ? rnd(0, int(sys.size())) : int(sys.size());
      r.prompt_ids.assign(sys.begin(), sys.begin() + take);
      const int suffix = rnd(0, 2) == 0 ? 0 : rnd(1, 16);
      for (int j = 0; j < suffix; ++j) r.prompt_ids.push_back(int32_t(1 + rng() % uint32_t(vocab - 1)));
      if (r.prompt_ids.empty()) r.prompt_ids.push_back(3);
      r.params.temperature = 0.0f;
      r.params.max_new_tokens = rnd(1, 20);
    }
    w.requests.push_back(r);
    w.submit_step.push_back(rnd(0, 40));
    w.cancel_step.push_back(rnd(0, 9) == 0 ? w.submit_step.back() + rnd(0, 8) : -1);
  }
  return w;
}

struct DrivenRun {
  std::vector<RequestOutput> outputs;
  EngineStats stats;
  int64_t tokens_computed = 0;
  int64_t poisoned_pages = 0;
};

// Steps an engine through the workload's arrivals and cancellations. With the cache on, evicted
// pages are poisoned in the fake model's memory and every write is checked to land in a page that
// is private to its sequence and not indexed by the cache.
DrivenRun drive(const FakeModelShape& shape, const EngineConfig& config, const Workload& w) {
  FakeRunner runner(shape);
  EngineCore core(config, runner);
  DrivenRun run;
  if (PrefixCache* cache = core.prefix_cache()) {
    cache->set_eviction_hook([&](int32_t page) {
      runner.poison_page(page);
      ++run.poisoned_pages;
    });
    runner.set_write_guard(
        [&core, cache](int32_t page) { return core.pool().refcount(page) == 1 && !cache->contains_page(page); });
  }
  std::vector<std::optional<RequestHandle>> handles(w.requests.size());
  size_t submitted = 0;
  for (int step = 0; step < 100000; ++step) {
    for (size_t i = 0; i < w.requests.size(); ++i) {
      if (w.submit_step[i] == step) {
        auto h = core.submit(w.requests[i]);
        EXPECT_TRUE(h.is_ok()) << h.status().to_string();
        handles[i] = *h;
        ++submitted;
      }
      if (w.cancel_step[i] == step && handles[i]) core.cancel(handles[i]->id);
    }
    if (!core.has_work()) {
      if (submitted == w.requests.size()) break;
      continue;
    }
    const Status st = core.step();
    EXPECT_TRUE(st.is_ok()) << st.to_string();
    if (!st.is_ok()) break;
  }
  for (auto& h : handles) run.outputs.push_back(h ? h->wait() : RequestOutput{});
  run.stats = core.stats();
  run.tokens_computed = runner.tokens_computed();
  EXPECT_EQ(run.stats.pages.held, 0) << "pages leaked";
  EXPECT_EQ(run.stats.pages.free + run.stats.pages.cached, shape.num_pages) << "pages leaked";
  return run;
}

struct RandomCase {
  int page_size;
  int hash_bits;
  uint32_t seed;
};

class PrefixCacheRandom : public ::testing::TestWithParam<RandomCase> {};

TEST_P(PrefixCacheRandom, SameGreedyTokensWithTheCacheOnAndOff) {
  const RandomCase c = GetParam();
  FakeModelShape shape;
  shape.page_size = c.page_size;
  shape.num_pages = 112 / c.page_size;  // 112 slots for prompts of up to 56 tokens + 20 outputs
  shape.eos_bias = 1.0f;                // some requests end early with eos
  const Workload w = shared_prefix_workload(48, shape.vocab, c.seed);

  EngineConfig on;
  on.scheduler.max_batch_tokens = 48;
  on.prefix_cache.hash_bits = c.hash_bits;
  EngineConfig off = on;
  off.enable_prefix_cache = false;
  const DrivenRun with_cache = drive(shape, on, w);
  const DrivenRun without = drive(shape, off, w);
  const auto alone = run_each_alone(shape, w.requests);

  int compared = 0;
  int64_t cached_sum = 0;
  for (size_t i = 0; i < w.requests.size(); ++i) {
    const RequestOutput& got = with_cache.outputs[i];
    cached_sum += got.cached_tokens;
    EXPECT_LE(got.cached_tokens, int32_t(w.requests[i].prompt_ids.size()) - 1) << "request " << i;
    EXPECT_EQ(got.cached_tokens % c.page_size, 0) << "request " << i;
    if (got.finish_reason == FinishReason::kCancelled || without.outputs[i].finish_reason == FinishReason::kCancelled) {
      // Cancelled at a step count, so how far it got depends on speed: only its prefix must agree.
      ASSERT_LE(got.output_ids.size(), alone[i].output_ids.size());
      EXPECT_TRUE(std::equal(got.output_ids.begin(), got.output_ids.end(), alone[i].output_ids.begin()))
          << "request " << i;
      continue;
    }
    EXPECT_EQ(got.output_ids, without.outputs[i].output_ids) << "request " << i;
    EXPECT_EQ(got.output_ids, alone[i].output_ids) << "request " << i;
    EXPECT_EQ(got.finish_reason, alone[i].finish_reason) << "request " << i;
    ++compared;
  }
  EXPECT_GT(compared, 30);
  const EngineStats& s = with_cache.stats;
  EXPECT_EQ(s.cached_prompt_tokens, cached_sum);
  EXPECT_GT(s.prefix_cache_hit_tokens, 0) << "the workload was meant to share prefixes";
  EXPECT_GT(s.preemptions, 0) << "the pool was meant to be small enough to force preemption";
  EXPECT_GT(s.pages.evictions, 0) << "the pool was meant to be small enough to force eviction";
  EXPECT_EQ(with_cache.poisoned_pages, s.prefix_cache.evicted);
  EXPECT_LT(with_cache.tokens_computed, without.tokens_computed);
  if (c.hash_bits < 64) {
    EXPECT_GT(s.prefix_cache.collisions, 0) << "a narrow hash was meant to collide";
  }
  EXPECT_EQ(without.stats.prefix_cache_lookups, 0);
  EXPECT_EQ(without.stats.pages.cached, 0);
}

INSTANTIATE_TEST_SUITE_P(Workloads, PrefixCacheRandom,
                         ::testing::Values(RandomCase{4, 64, 1}, RandomCase{4, 64, 2}, RandomCase{1, 64, 3},
                                           RandomCase{7, 64, 4}, RandomCase{16, 64, 5}, RandomCase{4, 3, 6},
                                           RandomCase{2, 3, 7}),
                         [](const ::testing::TestParamInfo<RandomCase>& info) {
                           return "page" + std::to_string(info.param.page_size) + "_hash" +
                                  std::to_string(info.param.hash_bits) + "_seed" + std::to_string(info.param.seed);
                         });

}  // namespace
}  // namespace fg::test
