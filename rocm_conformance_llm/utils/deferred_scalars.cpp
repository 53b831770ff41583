#include "rocm_conformance_llm/utils/deferred_scalars.hpp"

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
  // By now it has almost always fired (it is read one step later).
  if (ready_) wait_for_event(*ready_);
  const auto* data = host_.data_ptr<double>();
  return {data, data + host_.numel()};
}

}  // namespace rcl
