// Device scalars on their way to the host without a device-wide wait: the trainer's loss and
// gradient norm, the shadow check's verdict.
#pragma once

#include <chrono>
#include <concepts>
#include <optional>
#include <thread>
#include <vector>

#include <c10/core/Event.h>
#include <torch/torch.h>

namespace rcl {

// The stream libtorch queues work on for `device` (the HIP stream on ROCm).
c10::Stream current_stream(const torch::Device& device);

// Whether this libtorch's c10::Event can time and wait (2.x: elapsedTime, synchronize; 1.13:
// neither). A capability of the type, not a version guess.
template <typename E>
concept TimingEvent = requires(const E& e) {
  { e.elapsedTime(e) } -> std::convertible_to<double>;
  e.synchronize();
};

// Waits for `e` to fire: a blocking wait where the event has one, else a poll.
template <typename E>
void wait_for_event(const E& e) {
  if constexpr (TimingEvent<E>) e.synchronize();
  else
    while (!e.query()) std::this_thread::sleep_for(std::chrono::microseconds(50));
}

// Milliseconds from `a` to `b`, both fired; only called where TimingEvent holds.
template <typename E>
double elapsed_ms(const E& a, const E& b) {
  if constexpr (TimingEvent<E>) return a.elapsedTime(b);
  return 0;
}

// A stretch of a device's stream between two timing events, read later (when the step is
// published, by which time both have fired): timed on the device without the host waiting for it
// in the hot path. Only where c10::Event can time (TimingEvent: libtorch 2.x); callers check
// `available()` and time on the host otherwise.
class DeviceInterval {
 public:
  static bool available() { return TimingEvent<c10::Event>; }
  explicit DeviceInterval(const torch::Device& device);  // records the start on the current stream
  void stop();                                           // records the end
  double seconds() const;                                // waits for the end, if not yet fired

 private:
  torch::Device device_;
  c10::Event begin_, end_;
};

// The copy is queued behind the kernels so far into pinned memory and read later (one step
// later, in practice), by which time it has landed: an ordinary step never drains the GPU
// queue. On CPU the copy is immediate.
class DeferredScalars {
 public:
  explicit DeferredScalars(const std::vector<torch::Tensor>& scalars);
  // Waits for the copy (it has almost always landed by then).
  std::vector<double> get() const;

 private:
  torch::Tensor host_;
  std::optional<c10::Event> ready_;
};

}  // namespace rcl
