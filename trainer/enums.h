#pragma once
/// @file
/// The Trainer's closed sets of choices as enums. Text appears only at the user boundary (command-line flags,
/// config files, checkpoint records, console lines): parse_*() turns a spelling into a value once, with an error
/// that lists the accepted spellings, and name() gives the canonical spelling back.
#include <array>
#include <string>
#include <string_view>
#include <utility>

#include <volt/runtime/error.h>

namespace volt {

/// How gradient clipping limits gradients (TrainerOptions::gradient_clip_algorithm).
enum class GradClipAlgorithm {
  norm,   ///< scale all gradients of an optimizer so their global 2-norm is at most gradient_clip_val
  value,  ///< clamp each gradient element to [-gradient_clip_val, gradient_clip_val]
};

/// When the Trainer steps an LR scheduler (SchedulerConfig::interval).
enum class SchedulerInterval {
  epoch,  ///< after every `frequency` training epochs
  step,   ///< after every `frequency` optimizer steps
};

/// How Trainer::save_checkpoint lays out the optimizer state of a sharded strategy (TrainerOptions::checkpoint_layout).
enum class CheckpointLayout {
  full,     ///< gathered into the layout DDP writes; rank 0 writes one `<stem>.safetensors`
  sharded,  ///< each rank writes its own shards under `<stem>.shards/` (trainer/checkpoint/sharded.h)
};

/// What the Trainer is running (Trainer::stage()).
enum class Stage {
  none,      ///< between runs
  train,     ///< fit's training loop
  validate,  ///< validation inside fit, or Trainer::validate
  test,      ///< Trainer::test
  predict,   ///< Trainer::predict
};

namespace detail {
template <class E, size_t N>
struct EnumNames {
  std::array<std::pair<E, std::string_view>, N> items;
  const char* what;  ///< the option's name in errors

  std::string_view name(E e) const {
    for (const auto& [v, s] : items)
      if (v == e) return s;
    return "?";
  }
  E parse(std::string_view s) const {
    std::string accepted;
    for (const auto& [v, n] : items) {
      if (n == s) return v;
      accepted += (accepted.empty() ? "\"" : ", \"") + std::string(n) + "\"";
    }
    VOLT_CHECK(false, what, "=\"", std::string(s), "\" is not one of ", accepted);
    return items[0].first;
  }
};
inline constexpr EnumNames<GradClipAlgorithm, 2> kGradClipNames{
    {{{GradClipAlgorithm::norm, "norm"}, {GradClipAlgorithm::value, "value"}}}, "gradient_clip_algorithm"};
inline constexpr EnumNames<SchedulerInterval, 2> kIntervalNames{
    {{{SchedulerInterval::epoch, "epoch"}, {SchedulerInterval::step, "step"}}}, "interval"};
inline constexpr EnumNames<CheckpointLayout, 2> kCheckpointLayoutNames{
    {{{CheckpointLayout::full, "full"}, {CheckpointLayout::sharded, "sharded"}}}, "checkpoint_layout"};
inline constexpr EnumNames<Stage, 5> kStageNames{{{{Stage::none, ""},
                                                    {Stage::train, "train"},
                                                    {Stage::validate, "validate"},
                                                    {Stage::test, "test"},
                                                    {Stage::predict, "predict"}}},
                                                  "stage"};
}  // namespace detail

inline std::string_view name(GradClipAlgorithm a) { return detail::kGradClipNames.name(a); }
inline std::string_view name(SchedulerInterval i) { return detail::kIntervalNames.name(i); }
inline std::string_view name(Stage s) { return detail::kStageNames.name(s); }
inline std::string_view name(CheckpointLayout l) { return detail::kCheckpointLayoutNames.name(l); }

/// Throws volt::Error naming the option, the bad spelling and the accepted ones.
inline GradClipAlgorithm parse_gradient_clip_algorithm(std::string_view s) { return detail::kGradClipNames.parse(s); }
inline SchedulerInterval parse_scheduler_interval(std::string_view s) { return detail::kIntervalNames.parse(s); }
inline CheckpointLayout parse_checkpoint_layout(std::string_view s) { return detail::kCheckpointLayoutNames.parse(s); }

}  // namespace volt
