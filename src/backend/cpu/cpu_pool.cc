// WorkerPool (cpu_pool.h): chunk claiming, the helpers' spin-yield-sleep loop, thread count.
//
// Memory ordering: the caller writes a job's slot, resets done_, then publishes the generation in
// state_ (release); a claim is a compare-exchange on state_ (acquire) that can only succeed while
// state_ still holds that generation, and the slot of a generation is rewritten only two
// generations later, after every chunk of this one is done, so a successful claim always reads
// its own job. Sleeping uses the Dekker pattern on seq_cst operations: a helper announces itself
// in sleepers_ and re-reads state_ before it waits; the caller publishes state_ and then reads
// sleepers_, so one of the two always sees the other.
#include "backend/cpu/cpu_pool.h"

#include <sched.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <string>

#include "core/status.h"

namespace fg::cpu {
namespace {

// How long an idle helper spins (pausing), then yields, before it sleeps on the futex: a decode
// step's ops follow each other within microseconds, so helpers stay awake through a step.
constexpr auto kSpinPause = std::chrono::microseconds(20);
constexpr auto kSpinYield = std::chrono::microseconds(300);
// How long the caller spins on chunks a helper is running before it starts yielding its core
// (a helper preempted mid-chunk may be waiting for exactly this core).
constexpr auto kWaitPause = std::chrono::microseconds(50);

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

}  // namespace

WorkerPool::WorkerPool(int threads) {
  FG_CHECK(threads >= 1, "WorkerPool needs at least the calling thread, got " + std::to_string(threads));
  helpers_.reserve(size_t(threads - 1));
  for (int w = 1; w < threads; ++w) helpers_.emplace_back([this, w] { helper_main(w); });
}

WorkerPool::~WorkerPool() {
  stop_.store(true);
  wake_.fetch_add(1);
  wake_.notify_all();
  for (std::thread& t : helpers_) t.join();
}

void WorkerPool::run(int64_t n, int64_t grain, ChunkFn fn, const void* ctx) {
  FG_CHECK(grain >= 1 && n >= 0, "parallel_for: n " + std::to_string(n) + ", grain " + std::to_string(grain));
  FG_CHECK(!running_, "parallel_for called from inside a chunk (it is not reentrant)");
  const int64_t chunks = (n + grain - 1) / grain;
  if (chunks <= 1 || helpers_.empty()) {
    for (int64_t c = 0; c < chunks; ++c) fn(ctx, c * grain, std::min(n, (c + 1) * grain), 0);
    return;
  }
  FG_CHECK(chunks < (int64_t(1) << 31), "parallel_for: too many chunks");
  running_ = true;
  const uint32_t gen = ++generation_;
  Job& job = jobs_[gen & 1];
  job.fn.store(fn, std::memory_order_relaxed);
  job.ctx.store(ctx, std::memory_order_relaxed);
  job.n.store(n, std::memory_order_relaxed);
  job.grain.store(grain, std::memory_order_relaxed);
  job.chunks.store(chunks, std::memory_order_relaxed);
  done_.store(0, std::memory_order_relaxed);
  state_.store(uint64_t(gen) << 32);  // seq_cst: publishes the job (see the file comment)
  if (sleepers_.load() > 0) {
    wake_.fetch_add(1);
    wake_.notify_all();
  }
  work(gen, 0);
  // Only chunks a helper has claimed (and so is running) can be outstanding now.
  const auto start = std::chrono::steady_clock::now();
  for (int spins = 0; done_.load(std::memory_order_acquire) < chunks; ++spins) {
    if ((spins & 63) == 63 && std::chrono::steady_clock::now() - start > kWaitPause) {
      sched_yield();
    } else {
      cpu_relax();
    }
  }
  running_ = false;
}

void WorkerPool::work(uint32_t generation, int worker) {
  const Job& job = jobs_[generation & 1];
  while (true) {
    uint64_t s = state_.load(std::memory_order_acquire);
    if (uint32_t(s >> 32) != generation) return;
    const int64_t index = int64_t(uint32_t(s));
    if (index >= job.chunks.load(std::memory_order_relaxed)) return;
    if (!state_.compare_exchange_weak(s, s + 1, std::memory_order_acq_rel)) continue;
    const int64_t n = job.n.load(std::memory_order_relaxed), grain = job.grain.load(std::memory_order_relaxed);
    job.fn.load(std::memory_order_relaxed)(job.ctx.load(std::memory_order_relaxed), index * grain,
                                           std::min(n, (index + 1) * grain), worker);
    done_.fetch_add(1, std::memory_order_release);
  }
}

void WorkerPool::helper_main(int worker) {
  uint32_t seen = 0;
  while (!stop_.load(std::memory_order_relaxed)) {
    // Spin, then yield, then sleep, until a job newer than the last one seen is published.
    const auto idle_since = std::chrono::steady_clock::now();
    uint32_t gen = seen;
    for (int spins = 0;; ++spins) {
      gen = uint32_t(state_.load(std::memory_order_acquire) >> 32);
      if (gen != seen || stop_.load(std::memory_order_relaxed)) break;
      if ((spins & 63) != 63) {
        cpu_relax();
        continue;
      }
      const auto idle = std::chrono::steady_clock::now() - idle_since;
      if (idle < kSpinPause) continue;
      if (idle < kSpinYield) {
        sched_yield();
        continue;
      }
      const uint32_t w = wake_.load();
      sleepers_.fetch_add(1);
      gen = uint32_t(state_.load() >> 32);
      if (gen == seen && !stop_.load()) wake_.wait(w);
      sleepers_.fetch_sub(1);
      break;
    }
    if (gen == seen) continue;  // woken for stop, or spuriously
    seen = gen;
    work(gen, worker);
  }
}

int default_cpu_threads() {
  if (const char* env = std::getenv("FG_CPU_THREADS")) {
    const int n = std::atoi(env);
    if (n > 0) return n;
  }
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1u, std::thread::hardware_concurrency());
}

}  // namespace fg::cpu
