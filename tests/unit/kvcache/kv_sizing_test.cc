// Byte-size parsing and page counts from a memory budget.
#include "kvcache/kv_sizing.h"

#include <gtest/gtest.h>

namespace fg {
namespace {

TEST(KvSizing, ParsesSizesWithBinarySuffixes) {
  EXPECT_EQ(*parse_byte_size("1024"), 1024);
  EXPECT_EQ(*parse_byte_size("4KiB"), 4096);
  EXPECT_EQ(*parse_byte_size("512MiB"), 512ll << 20);
  EXPECT_EQ(*parse_byte_size("1.5 GiB"), 3ll << 29);
  EXPECT_EQ(*parse_byte_size("2g"), 2ll << 30);
  EXPECT_EQ(*parse_byte_size("3GB"), 3ll << 30);
  for (const char* bad : {"", "GiB", "12 parsecs", "1.2.3GiB", "-5MiB", "5 MiB extra"}) {
    auto r = parse_byte_size(bad);
    EXPECT_FALSE(r.is_ok()) << bad;
    if (!r.is_ok()) {
      EXPECT_NE(r.status().message().find("memory size"), std::string::npos);
    }
  }
}

TEST(KvSizing, PagesFromAnExplicitBudget) {
  KvCacheShape shape{32, 8, 128, DType::kBF16, 16};                  // Llama-3.1-8B
  EXPECT_EQ(kv_bytes_per_page(shape), 2ll * 32 * 16 * 8 * 128 * 2);  // 2 MiB
  KvMemoryRequest req;
  req.kv_cache_bytes = 10ll << 30;
  EXPECT_EQ(*kv_num_pages(shape, req), 5120);
  req.kv_cache_bytes = 1000;
  auto tiny = kv_num_pages(shape, req);
  ASSERT_FALSE(tiny.is_ok());
  EXPECT_NE(tiny.status().message().find("--kv-cache-memory"), std::string::npos);
}

TEST(KvSizing, Fp8PagesAreHalfTheBytesOfBf16) {
  KvCacheShape bf16{32, 8, 128, DType::kBF16, 16}, fp8{32, 8, 128, DType::kF8E4M3, 16};
  EXPECT_EQ(kv_bytes_per_page(fp8), 2ll * 32 * 16 * 8 * 128);  // 1 MiB: one byte per value
  EXPECT_EQ(2 * kv_bytes_per_page(fp8), kv_bytes_per_page(bf16));
  KvMemoryRequest req;
  req.kv_cache_bytes = 10ll << 30;
  EXPECT_EQ(*kv_num_pages(fp8, req), 2 * *kv_num_pages(bf16, req));  // twice the tokens in the same memory
}

TEST(KvSizing, PagesFromAMemoryFraction) {
  KvCacheShape shape{2, 2, 64, DType::kF32, 4};  // 8 KiB per page
  KvMemoryRequest req;
  req.gpu_memory_fraction = 0.5;
  req.device_total_bytes = 1 << 30;
  req.device_free_bytes = (1 << 30) - (100 << 20);  // 100 MiB in use
  req.activation_reserve_bytes = 12 << 20;
  EXPECT_EQ(*kv_num_pages(shape, req), ((512 - 100 - 12) << 20) / 8192);
  req.device_total_bytes = 0;
  EXPECT_EQ(kv_num_pages(shape, req).status().code(), ErrorCode::kUnsupported);
  req.gpu_memory_fraction = 1.5;
  EXPECT_EQ(kv_num_pages(shape, req).status().code(), ErrorCode::kInvalidArgument);
}

// The CPU default: a few full-length sequences, at most kCpuKvMaxBytes unless one sequence alone
// needs more, and never more than the memory fraction allows.
TEST(KvSizing, CpuDefaultCapsTheFractionsBudget) {
  const int64_t per_token = 30 * 2 * 3 * 64 * 4;  // SmolLM2-135M, f32
  EXPECT_EQ(cpu_default_kv_cap_bytes(per_token, 8192), kCpuKvSequences * 8192 * per_token);
  EXPECT_EQ(cpu_default_kv_cap_bytes(per_token, 1 << 20), per_token << 20);  // one long sequence wins
  EXPECT_EQ(cpu_default_kv_cap_bytes(100 << 10, 8192), kCpuKvMaxBytes);      // 4 x 800 MiB: capped

  KvCacheShape shape{30, 3, 64, DType::kF32, 16};
  KvMemoryRequest req;
  req.gpu_memory_fraction = 0.9;
  req.device_total_bytes = req.device_free_bytes = 20ll << 30;
  req.cap_bytes = cpu_default_kv_cap_bytes(per_token, 8192);
  EXPECT_EQ(*kv_num_pages(shape, req), kCpuKvSequences * 8192 / 16);
  req.device_total_bytes = req.device_free_bytes = 64 << 20;  // little memory: the fraction decides
  EXPECT_EQ(*kv_num_pages(shape, req), int64_t(double(64 << 20) * 0.9) / kv_bytes_per_page(shape));
  req.kv_cache_bytes = 1ll << 30;  // an explicit size is never capped
  EXPECT_EQ(*kv_num_pages(shape, req), (1ll << 30) / kv_bytes_per_page(shape));
}

}  // namespace
}  // namespace fg
