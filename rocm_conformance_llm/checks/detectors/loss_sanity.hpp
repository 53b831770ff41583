// Loss sanity from step 2: a training run that diverges from its first steps. The loss-spike
// test (numerics.hpp) waits out the warm-up and then needs a baseline, so a loss that jumps at
// step 2 and stays high (the H200's `--stress all` on `small`: 11.23, then 16.11; docs/gpu-run.md)
// is judged by no one there. This check covers exactly those steps.
#pragma once

#include <cstdint>
#include <optional>

#include "rocm_conformance_llm/checks/findings/detector.hpp"

namespace rcl {

// Signature early_loss_divergence (training configuration, warn, once): from the second step
// the run saw until the last one loss_spike cannot judge (warmup_steps + loss_baseline_samples),
// a finite loss more than loss_sanity_first_step_margin nats above the run's first loss, or more
// than loss_sanity_vocab_margin nats above ln(vocab_size) (a uniform guess's loss; only with the
// vocabulary known). A fresh model starts near ln(vocab_size) and healthy training only lowers
// it, so a clean configuration never gets there: the learning rate, warm-up or initialisation do
// not suit the model's size. Later divergences are loss_spike's and loss_divergence's.
class LossSanityDetector final : public Detector {
 public:
  using Detector::Detector;
  void on_step(const StepRecord& r) override;

 private:
  struct FirstLoss {
    int64_t step = 0;
    double loss = 0.0;
  };
  std::optional<FirstLoss> first_;  // the first finite loss this run saw
};

}  // namespace rcl
