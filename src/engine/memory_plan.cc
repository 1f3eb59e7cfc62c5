#include "engine/memory_plan.h"

#include <algorithm>
#include <cstdio>

namespace quiver {

namespace {

// The block count's own bound (validate's kMaxCount): block ids are int32 and the tables
// multiply them into 64-bit offsets.
constexpr int64_t kMaxBlocks = int64_t{1} << 24;

std::string with_commas(int64_t v) {
  const std::string digits = std::to_string(v < 0 ? -v : v);
  std::string s = v < 0 ? "-" : "";
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) s += ',';
    s += digits[i];
  }
  return s;
}

std::string fraction(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", v);
  return buf;
}

}  // namespace

std::string format_gib(double bytes, int digits) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.*f GiB", digits, bytes / double(int64_t{1} << 30));
  return buf;
}

Result<KvPlan> plan_kv_cache(const KvPlanInput& in) {
  if (in.bytes_per_block <= 0 || in.block_size <= 0 || in.max_model_len <= 0 || in.max_num_seqs <= 0)
    return Status::error("plan_kv_cache: the cache shape and the limits must be positive");
  const int64_t blocks_per_seq = (int64_t{in.max_model_len} + in.block_size - 1) / in.block_size;
  const int64_t seq_bytes = blocks_per_seq * in.bytes_per_block;
  const std::string where = in.device ? "on the GPU" : "in RAM";
  // What the process can still allocate: the GPU's free memory less the graphs to come;
  // on the host MemAvailable, of which mapped weights are part.
  const int64_t allocatable = std::max<int64_t>(0, in.free - (in.device ? in.reserve : in.mapped_weights));

  KvPlan plan;
  int64_t blocks = 0;
  if (in.num_kv_blocks > 0) {
    blocks = in.num_kv_blocks;
    plan.source = "--num-kv-blocks " + std::to_string(in.num_kv_blocks);
  } else if (in.kv_cache_memory > 0) {
    blocks = in.kv_cache_memory / in.bytes_per_block;
    plan.source = "--kv-cache-memory " + format_gib(double(in.kv_cache_memory));
  } else {
    const int64_t need = blocks_per_seq * in.max_num_seqs * in.bytes_per_block;
    int64_t budget;
    if (in.device) {
      if (!(in.gpu_memory_utilization > 0 && in.gpu_memory_utilization <= 1))
        return Status::error("--gpu-memory-utilization must be in (0, 1]");
      const int64_t allowed = static_cast<int64_t>(in.gpu_memory_utilization * double(in.total));
      const int64_t in_use = in.total - in.free;
      budget = allowed - in_use - in.reserve;
      if (budget < seq_bytes)
        return Status::error(
            "--gpu-memory-utilization " + fraction(in.gpu_memory_utilization) + " allows " + format_gib(double(allowed)) +
            " of the GPU's " + format_gib(double(in.total)) + "; " + format_gib(double(in_use)) +
            " are in use after loading the weights and profiling the largest step (by every process on the GPU) and " +
            format_gib(double(in.reserve)) + " are kept for the decode graphs, which leaves " +
            format_gib(double(std::max<int64_t>(budget, 0))) + " for the KV cache, but one sequence of --max-model-len " +
            std::to_string(in.max_model_len) + " needs " + format_gib(double(seq_bytes)) +
            ": raise --gpu-memory-utilization or lower --max-model-len");
      plan.source = "--gpu-memory-utilization " + fraction(in.gpu_memory_utilization) + " of " +
                    format_gib(double(in.total));
    } else {
      budget = allocatable / 2;
      plan.source = "half of the " + format_gib(double(allocatable)) + " of RAM available";
    }
    if (need <= budget) plan.source += ", capped at --max-num-seqs " + std::to_string(in.max_num_seqs) + " full contexts";
    budget = std::min(budget, need);
    plan.budget = budget;
    blocks = budget / in.bytes_per_block;
  }
  if (blocks > kMaxBlocks) {
    blocks = kMaxBlocks;
    plan.source += ", capped at " + with_commas(kMaxBlocks) + " blocks";
  }
  const int64_t bytes = blocks * in.bytes_per_block;
  if (blocks < blocks_per_seq)
    return Status::error("the KV cache (" + plan.source + ") holds " + with_commas(blocks * in.block_size) + " tokens (" +
                         with_commas(blocks) + " blocks of " + std::to_string(in.block_size) + ", " +
                         format_gib(double(bytes)) + "), fewer than one sequence of --max-model-len " +
                         std::to_string(in.max_model_len) + " needs (" + with_commas(blocks_per_seq) + " blocks, " +
                         format_gib(double(seq_bytes)) + "): give the cache more memory or lower --max-model-len");
  // Explicit sizes are checked against what is free: the allocation would fail later with
  // a message about cudaMalloc, or the host would swap.
  if ((in.num_kv_blocks > 0 || in.kv_cache_memory > 0) && in.free > 0 && bytes > allocatable)
    return Status::error("the KV cache of " + plan.source + " takes " + format_gib(double(bytes)) + ", more than the " +
                         format_gib(double(allocatable)) + " free " + where +
                         " after loading the weights and profiling the largest step");
  plan.num_blocks = static_cast<int>(blocks);
  return plan;
}

std::string describe(const MemoryReport& r) {
  std::string s = "memory: weights " + format_gib(double(r.weights));
  if (r.lora_slots > 0) s += ", LoRA slots " + format_gib(double(r.lora_slots));
  s += ", activations " + format_gib(double(r.activations));
  if (r.graphs > 0) s += ", decode graphs " + format_gib(double(r.graphs));
  char conc[32];
  std::snprintf(conc, sizeof conc, "%.2fx", r.max_concurrency());
  // "KV cache: N tokens" in plain digits, as the server's start-up line (DESIGN.md's report).
  s += ", KV cache " + format_gib(double(r.kv_cache)) + " (" + r.kv_source + "); KV cache: " +
       std::to_string(r.kv_tokens) + " tokens, maximum concurrency " + conc + " at " + with_commas(r.max_model_len) +
       " tokens per request";
  return s;
}

}  // namespace quiver
