// The CPU backend's WorkerPool (cpu_pool.h): every chunk of every job runs exactly once, with a
// worker index in range, whether the helpers are spinning, asleep or absent; jobs back to back
// (the pattern of a decode step) never mix chunks of two jobs.
#include "backend/cpu/cpu_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

namespace fg::cpu {
namespace {

// Runs one job over n items in chunks of `grain` and checks each item ran once, in its chunk.
void expect_each_item_once(WorkerPool& pool, int64_t n, int64_t grain) {
  std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
  std::atomic<int> bad_worker{0}, bad_chunk{0};
  pool.parallel_for(n, grain, [&](int64_t begin, int64_t end, int worker) {
    if (worker < 0 || worker >= pool.threads()) bad_worker.fetch_add(1);
    if (begin % grain != 0 || end - begin > grain || end > n || begin >= end) bad_chunk.fetch_add(1);
    for (int64_t i = begin; i < end; ++i) hits[size_t(i)].fetch_add(1);
  });
  EXPECT_EQ(bad_worker.load(), 0);
  EXPECT_EQ(bad_chunk.load(), 0);
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[size_t(i)].load(), 1) << "item " << i << " of " << n;
}

TEST(WorkerPool, EveryItemRunsOnceInItsChunk) {
  for (int threads : {1, 2, 3, 5}) {
    WorkerPool pool(threads);
    EXPECT_EQ(pool.threads(), threads);
    for (int64_t n : {0, 1, 7, 64, 1000, 4099})
      for (int64_t grain : {1, 3, 64, 5000}) expect_each_item_once(pool, n, grain);
  }
}

TEST(WorkerPool, OneChunkOrOneThreadRunsOnTheCaller) {
  const std::thread::id me = std::this_thread::get_id();
  WorkerPool alone(1);
  alone.parallel_for(100, 7, [&](int64_t, int64_t, int worker) {
    EXPECT_EQ(worker, 0);
    EXPECT_EQ(std::this_thread::get_id(), me);
  });
  WorkerPool pool(3);
  int calls = 0;
  pool.parallel_for(10, 10, [&](int64_t begin, int64_t end, int worker) {
    ++calls;
    EXPECT_EQ(begin, 0);
    EXPECT_EQ(end, 10);
    EXPECT_EQ(worker, 0);
    EXPECT_EQ(std::this_thread::get_id(), me);
  });
  EXPECT_EQ(calls, 1);
}

// Thousands of short jobs back to back, as a decode step issues them: a helper that is late for
// one job must never run a chunk of it under the next job's function.
TEST(WorkerPool, BackToBackJobsNeverMix) {
  WorkerPool pool(3);
  for (int job = 0; job < 20000; ++job) {
    std::atomic<int64_t> sum{0};
    const int64_t n = 1 + job % 61;
    pool.parallel_for(n, 1 + job % 3, [&, job](int64_t begin, int64_t end, int) {
      for (int64_t i = begin; i < end; ++i) sum.fetch_add(i + job);
    });
    ASSERT_EQ(sum.load(), n * (n - 1) / 2 + n * job) << "job " << job;
  }
}

// After a pause long enough for the helpers to fall asleep, jobs still complete (the caller does
// not wait for sleeping helpers) and the helpers wake up for later ones.
TEST(WorkerPool, JobsCompleteWhileHelpersSleep) {
  WorkerPool pool(2);
  for (int round = 0; round < 5; ++round) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    expect_each_item_once(pool, 257, 4);
  }
}

TEST(WorkerPool, ThreadCountFromTheEnvironment) {
  setenv("FG_CPU_THREADS", "3", 1);
  EXPECT_EQ(default_cpu_threads(), 3);
  unsetenv("FG_CPU_THREADS");
  EXPECT_GE(default_cpu_threads(), 1);
}

}  // namespace
}  // namespace fg::cpu
