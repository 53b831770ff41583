// The c10d types the distributed layer shares between its always-built code and its
// ROCm-only RCCL file. Internal to distributed/: keeps c10d headers out of everyone else's.
#pragma once

#include <chrono>

#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/version.h>
#if TORCH_VERSION_MAJOR >= 2
#include <torch/csrc/distributed/c10d/Backend.hpp>
#else
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#endif

namespace rcl {

// Since 2.0 ProcessGroupGloo and ProcessGroupNCCL derive from Backend (ProcessGroup became a
// dispatcher over backends); in 1.13 they derive from ProcessGroup. The collectives we call
// (allreduce, allgather, _allgather_base, _reduce_scatter_base, alltoall_base, broadcast) have
// the same signatures on both; which of them Gloo really has: route_collective (communicator.hpp).
#if TORCH_VERSION_MAJOR >= 2
using C10dGroup = c10d::Backend;
#else
using C10dGroup = c10d::ProcessGroup;
#endif

#if defined(RCL_HAVE_RCCL)
// ProcessGroupNCCL on a ROCm libtorch, i.e. RCCL (transport/process_group_rccl_rocm.cpp).
c10::intrusive_ptr<C10dGroup> make_rccl_group(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                              int world_size, std::chrono::milliseconds timeout);
#endif

}  // namespace rcl
