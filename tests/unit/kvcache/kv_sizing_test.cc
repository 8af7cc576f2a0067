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

}  // namespace
}  // namespace fg
