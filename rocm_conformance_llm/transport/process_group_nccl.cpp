// c10d's own ProcessGroupNCCL, the group torch.distributed calls "nccl": a ROCm libtorch builds it
// against RCCL, a CUDA one against NCCL, behind the same C++ API. Compiled wherever libtorch has
// it (cmake/NcclProcessGroup.cmake decides by capability, not vendor). No device API is called
// here: the group owns its streams and communicators.
#include <cstdlib>

#include <torch/version.h>
// The header hides behind the flag libtorch itself was built with; CMake found the group in this
// libtorch's libraries, so the flag holds for it.
#ifndef USE_C10D_NCCL
#define USE_C10D_NCCL 1
#endif
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>

#include "rocm_conformance_llm/transport/c10d_group.hpp"

namespace rcl {

c10::intrusive_ptr<C10dGroup> make_nccl_group(const c10::intrusive_ptr<c10d::Store>& store, int rank, int world_size,
                                              std::chrono::milliseconds timeout) {
  // Blocking wait: a stuck RCCL collective throws in the training thread after `timeout`, where
  // the heartbeat diagnosis names the missing rank, instead of the watchdog tearing the process
  // down. It also makes wait() return only once the collective finished, so timings are real.
  // Renamed with the TORCH_ prefix in 2.2; a user's own setting wins.
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 2)
  setenv("TORCH_NCCL_BLOCKING_WAIT", "1", /*overwrite=*/0);
#else
  setenv("NCCL_BLOCKING_WAIT", "1", /*overwrite=*/0);
#endif
  auto options = c10d::ProcessGroupNCCL::Options::create();
  options->timeout = timeout;
  return c10::make_intrusive<c10d::ProcessGroupNCCL>(store, rank, world_size, options);
}

}  // namespace rcl
