#pragma once
// How the Trainer calls its callbacks: in registration order, each hook call a trainer-layer trace range
// "[Callback]<state_key>.<hook>" (runtime/trace.h), so profilers and Nsight timelines show callback time.
#include <memory>
#include <string>
#include <vector>

#include <volt/runtime/trace.h>
#include <volt/trainer/callback.h>

namespace volt {

enum class CallbackSet { all, monitoring, non_monitoring };

template <class Fn>
void for_each_callback(const std::vector<std::shared_ptr<Callback>>& callbacks, const char* hook, Fn&& fn,
                       CallbackSet which = CallbackSet::all) {
  for (const auto& c : callbacks) {
    if (which != CallbackSet::all && c->is_monitoring() != (which == CallbackSet::monitoring)) continue;
    trace::Range range(trace::Layer::trainer, [&] { return "[Callback]" + c->state_key() + "." + hook; });
    fn(*c);
  }
}

}  // namespace volt
