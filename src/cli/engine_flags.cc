#include "cli/engine_flags.h"

#include <nlohmann/json.hpp>

#include "cli/load_progress.h"

namespace quiver {

namespace {

// One adapter spec: NAME=DIR, or vLLM's JSON form {"name": ..., "path": ...,
// "base_model_name": ...}. base_model_name is informational in vLLM (the adapter's parent
// in /v1/models); quiver accepts it and lists the served model as the parent.
Status parse_lora_spec(const std::string& spec, std::vector<std::pair<std::string, std::string>>* out) {
  if (!spec.empty() && spec.front() == '{') {
    const nlohmann::json j = nlohmann::json::parse(spec, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object()) return Status::error("adapter '" + spec + "' is not a JSON object");
    for (const auto& [key, value] : j.items()) {
      if (key != "name" && key != "path" && key != "base_model_name")
        return Status::error("adapter '" + spec + "': unknown field '" + key + "' (expected name, path, base_model_name)");
      if (!value.is_string()) return Status::error("adapter '" + spec + "': field '" + key + "' must be a string");
    }
    if (!j.contains("name") || !j.contains("path") || j["name"].get<std::string>().empty() ||
        j["path"].get<std::string>().empty())
      return Status::error("adapter '" + spec + "' needs non-empty \"name\" and \"path\"");
    out->emplace_back(j["name"].get<std::string>(), j["path"].get<std::string>());
    return Status::ok();
  }
  const auto eq = spec.find('=');
  if (eq == std::string::npos || eq == 0 || eq + 1 == spec.size())
    return Status::error("adapter '" + spec + "' must be NAME=DIR or {\"name\": ..., \"path\": ...}");
  out->emplace_back(spec.substr(0, eq), spec.substr(eq + 1));
  return Status::ok();
}

}  // namespace

void add_engine_flags(CLI::App* cmd, EngineFlags* f, bool positional_model) {
  EngineArgs& a = f->args;
  cmd->add_option(positional_model ? "model,--model" : "--model", a.model,
                  "Hugging Face model folder (config.json, *.safetensors)")
      ->required();
  cmd->add_option("--tokenizer", a.tokenizer,
                  "folder whose tokenizer.json (and tokenizer_config.json) serve instead of the model's");
  cmd->add_flag("--trust-remote-code", f->trust_remote_code,
                "accepted for vLLM command lines; no effect: quiver runs no code from a model folder");
  cmd->add_option("--load-format", a.load_format, "auto | dummy (random weights from config.json)");
  cmd->add_option("--dtype", a.dtype, "dtype of dummy weights: auto | float32 | float16 | bfloat16");
  cmd->add_option("--device", a.device, "cpu | cuda | ref");
  cmd->add_option("--threads", a.threads, "CPU threads (0 = all cores)");
  cmd->add_option("--tensor-parallel-size", a.tensor_parallel_size,
                  "ranks the model is split over: GPUs 0..N-1 (cuda), or threads checking the split (cpu, ref)");
  cmd->add_option("--seed", a.seed, "engine seed for requests without their own");
  cmd->add_option("--kv-cache-dtype", a.kv_cache_dtype,
                  "KV cache dtype: auto (cuda: the model's 16-bit dtype; cpu: float32) | float32 | bfloat16 | float16 | fp8 (e4m3)");
  cmd->add_option("--matmul-precision", a.matmul_precision,
                  "matmul activations: default (rounded to the weights' 16 bits on cuda past 2 tokens, to bf16 for bf16 "
                  "weights on cpu) | highest (~float32; cuda: 2x GEMM math)");
  cmd->add_option("--quantization", a.quantization,
                  "projection weights quantized at load, one scale per output channel: fp8 (e4m3; every backend) | "
                  "int8 (cpu, ref); default: none");
  cmd->add_option("--lora,--lora-modules", f->loras,
                  "adapter NAME=DIR or {\"name\": NAME, \"path\": DIR} (repeatable; enables LoRA)");
  cmd->add_flag("--enable-lora", a.enable_lora, "enable LoRA adapters");
  cmd->add_option("--max-loras", a.max_loras, "adapters resident on the device at once");
  cmd->add_option("--max-lora-rank", a.max_lora_rank, "largest adapter rank accepted");
  cmd->add_option("--max-cpu-loras", a.max_cpu_loras, "adapters kept in host memory (LRU, >= max-loras)");
  cmd->add_option("--lora-extra-vocab-size", a.lora_extra_vocab_size,
                  "token ids an adapter may add past the base vocabulary (logits rows grow by this much)");
  cmd->add_option("--max-lora-vocab-rows", a.max_lora_vocab_rows,
                  "embed_tokens / lm_head rows an adapter may set per LoRA slot (new tokens' included; a modules_to_save "
                  "replacement needs its whole vocabulary)");
  cmd->add_option("--lora-dtype", a.lora_dtype, "dtype of the resident LoRA stacks: float32 | bfloat16 | auto (the model's: bfloat16 for bf16 models, else float32)");
  cmd->add_option("--max-num-seqs", a.max_num_seqs, "sequences per step");
  cmd->add_option("--max-num-batched-tokens", a.max_num_batched_tokens, "tokens per step (chunked prefill); 0 = by device: 2048 on the CPU, 16384 offline / 8192 serving on GPUs of 70 GiB or more");
  cmd->add_option("--max-model-len", a.max_model_len, "context length (default: the model's)");
  cmd->add_option("--block-size", a.block_size, "KV cache block size in tokens");
  cmd->add_option("--num-kv-blocks", a.num_kv_blocks, "KV cache blocks (overrides --kv-cache-memory)");
  cmd->add_option("--kv-cache-memory", a.kv_cache_memory,
                  "KV cache budget, e.g. 4GiB (default: the GPU's memory by --gpu-memory-utilization, on hosts half the available RAM)");
  cmd->add_option("--gpu-memory-utilization", a.gpu_memory_utilization,
                  "share of the GPU's memory the engine may hold, KV cache included (0, 1]");
  cmd->add_option("--max-logprobs", a.max_logprobs, "most logprobs a request may ask for (at most 20, the default)");
  cmd->add_flag("--enable-prefix-caching,!--no-enable-prefix-caching,!--no-prefix-caching", a.enable_prefix_caching,
                "automatic prefix caching (on by default)");
  cmd->add_flag("--enable-chunked-prefill,!--no-enable-chunked-prefill", f->chunked_prefill,
                "prompts split across steps by --max-num-batched-tokens (always on, as in vLLM's V1 engine)");
  cmd->add_option("--scheduling-policy", a.scheduling_policy,
                  "fcfs (arrival order) or priority (requests' priority, lower first; preemption from the last)");
  cmd->add_flag("--enforce-eager", a.enforce_eager, "never use CUDA graphs");
  cmd->add_flag("--trace", a.trace, "log one line per engine step on stderr");
}

Status finalize_engine_flags(EngineFlags* f) {
  if (!f->chunked_prefill)
    return Status::error("--no-enable-chunked-prefill: quiver always splits long prompts across steps "
                         "(--max-num-batched-tokens sets how many tokens a step takes)");
  for (const auto& spec : f->loras) QV_RETURN_IF_ERROR(parse_lora_spec(spec, &f->args.lora_modules));
  if (!f->args.lora_modules.empty()) f->args.enable_lora = true;
  if (!f->args.on_load_progress) f->args.on_load_progress = stderr_load_progress("loading weights");
  return Status::ok();
}

}  // namespace quiver
