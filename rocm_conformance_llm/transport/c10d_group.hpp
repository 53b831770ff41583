// The c10d types the transport layer shares between its always-built code and its NCCL process
// group file (built where libtorch has one). Internal to transport/: keeps c10d headers out of
// everyone else's.
#pragma once

#include <chrono>

#include <torch/version.h>
#include <torch/csrc/distributed/c10d/Store.hpp>
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

#if defined(RCL_HAVE_C10D_NCCL)
// c10d's ProcessGroupNCCL: RCCL in a ROCm libtorch, NCCL in a CUDA one (transport/process_group_nccl.cpp).
c10::intrusive_ptr<C10dGroup> make_nccl_group(const c10::intrusive_ptr<c10d::Store>& store, int rank, int world_size,
                                              std::chrono::milliseconds timeout);
#endif

}  // namespace rcl
