#include "engine/engine_args.h"

#include "backend/sampling_math.h"
#include "kv/kv_cache.h"

namespace quiver {

namespace {

// Upper bounds: --threads sizes a thread pool, and the per-step counts and blocks multiply
// into 64-bit byte counts that must not wrap.
constexpr int kMaxThreads = 1024;
constexpr int64_t kMaxCount = int64_t{1} << 24;
// One host's GPUs: NVLink systems hold 8 (16 on the largest); beyond one host is multi-node.
constexpr int kMaxTensorParallel = 16;

Result<std::optional<DType>> dtype_or_auto(const char* flag, const std::string& s) {
  if (s == "auto") return std::optional<DType>();
  if (auto t = float_dtype_named(s)) return std::optional<DType>(*t);
  return Status::error("unknown " + std::string(flag) + " '" + s + "' (supported: auto, float32, float16, bfloat16)");
}

}  // namespace

Result<ParsedEngineArgs> validate(const EngineArgs& a) {
  ParsedEngineArgs p;
  if (a.model.empty()) return Status::error("--model is required");
  if (a.device != "cpu" && a.device != "ref" && a.device != "cuda")
    return Status::error("unknown --device '" + a.device + "' (supported: cpu, ref, cuda)");
  if (a.load_format == "auto" || a.load_format == "safetensors") {
    p.load_format = LoadFormat::kSafetensors;
  } else if (a.load_format == "dummy") {
    p.load_format = LoadFormat::kDummy;
  } else {
    return Status::error("unknown --load-format '" + a.load_format + "' (supported: auto, safetensors, dummy)");
  }
  QV_ASSIGN_OR_RETURN(p.dtype, dtype_or_auto("--dtype", a.dtype));
  // vLLM's names: fp8 is e4m3 (its "fp8_e5m2" has no kernels here).
  if (a.kv_cache_dtype == "fp8" || a.kv_cache_dtype == "fp8_e4m3") {
    p.kv_cache_dtype = DType::kF8E4M3;
  } else if (auto t = dtype_or_auto("--kv-cache-dtype", a.kv_cache_dtype); t.is_ok()) {
    p.kv_cache_dtype = t.value();
  } else {
    return Status::error("unknown --kv-cache-dtype '" + a.kv_cache_dtype +
                         "' (supported: auto, float32, float16, bfloat16, fp8, fp8_e4m3)");
  }
  if (a.matmul_precision == "default") {
    p.matmul_precision = MatmulPrecision::kDefault;
  } else if (a.matmul_precision == "highest") {
    p.matmul_precision = MatmulPrecision::kHighest;
  } else {
    return Status::error("unknown --matmul-precision '" + a.matmul_precision + "' (supported: default, highest)");
  }
  if (a.quantization.empty() || a.quantization == "none") {
    p.quantization = WeightQuantization::kNone;
  } else if (a.quantization == "int8") {
    if (a.device == "cuda")
      return Status::error("--quantization int8 runs on the cpu and ref backends; the cuda backend has no int8 kernels");
    p.quantization = WeightQuantization::kInt8;
  } else if (a.quantization == "fp8") {
    p.quantization = WeightQuantization::kFp8;
  } else {
    return Status::error("unknown --quantization '" + a.quantization +
                         "' (supported: fp8 on every backend, int8 on the cpu and ref backends)");
  }
  if (a.scheduling_policy == "fcfs") {
    p.scheduling_policy = SchedulingPolicy::kFcfs;
  } else if (a.scheduling_policy == "priority") {
    p.scheduling_policy = SchedulingPolicy::kPriority;
  } else {
    return Status::error("unknown --scheduling-policy '" + a.scheduling_policy + "' (supported: fcfs, priority)");
  }
  if (!a.kv_cache_memory.empty()) {
    auto bytes = parse_byte_size(a.kv_cache_memory);
    if (!bytes.is_ok()) return bytes.status().with_context("--kv-cache-memory");
    p.kv_cache_memory = bytes.value();
    if (p.kv_cache_memory <= 0) return Status::error("--kv-cache-memory must be positive");
  }

  if (!(a.gpu_memory_utilization > 0 && a.gpu_memory_utilization <= 1))
    return Status::error("--gpu-memory-utilization must be in (0, 1], got " + std::to_string(a.gpu_memory_utilization));
  if (a.threads < 0 || a.threads > kMaxThreads)
    return Status::error("--threads must be in [0, " + std::to_string(kMaxThreads) + "] (0 = all cores), got " +
                         std::to_string(a.threads));
  if (a.tensor_parallel_size < 1 || a.tensor_parallel_size > kMaxTensorParallel)
    return Status::error("--tensor-parallel-size must be in [1, " + std::to_string(kMaxTensorParallel) + "], got " +
                         std::to_string(a.tensor_parallel_size));
  if (a.max_logprobs < 0 || a.max_logprobs > sampling::kMaxLogprobs)
    return Status::error("--max-logprobs must be in [0, " + std::to_string(sampling::kMaxLogprobs) + "] (quiver's " +
                         "samplers return at most " + std::to_string(sampling::kMaxLogprobs) + " a token), got " +
                         std::to_string(a.max_logprobs));
  if (a.max_num_seqs < 1) return Status::error("--max-num-seqs must be at least 1");
  if (a.max_num_batched_tokens < 0)
    return Status::error("--max-num-batched-tokens must be at least 1 (or 0: the device's default)");
  if (a.block_size < 1 || a.block_size > 1024) return Status::error("--block-size must be in [1, 1024]");
  if (a.num_kv_blocks < 0) return Status::error("--num-kv-blocks must be positive (or 0: from --kv-cache-memory)");
  if (a.max_model_len < 0) return Status::error("--max-model-len must be positive (or 0: the model's)");
  if (a.max_cpu_loras < 0) return Status::error("--max-cpu-loras must be positive (or 0: --max-loras)");
  for (auto [name, v] : {std::pair<const char*, int64_t>{"--max-num-seqs", a.max_num_seqs},
                         {"--max-num-batched-tokens", a.max_num_batched_tokens},
                         {"--num-kv-blocks", a.num_kv_blocks},
                         {"--max-loras", a.max_loras},
                         {"--max-cpu-loras", a.max_cpu_loras}})
    if (v > kMaxCount)
      return Status::error(std::string(name) + " " + std::to_string(v) + " is above the limit " + std::to_string(kMaxCount));

  if (!a.enable_lora) {
    if (!a.lora_modules.empty()) return Status::error("adapters given but LoRA is not enabled (--enable-lora)");
    return p;
  }
  if (a.max_loras < 1) return Status::error("--max-loras must be at least 1");
  // 512 is vLLM's largest max_lora_rank, and the most the CUDA LoRA kernels take.
  if (a.max_lora_rank < 1 || a.max_lora_rank > 512) return Status::error("--max-lora-rank must be in [1, 512]");
  if (a.max_cpu_loras != 0 && a.max_cpu_loras < a.max_loras)
    return Status::error("--max-cpu-loras must be >= --max-loras");
  // 65,536 new ids is what an adapter file may bring (io/adapter_vocab.cc); rows cover a
  // full replacement of the largest vocabularies served (Qwen2: 152,064).
  if (a.lora_extra_vocab_size < 0 || a.lora_extra_vocab_size > 65536)
    return Status::error("--lora-extra-vocab-size must be in [0, 65536]");
  if (a.max_lora_vocab_rows < 0 || a.max_lora_vocab_rows > (1 << 20))
    return Status::error("--max-lora-vocab-rows must be in [0, 1048576]");
  QV_ASSIGN_OR_RETURN(p.lora_dtype, dtype_or_auto("--lora-dtype", a.lora_dtype));
  if (p.lora_dtype == DType::kF16)
    return Status::error("unknown --lora-dtype 'float16' (supported: auto, float32, bfloat16)");
  return p;
}

}  // namespace quiver
