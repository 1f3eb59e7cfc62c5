#include "engine/step_stats.h"

#include <cstdio>

namespace quiver {

std::string StepStats::trace_line() const {
  std::string kind = num_prefill_tokens > 0 ? (num_decode_tokens > 0 ? "mixed" : "prefill") : "decode";
  std::string ads;
  for (const auto& a : adapters) ads += (ads.empty() ? "" : ",") + a;
  char buf[1024];
  std::snprintf(buf, sizeof(buf),
                "[step %lld] %s path=%s lora=%s seqs=%d prefill_tokens=%d decode_tokens=%d adapters=[%s] "
                "kv=%d/%d running=%d waiting=%d preempted=%d %.2f ms (schedule %.2f, model %.2f) plan[%s]",
                static_cast<long long>(step), kind.c_str(), path.c_str(), lora_active ? "on" : "off", num_seqs,
                num_prefill_tokens, num_decode_tokens, ads.c_str(), kv_blocks_used, kv_blocks_total, num_running,
                num_waiting, num_preempted, ms, schedule_ms, model_ms, plan.c_str());
  return buf;
}

}  // namespace quiver
