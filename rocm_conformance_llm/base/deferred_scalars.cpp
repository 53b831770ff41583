#include "rocm_conformance_llm/base/deferred_scalars.hpp"

#include <c10/core/impl/DeviceGuardImplInterface.h>

namespace rcl {

c10::Stream current_stream(const torch::Device& device) {
  return c10::impl::getDeviceGuardImpl(device.type())->getStream(device);
}

// BACKEND_DEFAULT: timing on (PYTORCH_DEFAULT turns it off).
DeviceInterval::DeviceInterval(const torch::Device& device)
    : device_(device),
      begin_(device.type(), c10::EventFlag::BACKEND_DEFAULT),
      end_(device.type(), c10::EventFlag::BACKEND_DEFAULT) {
  begin_.record(current_stream(device_));
}

void DeviceInterval::stop() { end_.record(current_stream(device_)); }

double DeviceInterval::seconds() const {
  wait_for_event(end_);
  return elapsed_ms(begin_, end_) / 1000.0;
}

DeferredScalars::DeferredScalars(const std::vector<torch::Tensor>& scalars) {
  const auto stacked = torch::stack(scalars).to(torch::kDouble);
  if (stacked.device().is_cpu()) {
    host_ = stacked;
    return;
  }
  host_ = torch::empty(stacked.sizes(), torch::TensorOptions().dtype(torch::kDouble).pinned_memory(true));
  host_.copy_(stacked, /*non_blocking=*/true);
  ready_.emplace(stacked.device().type());
  ready_->record(current_stream(stacked.device()));
}

std::vector<double> DeferredScalars::get() const {
  // By now it has almost always fired (it is read one step later).
  if (ready_) wait_for_event(*ready_);
  const auto* data = host_.data_ptr<double>();
  return {data, data + host_.numel()};
}

}  // namespace rcl
