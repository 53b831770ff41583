// A step's schedule as data: Trainer::train_step and Trainer::run (loop/trainer.cpp) in the
// order they reach each point and phase for one step, so that --explain-step can say what runs
// where without a reader following the loop (TrainerTest.StepFollowsItsSchedule holds the
// trainer to this table).
#include "rocm_conformance_llm/loop/step_hooks.hpp"

namespace rcl {
namespace {

constexpr HookPoint kStepBegin = HookPoint::step_begin, kBeforeForward = HookPoint::before_forward,
                    kLogits = HookPoint::logits, kGradients = HookPoint::gradients,
                    kBeforeStepTime = HookPoint::before_step_time, kBetweenSteps = HookPoint::between_steps,
                    kLoss = HookPoint::loss, kBeforePublish = HookPoint::before_publish,
                    kPublished = HookPoint::published;

constexpr std::array kSchedule = {
    ScheduleLine{"on_step_begin", "the step's number and learning rate are set; nothing has run", 0, &kStepBegin},
    ScheduleLine{"data", "each micro-batch (grad_accum_steps of them): its tokens read", 1},
    ScheduleLine{"before_forward", "before the micro-batch's forward, inside autocast", 1, &kBeforeForward},
    ScheduleLine{"forward", "the forward and its loss", 1},
    ScheduleLine{"on_logits", "each chunk of the LM head's logits, before its loss", 1, &kLogits},
    ScheduleLine{"backward", "the backward of the scaled loss", 1},
    ScheduleLine{"grad_sync", "every grad_sync_interval micro-batches and after the last: the gradients synced", 1},
    ScheduleLine{"on_gradients", "the gradients final (averaged across ranks); the optimizer has not run", 0,
                 &kGradients},
    ScheduleLine{"optimizer", "unscale, clip, the update the non-finite guard admits", 0},
    ScheduleLine{"grad_sync", "ZeRO and FSDP: the other ranks' updated shards gathered", 0},
    ScheduleLine{"before_step_time", "the step's work queued; its time about to be taken, its memory sampled", 0,
                 &kBeforeStepTime},
    ScheduleLine{"eval", "every eval_interval steps: validation, outside the step's time", 0},
    ScheduleLine{"between_steps",
                 "the previous step published, nothing of the next one run: where checks re-drive the loop or "
                 "probe the device",
                 0, &kBetweenSteps},
    ScheduleLine{"on_loss", "one step later, the next step's work queued: the loss on the host", 0, &kLoss},
    ScheduleLine{"allreduce_loss", "the mean loss across ranks", 0},
    ScheduleLine{"before_publish", "the record complete, no observer has seen it", 0, &kBeforePublish},
    ScheduleLine{"on_step", "the record published to every observer, in the wiring's order", 0, &kPublished},
};

}  // namespace

std::span<const ScheduleLine> step_schedule() { return kSchedule; }

}  // namespace rcl
