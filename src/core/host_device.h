// FG_HOST_DEVICE: marks a function callable from host and device code when a header is compiled
// by nvcc, and nothing otherwise, so CPU-only code and tests include the same header.
#pragma once

#if defined(__CUDACC__)
#define FG_HOST_DEVICE __host__ __device__
#else
#define FG_HOST_DEVICE
#endif
