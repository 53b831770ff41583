// RCCL through PyTorch's own ProcessGroupNCCL, which a ROCm libtorch builds against RCCL.
// Compiled only against a ROCm libtorch (cmake/RcclBackend.cmake): its header is hipified
// and needs the HIP host flags.
#include <cstdlib>

#include <torch/version.h>
// A ROCm libtorch is built with the NCCL (= RCCL) backend; its header hides behind the build's flag.
#ifndef USE_C10D_NCCL
#define USE_C10D_NCCL 1
#endif
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>

#include "rocm_conformance_llm/transport/c10d_group.hpp"

namespace rcl {

c10::intrusive_ptr<C10dGroup> make_rccl_group(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                              int world_size, std::chrono::milliseconds timeout) {
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
