#include "rocm_conformance_llm/base/host_reads.hpp"

#include <atomic>
#include <cstring>
#include <stdexcept>

#include <ATen/record_function.h>

namespace rcl {
namespace {
std::atomic<int64_t> g_reads{0};
std::atomic<bool> g_active{false};
at::CallbackHandle g_handle = 0;

std::unique_ptr<at::ObserverContext> count_scalar_read(const at::RecordFunction& fn) {
  // .item() dispatches aten::_local_scalar_dense on every device type.
  if (std::strcmp(fn.name(), "aten::_local_scalar_dense") == 0) ++g_reads;
  return nullptr;
}
}  // namespace

HostReadCounter::HostReadCounter() {
  if (g_active.exchange(true)) throw std::logic_error("HostReadCounter: another counter is already active");
  g_reads = 0;
  g_handle = at::addGlobalCallback(at::RecordFunctionCallback(&count_scalar_read).scopes({at::RecordScope::FUNCTION}));
}

HostReadCounter::~HostReadCounter() {
  at::removeCallback(g_handle);
  g_handle = 0;
  g_active = false;
}

int64_t HostReadCounter::count() const { return g_reads.load(); }

void note_device_wait() {
  if (g_active) ++g_reads;
}

}  // namespace rcl
