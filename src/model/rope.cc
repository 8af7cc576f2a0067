// RoPE frequency tables (see rope.h). The llama3 rule keeps high frequencies, divides low ones by
// `factor`, and interpolates smoothly between the two wavelength thresholds.
#include "model/rope.h"

#include <cmath>

namespace fg {

namespace {

// 1 / (factor[i] * base^(2i / rotary_dim)), every step in f32 as transformers' longrope init.
std::vector<float> longrope_table(const RopeConfig& rope, int rotary_dim, const std::vector<double>& factors) {
  const int half = rotary_dim / 2;
  FG_CHECK(factors.size() == size_t(half), "longrope factors do not match the rotary dimension");
  std::vector<float> inv(static_cast<size_t>(half));
  for (int i = 0; i < half; ++i) {
    const float exponent = float(2 * i) / float(rotary_dim);
    const float power = float(std::pow(rope.theta, double(exponent)));
    inv[size_t(i)] = 1.0f / (float(factors[size_t(i)]) * power);
  }
  return inv;
}

}  // namespace

std::vector<float> rope_long_inv_freq(const RopeConfig& rope, int rotary_dim) {
  FG_CHECK(rope.type == RopeScaling::kLongRope, "rope_long_inv_freq: not a longrope config");
  return longrope_table(rope, rotary_dim, rope.long_factor);
}

float rope_attention_scaling(const RopeConfig& rope) {
  return rope.type == RopeScaling::kLongRope ? float(rope.attention_factor) : 1.0f;
}

std::vector<float> rope_inv_freq(const RopeConfig& rope, int rotary_dim) {
  if (rope.type == RopeScaling::kLongRope) return longrope_table(rope, rotary_dim, rope.short_factor);
  const int half = rotary_dim / 2;
  std::vector<float> inv(static_cast<size_t>(half));
  for (int i = 0; i < half; ++i) {
    // Rounded to f32 first, as the reference implementation computes the table in f32.
    float exponent = float(2 * i) / float(rotary_dim);
    inv[size_t(i)] = float(1.0 / std::pow(rope.theta, double(exponent)));
  }
  switch (rope.type) {
    case RopeScaling::kDefault:
    case RopeScaling::kDynamic:
    case RopeScaling::kLongRope: break;
    case RopeScaling::kLinear:
      for (float& f : inv) f = float(double(f) / rope.factor);
      break;
    case RopeScaling::kLlama3: {
      const double kPi = 3.14159265358979323846;
      double old_len = double(rope.original_max_position);
      double low_wavelen = old_len / rope.low_freq_factor;
      double high_wavelen = old_len / rope.high_freq_factor;
      for (float& f : inv) {
        double freq = f;
        double wavelen = 2.0 * kPi / freq;
        if (wavelen > low_wavelen) {
          freq = freq / rope.factor;
        } else if (wavelen >= high_wavelen) {
          double smooth = (old_len / wavelen - rope.low_freq_factor) / (rope.high_freq_factor - rope.low_freq_factor);
          freq = (1.0 - smooth) * freq / rope.factor + smooth * freq;
        }
        f = float(freq);
      }
      break;
    }
  }
  if (!rope.freq_divisors.empty()) {
    FG_CHECK(rope.freq_divisors.size() == inv.size(), "rope frequency divisors do not match the rotary dimension");
    for (size_t i = 0; i < inv.size(); ++i) inv[i] = inv[i] / rope.freq_divisors[i];
  }
  return inv;
}

double rope_dynamic_base(const RopeConfig& rope, int rotary_dim, int64_t max_position_embeddings, int64_t seq_len) {
  if (seq_len <= max_position_embeddings) return rope.theta;
  double ratio = rope.factor * double(seq_len) / double(max_position_embeddings) - (rope.factor - 1.0);
  return rope.theta * std::pow(ratio, double(rotary_dim) / double(rotary_dim - 2));
}

}  // namespace fg
