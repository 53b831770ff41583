// What the shadow check's two host passes share (shadow_verdict_host.cpp, the op verdict;
// shadow_checksums_host.cpp, a GEMM's row and column checksums): the projection's signs, the
// worst-ratio fold, and the x86-64-v3 clones of their hot loops.
#pragma once

#include <cmath>
#include <cstdint>

namespace rcl {

// Element j of the fixed +-1 vector shadow_verdict.cpp's signs() makes on a device, for the host
// passes.
inline double sign_of(int64_t j) { return ((static_cast<uint64_t>(j) * 0x9E3779B97F4A7C15ULL) >> 40) & 1 ? -1.0 : 1.0; }

// Folds one judged error into the worst ratio so far (a NaN error makes it NaN, and it stays);
// divides only when the ratio may exceed it. Returns whether it became the worst.
inline bool fold_worst(double& worst, double diff, double bound) {
  if (diff <= worst * bound || std::isnan(worst)) return false;
  worst = diff / bound;
  return true;
}

// The host passes' contiguous float (and double) loops (fp32 training: nearly all the work) are
// also built for x86-64-v3 (AVX2, FMA), picked at load time where the CPU has it: 1.4x on this
// host's EPYC.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define RCL_X86_64_V3_CLONE __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define RCL_X86_64_V3_CLONE
#endif

}  // namespace rcl
