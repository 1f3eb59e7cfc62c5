// EngineArgs: everything that configures an LLMEngine, with vLLM's names and defaults.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"
#include "sched/scheduling_policy.h"

namespace quiver {

// Who drives the engine; some defaults differ (engine_defaults.h), as vLLM's do between its
// LLM class and its OpenAI-compatible server.
enum class EngineUsage { kOffline, kServer };

struct EngineArgs {
  std::string model;                 // HF model folder
  // vLLM's --tokenizer: a folder whose tokenizer.json (and tokenizer_config.json: special
  // tokens, chat template) serve instead of the model folder's; empty = the model folder.
  std::string tokenizer;
  std::string load_format = "auto";  // "auto" (safetensors) or "dummy" (random weights from config.json)
  std::string dtype = "auto";        // weight dtype for dummy weights: auto, float32, float16, bfloat16
  std::string device = "cpu";        // cpu, ref, cuda
  int threads = 0;                   // cpu backend threads (0 = all cores), shared by the ranks
  // vLLM's --tensor-parallel-size: the model split over this many ranks (Megatron sharding,
  // parallel/tensor_shard.h), one per GPU (cuda device r) or, on cpu/ref, threads of this
  // process that check the slicing against the whole model.
  int tensor_parallel_size = 1;
  uint64_t seed = 0;                 // engine seed for requests without their own
  // KV cache element type: "auto" (cuda: the model's dtype when it is 16-bit, else float32;
  // cpu/ref: float32), "float32", "bfloat16", "float16", or "fp8" / "fp8_e4m3" (8-bit, with
  // the checkpoint's per-layer k_scale / v_scale, else 1). docs/numerics.md: what it costs.
  std::string kv_cache_dtype = "auto";
  // cuda matmuls through cuBLAS (prefill): "default" rounds activations to the weight's 16-bit
  // type; "highest" splits them into two 16-bit halves (twice the GEMM math, ~f32 accuracy).
  std::string matmul_precision = "default";
  // vLLM's --quantization: "" (none: the checkpoint's float weights) or "int8" (projection
  // weights quantized at load to int8 per output channel, model/int8_weights.h; cpu and ref).
  std::string quantization;

  bool enable_lora = false;
  int max_loras = 1;
  int max_lora_rank = 16;
  int max_cpu_loras = 0;             // 0 = max_loras
  // Vocabulary rows per LoRA slot (io/adapter_vocab.h): ids an adapter may add past the
  // base vocabulary (vLLM's lora_extra_vocab_size, its default), and rows it may set in
  // each of embed_tokens and lm_head, new tokens' rows included (a full modules_to_save
  // replacement needs its whole vocabulary).
  int lora_extra_vocab_size = 256;
  int max_lora_vocab_rows = 256;
  std::string lora_dtype = "float32";  // LoRA slot stacks: float32 (exact PEFT) | bfloat16 (half the reads) | auto
  std::vector<std::pair<std::string, std::string>> lora_modules;  // name -> path, registered at start

  int max_num_seqs = 256;
  int max_num_batched_tokens = 0;    // 0 = by device and usage (engine_defaults.h)
  int max_model_len = 0;             // 0 = the model's max_position_embeddings
  int block_size = 16;
  int num_kv_blocks = 0;             // 0 = from kv_cache_memory
  std::string kv_cache_memory;       // e.g. "4GiB"; empty = the memory plan's (engine/memory_plan.h)
  // The share of the GPU's memory the engine may hold, KV cache included (vLLM's meaning).
  double gpu_memory_utilization = 0.9;
  // vLLM's --max-logprobs: the most logprobs (and prompt_logprobs) a request may ask for;
  // at most 20, the samplers' top-k (sampling_math.h kMaxLogprobs), vLLM's default.
  int max_logprobs = 20;
  bool enable_prefix_caching = true;
  // vLLM's --scheduling-policy: "fcfs" or "priority" (requests' priority field, lower first).
  std::string scheduling_policy = "fcfs";
  bool enforce_eager = false;
  bool trace = false;                // one log line per step on stderr
  // Called as checkpoint weights load: (layers loaded, layers in all); empty = silent.
  std::function<void(int64_t, int64_t)> on_load_progress;
  EngineUsage usage = EngineUsage::kOffline;
};

enum class LoadFormat { kSafetensors, kDummy };
enum class MatmulPrecision { kDefault, kHighest };

// EngineArgs' named choices, each parsed once (validate); nullopt dtypes are "auto".
struct ParsedEngineArgs {
  LoadFormat load_format = LoadFormat::kSafetensors;
  std::optional<DType> dtype;           // dummy weights
  std::optional<DType> kv_cache_dtype;
  std::optional<DType> lora_dtype;      // only with enable_lora
  MatmulPrecision matmul_precision = MatmulPrecision::kDefault;
  WeightQuantization quantization = WeightQuantization::kNone;
  int64_t kv_cache_memory = 0;          // bytes; 0: not given
  SchedulingPolicy scheduling_policy = SchedulingPolicy::kFcfs;
};

// Every check the arguments allow on their own, names and ranges and how flags relate,
// before any file is read or anything allocated; the error names the flag. The bounds that
// depend on the model and the machine's memory are check_engine_limits' (engine_limits.h).
Result<ParsedEngineArgs> validate(const EngineArgs& args);

}  // namespace quiver
