// Resource flag bounds; see engine_limits.h. The estimates are the sizes of the buffers
// the engine allocates for these flags (lora/slot_pool.cc, kv/kv_cache.cc, model/llama.cc),
// so the message names a number the user can compare with their machine.
#include "engine/engine_limits.h"

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "engine/memory_plan.h"
#include "io/peft_adapter.h"

namespace quiver {

namespace {

Status too_much(const std::string& what, double need, int64_t have) {
  return Status::error(what + " needs " + format_gib(need, 1) + ", more than the " + format_gib(static_cast<double>(have), 1) +
                       " of memory this machine has");
}

}  // namespace

int64_t host_memory_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? static_cast<int64_t>(pages) * page : 0;
}

int64_t host_memory_available() {
  std::ifstream in("/proc/meminfo");
  std::string line;
  long long kib = 0;
  while (std::getline(in, line))
    if (std::sscanf(line.c_str(), "MemAvailable: %lld kB", &kib) == 1) return static_cast<int64_t>(kib) * 1024;
  return 0;
}

Status check_engine_limits(const EngineArgs& a, const ModelConfig& c, const EngineLimitsInput& in) {
  const int64_t have = in.memory_bytes;
  if (have <= 0) return Status::ok();
  const double f32 = 4.0;
  if (a.enable_lora) {
    double per_rank = 0;  // elements of A and B per unit of rank, over every target and layer
    for (int t = 0; t < kNumLoraTargets; ++t)
      per_rank += double(lora_target_in(c, static_cast<LoraTarget>(t)) + lora_target_out(c, static_cast<LoraTarget>(t)));
    const double bytes = double(a.max_loras) * a.max_lora_rank * per_rank * double(c.num_layers) * f32;
    if (bytes > double(have))
      return too_much("--max-loras " + std::to_string(a.max_loras) + " at --max-lora-rank " +
                          std::to_string(a.max_lora_rank) + " (the LoRA slot stacks)",
                      bytes, have);
  }
  if (a.num_kv_blocks > 0 && in.kv_bytes_per_block > 0) {
    const double bytes = double(a.num_kv_blocks) * double(in.kv_bytes_per_block);
    if (bytes > double(have)) return too_much("--num-kv-blocks " + std::to_string(a.num_kv_blocks), bytes, have);
  }
  // cos/sin per position and head-dim element, in float32.
  const double rope = double(in.max_model_len) * double(c.head_dim) * f32;
  if (rope > double(have) / 4)
    return Status::error("a context of " + std::to_string(in.max_model_len) + " tokens needs " + format_gib(rope, 1) +
                         " of RoPE tables alone; pass a smaller --max-model-len");
  // Per-step activations (hidden, q/k/v, MLP) per batched token, and one logits row per
  // sequence: what model/llama.cc and the runner size from these flags.
  const double per_token =
      double(4 * c.hidden_size + c.q_size() + 2 * c.kv_size() + 3 * c.intermediate_size) * f32;
  const double step = double(a.max_num_batched_tokens) * per_token + double(a.max_num_seqs) * double(c.vocab_size) * f32;
  if (step > double(have))
    return too_much("--max-num-batched-tokens " + std::to_string(a.max_num_batched_tokens) + " with --max-num-seqs " +
                        std::to_string(a.max_num_seqs) + " (per-step buffers)",
                    step, have);
  return Status::ok();
}

}  // namespace quiver
