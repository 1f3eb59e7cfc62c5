// LLMEngine construction: EngineArgs checked and turned into the backend, model weights,
// KV cache, adapter registry and slots, scheduler, model runner and decode graphs. The
// request loop (add_request / step / abort) is llm_engine.cc.
#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "engine/device_sampling.h"
#include "engine/engine_defaults.h"
#include "engine/engine_limits.h"
#include "engine/engine_lora_slots.h"
#include "engine/llm_engine.h"
#include "engine/model_runner.h"
#include "io/safetensors.h"
#include "kv/block_pool.h"
#include "kv/kv_cache.h"
#include "model/llama.h"
#include "sched/scheduler.h"
#include "tokenizer/tokenizer.h"

namespace quiver {

Status LLMEngine::init(const EngineArgs& args) {
  QV_ASSIGN_OR_RETURN(const ParsedEngineArgs parsed, validate(args));
  args_ = args;
  rng_state_ = args.seed;
  QV_ASSIGN_OR_RETURN(config_, load_model_config(args.model));
  // "auto" (vLLM's lora_dtype default): the model's dtype where the stacks have it, so a
  // bf16 model keeps bf16 stacks; float32 for f32 and f16 models. args() reports the choice.
  const DType lora_dtype = parsed.lora_dtype.value_or(config_.dtype == DType::kBF16 ? DType::kBF16 : DType::kF32);
  if (args.enable_lora) args_.lora_dtype = lora_dtype == DType::kBF16 ? "bfloat16" : "float32";
  // max_position_embeddings is bounded by load_model_config, so it fits an int.
  max_model_len_ = args.max_model_len > 0 ? args.max_model_len : static_cast<int>(config_.max_position_embeddings);
  if (max_model_len_ > config_.max_position_embeddings)
    return Status::error("--max-model-len " + std::to_string(max_model_len_) + " exceeds the model's max_position_embeddings " +
                         std::to_string(config_.max_position_embeddings));

  // The linear weights' type: the checkpoint's, or --dtype for dummy weights.
  const DType weight_dtype =
      parsed.load_format == LoadFormat::kDummy ? parsed.dtype.value_or(config_.dtype) : config_.dtype;
  std::string err;
  BackendOptions bo;
  bo.kind = args.device;
  bo.num_threads = args.threads;
  bo.highest_matmul_precision = parsed.matmul_precision == MatmulPrecision::kHighest;
  backend_ = make_backend(bo, &err);
  if (!backend_) return Status::error(err);
  if (args_.max_num_batched_tokens == 0)
    args_.max_num_batched_tokens =
        default_max_num_batched_tokens(backend_->device_name(), backend_->device_memory_bytes(), args.usage);
  if (!backend_->supports_head_dim(config_.head_dim))
    return Status::error("the " + backend_->name() + " backend has no attention kernel for head_dim " +
                         std::to_string(config_.head_dim) +
                         " (CUDA supports 8, 16, 32, 64, 80, 96, 128, 256; use --device cpu)");
  // "auto": a 16-bit model keeps a 16-bit cache on the GPU (half the KV bytes per decode
  // step); host backends compute in f32 and keep f32. docs/numerics.md bounds the difference.
  const DType auto_kv = backend_->device() == Device::kCuda && config_.dtype != DType::kF32 ? config_.dtype : DType::kF32;
  KvCacheShape shape;
  shape.num_layers = config_.num_layers;
  shape.num_kv_heads = config_.num_kv_heads;
  shape.head_dim = config_.head_dim;
  shape.block_size = args.block_size;
  shape.dtype = parsed.kv_cache_dtype.value_or(auto_kv);
  EngineLimitsInput bounds;
  bounds.memory_bytes = backend_->device() == Device::kCuda ? backend_->device_memory_bytes() : host_memory_bytes();
  bounds.kv_bytes_per_block = shape.bytes_per_block();
  bounds.max_model_len = max_model_len_;
  QV_RETURN_IF_ERROR(check_engine_limits(args_, config_, bounds));

  // Tokenizer: optional (token-id prompts work without one).
  if (std::filesystem::exists(std::filesystem::path(args.model) / "tokenizer.json")) {
    auto tok = Tokenizer::load(args.model);
    if (!tok.is_ok()) return tok.status().with_context("tokenizer");
    tokenizer_ = std::move(tok).value();
    // Ids the model emits but the tokenizer lacks would vanish from the text, and ids the
    // tokenizer emits past the embedding would be refused per request: either way the
    // tokenizer belongs to another model. Models pad their vocabulary by a few percent at most.
    const int64_t tok_vocab = tokenizer_->vocab_size(), model_vocab = config_.vocab_size;
    if (tok_vocab > model_vocab || tok_vocab * 10 < model_vocab * 9)
      return Status::error("tokenizer.json has " + std::to_string(tok_vocab) + " token ids but config.json's vocab_size is " +
                           std::to_string(model_vocab) + " (tokenizer made for another model?)");
  }

  LlamaWeights weights;
  if (parsed.load_format == LoadFormat::kDummy) {
    weights = dummy_llama_weights(config_, weight_dtype, backend_.get(), args.seed + 1);
  } else {
    QV_ASSIGN_OR_RETURN(Checkpoint ckpt, Checkpoint::open(args.model));
    QV_ASSIGN_OR_RETURN(weights, load_llama_weights(config_, std::make_shared<Checkpoint>(std::move(ckpt)), backend_.get(),
                                                          args.on_load_progress));
  }
  model_ = std::make_unique<LlamaModel>(config_, std::move(weights), backend_.get(), max_model_len_);

  // KV cache: explicit block count, a memory budget, or enough for every sequence's
  // full context capped at 1 GiB of cache.
  const int blocks_per_seq = (max_model_len_ + args.block_size - 1) / args.block_size;
  int num_blocks = args.num_kv_blocks;
  if (num_blocks <= 0) {
    const int64_t budget =
        parsed.kv_cache_memory > 0
            ? parsed.kv_cache_memory
            : std::min<int64_t>(int64_t{1} << 30, shape.bytes_per_block() * blocks_per_seq * int64_t{args.max_num_seqs});
    num_blocks = static_cast<int>(std::min<int64_t>(budget / shape.bytes_per_block(), 1 << 24));
  }
  if (num_blocks < 1) return Status::error("the KV cache budget holds no block; raise --kv-cache-memory or --num-kv-blocks");
  kv_ = std::make_unique<KvCache>(backend_.get(), shape, num_blocks);
  blocks_ = std::make_unique<BlockPool>(num_blocks, args.block_size, args.enable_prefix_caching);
  // Readers of last_step() (metrics, start-up report) see the pool's size before any step.
  last_step_.kv_blocks_total = num_blocks;

  if (args.enable_lora) {
    const int cpu_loras = args.max_cpu_loras > 0 ? args.max_cpu_loras : args.max_loras;
    adapters_ = std::make_unique<AdapterRegistry>(config_, args.max_lora_rank, cpu_loras);
    slots_ = std::make_unique<LoraSlotPool>(backend_.get(), config_, args.max_loras, args.max_lora_rank, lora_dtype);
    for (const auto& [name, path] : args.lora_modules) {
      auto added = adapters_->add(name, path);
      if (!added.is_ok()) return added.status().with_context("adapter '" + name + "'");
    }
  }
  slot_provider_ = std::make_unique<EngineLoraSlots>(adapters_.get(), slots_.get());

  SchedulerConfig sc;
  sc.max_num_seqs = args.max_num_seqs;
  sc.max_num_batched_tokens = args_.max_num_batched_tokens;
  sc.max_loras = args.enable_lora ? args.max_loras : 0;
  sc.max_model_len = max_model_len_;
  sc.enable_prefix_caching = args.enable_prefix_caching;
  scheduler_ = std::make_unique<Scheduler>(sc, blocks_.get(), slot_provider_.get());

  RunnerLimits limits;
  limits.max_num_batched_tokens = args_.max_num_batched_tokens;
  limits.max_num_seqs = args.max_num_seqs;
  limits.max_blocks_per_seq = blocks_per_seq;
  bounds.max_model_len = max_model_len_;
  // On the GPU, tokens are sampled where the logits are (device_sampling.h): a decode step
  // then downloads a few bytes per row instead of the [rows, vocab] logits.
  limits.sample_on_device = backend_->device() == Device::kCuda;
  if (limits.sample_on_device) device_sampling_ = std::make_unique<DeviceSampling>();
  runner_ = std::make_unique<ModelRunner>(model_.get(), kv_.get(), slots_.get(), limits);
  if (!args.enforce_eager && backend_->supports_graphs()) {
    graph_info_ = runner_->capture_graphs();
    std::fprintf(stderr, "quiver: captured %d decode graphs (%d batch-size buckets up to %d, LoRA %s) in %.2f s\n",
                 graph_info_.num_graphs, graph_info_.num_buckets, graph_info_.max_bucket,
                 slots_ ? "on and off" : "off", graph_info_.seconds);
  }
  return Status::ok();
}

}  // namespace quiver
