// The attention correctness sweep (attention_check.cu, library fg_attention_check): the CUDA
// attention kernel against an f32 reference kernel on fresh random inputs. Used by
// attention_kernel_test and by attention_bench --check; needs a GPU. Plain C++, so a host-only
// test can call it.
#pragma once

#include <cstdint>

namespace fg::bench {

// Runs the targeted cases plus num_random random ones (seeded); prints each failure (and every
// case when verbose). Returns the number of failed cases.
int run_attention_checks(int num_random, uint64_t seed, bool verbose);

}  // namespace fg::bench
