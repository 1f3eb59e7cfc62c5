// vLLM's --scheduling-policy. fcfs: waiting sequences in arrival order, preemption from the
// newest running one. priority: waiting sequences by (priority, arrival), lower values
// first, and preemption of the running sequence last in that order.
#pragma once

namespace quiver {

enum class SchedulingPolicy { kFcfs, kPriority };

}  // namespace quiver
