// The stream-K split of the CUDA backend's mid-size GEMM (backend/cuda/stream_k.h), checked on the
// CPU: every (tile, k-step) belongs to exactly one CTA's run; the CTAs that touch a tile are
// first_cta .. last_cta, at most max_share + 1 of them; only a run's first and last pieces are
// parts of a tile, so two workspace slots per CTA hold every shared piece, and begins_in names the
// slot the tile's last CTA reads.
#include "backend/cuda/stream_k.h"

#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>
#include <vector>

namespace fg::cuda {
namespace {

void check_split(int tiles, int steps, int max_ctas, int min_units, int max_share) {
  SCOPED_TRACE(std::to_string(tiles) + " tiles x " + std::to_string(steps) + " steps, " + std::to_string(max_ctas) +
               " CTAs, >= " + std::to_string(min_units) + " steps each, tiles in <= " + std::to_string(max_share) +
               " runs");
  const StreamKSplit s = StreamKSplit::make(tiles, steps, max_ctas, min_units, max_share);
  const int total = tiles * steps;
  ASSERT_GE(s.ctas, 1);
  ASSERT_LE(s.ctas, max_ctas);
  ASSERT_GE(s.units, 1);
  EXPECT_LT((s.ctas - 1) * s.units, total);  // no CTA without steps
  EXPECT_GE(s.ctas * s.units, total);
  if (total >= min_units) {
    EXPECT_GE(s.units, min_units);
  }

  std::vector<int> hits(size_t(total), 0);
  std::map<int, std::set<int>> ctas_of_tile;
  std::set<std::pair<int, int>> slots;  // (cta, slot) of the shared pieces
  for (int cta = 0; cta < s.ctas; ++cta) {
    std::vector<std::pair<int, bool>> pieces;  // (tile, partial)
    bool first_seen = false;
    s.walk(cta, [&](int tile, int kb, int ke, bool first) {
      ASSERT_TRUE(tile >= 0 && tile < tiles && kb >= 0 && kb < ke && ke <= steps);
      EXPECT_EQ(first, !first_seen);
      first_seen = true;
      for (int k = kb; k < ke; ++k) ++hits[size_t(tile * steps + k)];
      ctas_of_tile[tile].insert(cta);
      const bool partial = kb > 0 || ke < steps;
      pieces.emplace_back(tile, partial);
      if (partial) {
        EXPECT_EQ(first, s.begins_in(cta, tile));
        EXPECT_TRUE(slots.emplace(cta, first ? 0 : 1).second) << "CTA " << cta << " reuses a slot";
      }
    });
    ASSERT_FALSE(pieces.empty()) << "CTA " << cta;
    for (size_t i = 1; i + 1 < pieces.size(); ++i) EXPECT_FALSE(pieces[i].second) << "a middle piece is partial";
  }
  for (int i = 0; i < total; ++i) ASSERT_EQ(hits[size_t(i)], 1) << "step " << i % steps << " of tile " << i / steps;
  for (const auto& [tile, ctas] : ctas_of_tile) {
    EXPECT_LE(int(ctas.size()), max_share + 1) << "tile " << tile;
    EXPECT_EQ(*ctas.begin(), s.first_cta(tile));
    EXPECT_EQ(*ctas.rbegin(), s.last_cta(tile));
    EXPECT_EQ(int(ctas.size()), s.last_cta(tile) - s.first_cta(tile) + 1) << "tile " << tile;
  }
}

TEST(StreamKSplit, EveryStepOnceAndSharedTilesInTwoSlotsPerCta) {
  for (int tiles : {1, 2, 3, 7, 32, 48, 224, 1002})
    for (int steps : {1, 2, 3, 16, 64, 225})
      for (int max_ctas : {1, 7, 132})
        for (int min_units : {1, 4})
          for (int max_share : {1, 3, 8}) check_split(tiles, steps, max_ctas, min_units, max_share);
}

// The split the kernel runs for Llama-3.1-8B's o projection (4,096 x 4,096: 32 tiles of 64 steps)
// on 132 SMs: 128 CTAs of 16 steps, each tile summed from four.
TEST(StreamKSplit, LlamaOProjectionOn132Sms) {
  const StreamKSplit s = StreamKSplit::make(32, 64, 132, 4, 8);
  EXPECT_EQ(s.units, 16);
  EXPECT_EQ(s.ctas, 128);
  EXPECT_EQ(s.first_cta(5), 20);
  EXPECT_EQ(s.last_cta(5), 23);
}

// A router's product (one tile of 64 steps): 8 runs of 8 steps, not 16 of 4.
TEST(StreamKSplit, OneTileIsSharedByAtMostMaxShareRuns) {
  const StreamKSplit s = StreamKSplit::make(1, 64, 132, 4, 8);
  EXPECT_EQ(s.units, 8);
  EXPECT_EQ(s.ctas, 8);
}

}  // namespace
}  // namespace fg::cuda
