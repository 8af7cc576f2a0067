// The in-process communicator (backend/communicator.h) with N ranks as threads, and the two
// backend ops tensor parallelism adds: embedding_shard (a vocabulary shard's lookup) and copy_rows
// (the logits columns of each rank's shard).
#include "backend/communicator.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <thread>
#include <vector>

#include "backend/backend.h"

namespace fg {
namespace {

// Runs fn(rank, comm) on one thread per rank.
template <class F>
void on_ranks(int n, F fn) {
  auto comms = make_local_communicators(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) threads.emplace_back([&, r] { fn(r, *comms[size_t(r)]); });
  for (auto& t : threads) t.join();
}

TEST(LocalCommunicator, AllReduceSumsInRankOrderOnEveryRank) {
  constexpr int kRanks = 4, kN = 1001;
  std::vector<std::vector<float>> data(kRanks, std::vector<float>(kN));
  for (int r = 0; r < kRanks; ++r)
    for (int i = 0; i < kN; ++i) data[size_t(r)][size_t(i)] = (r == 1 ? 1e8f : 1.0f) * float(i % 7 + r) * 0.1f;
  // The expected bits: 0 + rank 0 + rank 1 + ... in f32, whatever rank computes them.
  std::vector<float> expect(kN, 0.0f);
  for (int r = 0; r < kRanks; ++r)
    for (int i = 0; i < kN; ++i) expect[size_t(i)] += data[size_t(r)][size_t(i)];
  for (int repeat = 0; repeat < 3; ++repeat) {  // the group's barriers are reusable
    auto work = data;
    on_ranks(kRanks, [&](int r, Communicator& c) {
      EXPECT_EQ(c.rank(), r);
      EXPECT_EQ(c.size(), kRanks);
      Tensor t = Tensor::contiguous(work[size_t(r)].data(), DType::kF32, Device::kCpu, {kN});
      c.all_reduce_sum(t);
    });
    for (int r = 0; r < kRanks; ++r) EXPECT_EQ(work[size_t(r)], expect) << "rank " << r;
  }
}

TEST(LocalCommunicator, AllGatherPlacesEachRankInOrder) {
  constexpr int kRanks = 3, kN = 5;
  std::vector<std::vector<float>> out(kRanks, std::vector<float>(kRanks * kN, -1.0f));
  on_ranks(kRanks, [&](int r, Communicator& c) {
    std::vector<float> mine(kN);
    for (int i = 0; i < kN; ++i) mine[size_t(i)] = float(100 * r + i);
    Tensor in = Tensor::contiguous(mine.data(), DType::kF32, Device::kCpu, {kN});
    Tensor o = Tensor::contiguous(out[size_t(r)].data(), DType::kF32, Device::kCpu, {kRanks * kN});
    c.all_gather(in, o);
  });
  for (int r = 0; r < kRanks; ++r)
    for (int s = 0; s < kRanks; ++s)
      for (int i = 0; i < kN; ++i) EXPECT_EQ(out[size_t(r)][size_t(s * kN + i)], float(100 * s + i));
}

TEST(LocalCommunicator, BroadcastHostCopiesTheRootsBytes) {
  constexpr int kRanks = 4;
  std::vector<std::vector<int>> buf(kRanks, std::vector<int>(6));
  on_ranks(kRanks, [&](int r, Communicator& c) {
    for (int i = 0; i < 6; ++i) buf[size_t(r)][size_t(i)] = r * 10 + i;
    c.broadcast_host(buf[size_t(r)].data(), 6 * sizeof(int), 2);
    c.barrier();
  });
  for (int r = 0; r < kRanks; ++r) EXPECT_EQ(buf[size_t(r)], (std::vector<int>{20, 21, 22, 23, 24, 25}));
}

TEST(CpuShardOps, EmbeddingShardLooksUpItsRowsAndZerosTheRest) {
  auto be = make_cpu_backend();
  constexpr int kRows = 3, kHidden = 5;
  std::vector<float> table(kRows * kHidden);
  for (size_t i = 0; i < table.size(); ++i) table[i] = float(i) + 0.5f;
  std::vector<int32_t> ids = {6, 7, 8, 9, 5, 0, -1};  // the shard holds ids 6..8
  std::vector<float> out(ids.size() * kHidden, NAN);
  Tensor t = Tensor::contiguous(table.data(), DType::kF32, Device::kCpu, {kRows, kHidden});
  Tensor i = Tensor::contiguous(ids.data(), DType::kI32, Device::kCpu, {int64_t(ids.size())});
  Tensor o = Tensor::contiguous(out.data(), DType::kF32, Device::kCpu, {int64_t(ids.size()), kHidden});
  be->embedding_shard(i, t, 6, o);
  for (size_t r = 0; r < ids.size(); ++r)
    for (int h = 0; h < kHidden; ++h) {
      const int64_t row = ids[r] - 6;
      const float want = row >= 0 && row < kRows ? table[size_t(row * kHidden + h)] : 0.0f;
      EXPECT_EQ(out[r * kHidden + size_t(h)], want) << "id " << ids[r];
    }
}

TEST(CpuShardOps, CopyRowsMovesStridedRowsOnly) {
  auto be = make_cpu_backend();
  std::vector<uint8_t> src(4 * 10), dst(4 * 12, 0xee);
  for (size_t i = 0; i < src.size(); ++i) src[i] = uint8_t(i);
  be->copy_rows(dst.data() + 2, 12, src.data() + 1, 10, 7, 4);
  for (size_t r = 0; r < 4; ++r)
    for (size_t c = 0; c < 12; ++c) {
      const bool inside = c >= 2 && c < 9;
      EXPECT_EQ(dst[r * 12 + c], inside ? uint8_t(r * 10 + 1 + c - 2) : uint8_t(0xee)) << r << "," << c;
    }
}

}  // namespace
}  // namespace fg
