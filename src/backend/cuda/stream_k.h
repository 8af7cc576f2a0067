// The stream-K split of gemm_mid.cu's products, on the host and in the kernel: a product of
// `tiles` output tiles of `steps` k-steps each is one tile-major sequence of tiles x steps, cut
// into `ctas` runs of `units` steps (the last may be shorter). A CTA's run may start and end inside
// a tile; so a tile is computed by the CTAs first_cta(tile) .. last_cta(tile), one piece each, and
// only a CTA's first and last pieces can be parts of a tile (those between are whole tiles). No
// CUDA headers: the unit tests check the split on the CPU.
#pragma once

#include <algorithm>
#include <cstdint>

#include "core/host_device.h"

namespace fg::cuda {

struct StreamKSplit {
  int tiles = 0;
  int steps = 0;
  int units = 0;  // steps per CTA
  int ctas = 0;

  // At most max_ctas runs of at least min_units steps where the product has that many, and of at
  // least steps / max_share (rounded up), so no tile is shared by more than max_share + 1 CTAs (the
  // last one reads every share). tiles * steps must stay below 2^30 (the positions are ints).
  static StreamKSplit make(int64_t tiles, int64_t steps, int max_ctas, int min_units, int max_share) {
    StreamKSplit s;
    s.tiles = int(tiles);
    s.steps = int(steps);
    const int64_t total = tiles * steps;
    const int64_t ctas = std::max<int64_t>(1, std::min<int64_t>(max_ctas, total / std::max(1, min_units)));
    const int64_t share_units = (steps + std::max(1, max_share) - 1) / std::max(1, max_share);
    s.units = int(std::max<int64_t>({1, (total + ctas - 1) / ctas, share_units}));
    s.ctas = int((total + s.units - 1) / s.units);
    return s;
  }

  FG_HOST_DEVICE int first_cta(int tile) const { return tile * steps / units; }
  FG_HOST_DEVICE int last_cta(int tile) const { return ((tile + 1) * steps - 1) / units; }
  // For first_cta(tile) <= cta <= last_cta(tile): whether cta's run begins in this tile, i.e. its
  // piece of the tile is its first one.
  FG_HOST_DEVICE bool begins_in(int cta, int tile) const { return cta * units >= tile * steps; }

  // f(tile, kb, ke, first) for each piece of cta's run in order: steps [kb, ke) of tile; first for
  // the run's first piece.
  template <class F>
  FG_HOST_DEVICE void walk(int cta, F&& f) const {
    int pos = cta * units;
    const int end = std::min(tiles * steps, pos + units);
    bool first = true;
    while (pos < end) {
      const int tile = pos / steps, kb = pos - tile * steps;
      const int ke = std::min(steps, kb + (end - pos));
      f(tile, kb, ke, first);
      pos += ke - kb;
      first = false;
    }
  }
};

}  // namespace fg::cuda
