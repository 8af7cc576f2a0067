// The tensor-parallel split of a model (see tensor_parallel.h).
#include "model/tensor_parallel.h"

#include <algorithm>
#include <string>

namespace fg {

Result<TpShard> make_tp_shard(const ModelConfig& c, int rank, int size) {
  const std::string n = std::to_string(size);
  if (size < 1 || rank < 0 || rank >= size)
    return invalid_argument("tensor parallelism: rank " + std::to_string(rank) + " of " + n + " ranks");
  if (size > 1) {
    if (c.moe.num_experts > 0)
      return unsupported(c.dir + ": tensor parallelism over mixture-of-experts layers (" + c.architecture +
                         ") is not supported; use --tensor-parallel-size 1");
    if (c.num_q_heads % size != 0)
      return invalid_argument(c.dir + ": " + std::to_string(c.num_q_heads) +
                              " attention heads cannot be split over --tensor-parallel-size " + n);
    if (c.num_kv_heads >= size ? c.num_kv_heads % size != 0 : size % c.num_kv_heads != 0)
      return invalid_argument(c.dir + ": " + std::to_string(c.num_kv_heads) +
                              " key/value heads cannot be split over --tensor-parallel-size " + n +
                              " (it must divide them, or be a multiple of them)");
    if (c.intermediate_size % size != 0)
      return invalid_argument(c.dir + ": intermediate_size " + std::to_string(c.intermediate_size) +
                              " cannot be split over --tensor-parallel-size " + n);
  }
  TpShard s;
  s.rank = rank;
  s.size = size;
  s.q_heads = c.num_q_heads / size;
  s.q_head0 = rank * s.q_heads;
  if (c.num_kv_heads >= size) {
    s.kv_heads = c.num_kv_heads / size;
    s.kv_head0 = rank * s.kv_heads;
  } else {  // replicated: the kv head of this rank's q heads
    s.kv_heads = 1;
    s.kv_head0 = rank / (size / c.num_kv_heads);
  }
  s.inter = c.intermediate_size / size;
  s.inter0 = rank * s.inter;
  s.vocab_rows = (c.vocab_size + size - 1) / size;
  s.vocab0 = rank * s.vocab_rows;
  s.vocab_valid = std::clamp<int64_t>(c.vocab_size - s.vocab0, 0, s.vocab_rows);
  return s;
}

ModelConfig shard_config(const ModelConfig& c, const TpShard& s) {
  ModelConfig local = c;
  local.num_q_heads = s.q_heads;
  local.num_kv_heads = s.kv_heads;
  local.intermediate_size = s.inter;
  local.vocab_size = s.vocab_rows;
  return local;
}

}  // namespace fg
