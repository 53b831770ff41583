#include "rocm_conformance_llm/base/host_reads.hpp"

#include <atomic>
#include <cstring>
#include <stdexcept>

#include <ATen/record_function.h>

namespace rcl {
namespace {
std::atomic<int64_t> g_reads{0};
std::atomic<bool> g_host_reads_counting{false};
at::CallbackHandle g_handle = 0;

// ATen's fused AdamW reads each tensor's step count with .item() in its CPU kernel, where its
// CUDA/HIP kernel reads it on the device: a read inside it is the CPU kernel's, not one a GPU
// run makes, and counting it would hide the step's own reads (CPU runs stand in for GPU ones).
thread_local int t_inside_fused_adamw = 0;

bool named(const at::RecordFunction& fn, const char* name) { return std::strcmp(fn.name(), name) == 0; }

std::unique_ptr<at::ObserverContext> count_scalar_read(const at::RecordFunction& fn) {
  if (named(fn, "aten::_fused_adamw_")) ++t_inside_fused_adamw;
  // .item() dispatches aten::_local_scalar_dense on every device type.
  else if (t_inside_fused_adamw == 0 && named(fn, "aten::_local_scalar_dense")) ++g_reads;
  return nullptr;
}

void leave(const at::RecordFunction& fn, at::ObserverContext*) {
  if (named(fn, "aten::_fused_adamw_")) --t_inside_fused_adamw;
}
}  // namespace

HostReadCounter::HostReadCounter() {
  if (g_host_reads_counting.exchange(true))
    throw std::logic_error("HostReadCounter: another counter is already active");
  g_reads = 0;
  g_handle =
      at::addGlobalCallback(at::RecordFunctionCallback(&count_scalar_read, &leave).scopes({at::RecordScope::FUNCTION}));
}

HostReadCounter::~HostReadCounter() {
  at::removeCallback(g_handle);
  g_handle = 0;
  g_host_reads_counting = false;
}

int64_t HostReadCounter::count() const { return g_reads.load(); }

void note_device_wait() {
  if (g_host_reads_counting) ++g_reads;
}

}  // namespace rcl
