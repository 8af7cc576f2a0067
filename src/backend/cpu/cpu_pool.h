// The CPU backend's threads: the calling (engine) thread plus helper threads that take chunks of
// an op's work, in which the caller NEVER waits for a helper that has not started. Work is split
// into chunks claimed one at a time through an atomic counter: the caller claims chunks itself,
// and a helper joins with whatever is left when it gets to run, so the caller only ever waits for
// chunks a helper is already running.
//
// Why not OpenMP: a parallel region ends in a barrier that every thread of the team must reach.
// On a machine whose cores are shared (CI, a laptop compiling, two engineers on one 2-core box), a
// team thread is often waiting for a time slice, and each barrier then costs milliseconds: decode
// of the default model measured 2.9 tok/s with two OpenMP threads against 42 tok/s with one on the
// same loaded machine (docs/perf.md). With this pool the worst case is the caller doing all the
// work, which is the single-thread speed.
//
// Helpers spin briefly after a job (a decode step runs a few hundred jobs back to back), yield,
// then sleep on a futex until the next job. Not thread-safe: one thread (the backend's owner)
// calls parallel_for, never from inside a chunk.
#pragma once

#include <atomic>
#include <cstdint>
#include <thread>
#include <type_traits>
#include <vector>

namespace fg::cpu {

class WorkerPool {
 public:
  // `threads` in all, the calling thread included (>= 1): threads - 1 helpers are started.
  explicit WorkerPool(int threads);
  ~WorkerPool();
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  int threads() const { return int(helpers_.size()) + 1; }

  // Calls fn(begin, end, worker) for the chunks [c * grain, min(n, (c + 1) * grain)) of [0, n),
  // each exactly once, on the calling thread (worker 0) and on helpers that are running (workers
  // 1 .. threads() - 1, for per-thread scratch), and returns when every chunk is done. Runs on the
  // calling thread alone when there is one chunk or no helper. Which worker runs which chunk is
  // not fixed, so a chunk's results must not depend on it. grain >= 1.
  template <class F>
  void parallel_for(int64_t n, int64_t grain, F&& fn) {
    auto call = [](const void* ctx, int64_t begin, int64_t end, int worker) {
      (*static_cast<const std::remove_reference_t<F>*>(ctx))(begin, end, worker);
    };
    run(n, grain, call, &fn);
  }

 private:
  using ChunkFn = void (*)(const void* ctx, int64_t begin, int64_t end, int worker);
  // One job's description; two slots, alternating by generation, so a helper that read a stale
  // generation never runs a chunk of the next job (its claim fails first: see claim()).
  struct Job {
    std::atomic<ChunkFn> fn{nullptr};
    std::atomic<const void*> ctx{nullptr};
    std::atomic<int64_t> n{0};
    std::atomic<int64_t> grain{1};
    std::atomic<int64_t> chunks{0};
  };

  void run(int64_t n, int64_t grain, ChunkFn fn, const void* ctx);
  // Claims and runs chunks of job `generation` until none is left (or the job is over).
  void work(uint32_t generation, int worker);
  void helper_main(int worker);

  Job jobs_[2];
  // generation << 32 | index of the next unclaimed chunk. Claiming compares the whole word, so a
  // claim succeeds only within the job it was read for.
  std::atomic<uint64_t> state_{0};
  std::atomic<int64_t> done_{0};   // chunks of the current job finished
  std::atomic<uint32_t> wake_{0};  // futex word sleeping helpers wait on
  std::atomic<int> sleepers_{0};   // helpers asleep (or about to be) on wake_
  std::atomic<bool> stop_{false};
  uint32_t generation_ = 0;  // the caller's last generation
  bool running_ = false;     // a job is in flight (parallel_for is not reentrant)
  std::vector<std::thread> helpers_;
};

// Elements of work per chunk for the row-wise ops: enough that claiming costs nothing, little
// enough (tens of microseconds) that a helper preempted inside one holds the caller up briefly.
constexpr int64_t kChunkWork = int64_t(1) << 15;

// fn(begin, end, worker) over n items holding `work` elements of work in all: on the calling
// thread in one call when work < min_work, else in chunks of about kChunkWork elements.
template <class F>
void parallel_items(WorkerPool& pool, int64_t n, int64_t work, int64_t min_work, F&& fn) {
  if (n <= 0) return;
  if (work < min_work || pool.threads() == 1) {
    fn(int64_t(0), n, 0);
    return;
  }
  const int64_t per_item = work / n > 0 ? work / n : 1;
  pool.parallel_for(n, kChunkWork / per_item > 0 ? kChunkWork / per_item : 1, fn);
}

// Threads for the CPU backend: FG_CPU_THREADS when set to a positive number, else the CPUs this
// process may run on (its affinity mask).
int default_cpu_threads();

}  // namespace fg::cpu
