#include "rocm_conformance_llm/utils/deferred_scalars.hpp"

#include <chrono>
#include <thread>

#include <c10/core/impl/DeviceGuardImplInterface.h>

namespace rcl {

c10::Stream current_stream(const torch::Device& device) {
  return c10::impl::getDeviceGuardImpl(device.type())->getStream(device);
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
  // c10::Event has no blocking wait in libtorch 1.13; by now it has almost always fired.
  while (ready_ && !ready_->query()) std::this_thread::sleep_for(std::chrono::microseconds(50));
  const auto* data = host_.data_ptr<double>();
  return {data, data + host_.numel()};
}

}  // namespace rcl
