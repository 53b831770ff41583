#include "rocm_conformance_llm/checks/detectors/op_counter.hpp"

#include <atomic>
#include <memory>
#include <stdexcept>

#include <ATen/record_function.h>

#include "rocm_conformance_llm/loop/loop_access.hpp"

namespace rcl {

namespace {
// The callback is a plain function pointer, so the counts live here, shared by the single live
// counter.
std::mutex g_mutex;
OpCounts g_counts;
std::atomic<bool> g_ops_counting{false};

std::unique_ptr<at::ObserverContext> count_op(const at::RecordFunction& fn) {
  std::lock_guard<std::mutex> lock(g_mutex);
  ++g_counts[fn.name()];
  return nullptr;
}
}  // namespace

OpCounter::OpCounter() {
  if (g_ops_counting.exchange(true)) throw std::logic_error("OpCounter: another counter is already active");
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    g_counts.clear();
  }
  // FUNCTION scope only: ATen ops, not autograd node or user scopes.
  handle_ = at::addGlobalCallback(at::RecordFunctionCallback(&count_op).scopes({at::RecordScope::FUNCTION}));
}

OpCounter::~OpCounter() {
  stop();
  g_ops_counting = false;
}

void OpCounter::stop() {
  if (handle_ == 0) return;
  at::removeCallback(handle_);
  handle_ = 0;
}

OpCounts OpCounter::counts() const {
  std::lock_guard<std::mutex> lock(g_mutex);
  return g_counts;
}

void OpFingerprint::on_step_begin(int64_t step) {
  if (!loop_.replaying() && step % cfg_.fingerprint_interval == 0) counter_.emplace();
}

void OpFingerprint::before_step_time(StepRecord& rec, double /*elapsed_s*/) {
  if (!counter_) return;
  counter_->stop();
  rec.op_counts = counter_->counts();
  counter_.reset();
}

}  // namespace rcl
