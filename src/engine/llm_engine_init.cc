// LLMEngine construction: EngineArgs checked and turned into the backend, model weights,
// LoRA slots, the model runner (profiled at its largest steps on the GPU), the KV cache the
// memory plan sizes from what those left (memory_plan.h), adapter registry, scheduler and
// decode graphs. The request loop (add_request / step / abort) is llm_engine.cc.
#include <algorithm>
#include <cmath>
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

namespace {

// An fp8 checkpoint's per-layer KV scales, by vLLM's names (model.layers.N.self_attn.k_scale
// and .v_scale, scalars); a layer without them keeps 1.
// The checkpoint's embed_tokens and lm_head, against which the whole matrices adapters save
// are compared (only rows that differ take slot rows, io/adapter_vocab.h); null for dummy
// weights, whose adapters then keep every row.
std::shared_ptr<const BaseVocab> base_vocab_rows(const std::shared_ptr<Checkpoint>& ckpt, const ModelConfig& c) {
  if (!ckpt) return nullptr;
  auto v = std::make_shared<BaseVocab>();
  auto embed = ckpt->get("model.embed_tokens.weight", {c.vocab_size, c.hidden_size});
  if (!embed.is_ok()) return nullptr;
  v->embed = v->lm_head = embed.value();
  if (!c.tie_word_embeddings) {
    auto head = ckpt->get("lm_head.weight", {c.vocab_size, c.hidden_size});
    if (!head.is_ok()) return nullptr;
    v->lm_head = head.value();
  }
  v->keep = ckpt;
  return v;
}

Status load_kv_scales(const Checkpoint& ckpt, KvCache* kv) {
  for (int l = 0; l < static_cast<int>(kv->shape().num_layers); ++l) {
    const std::string base = "model.layers." + std::to_string(l) + ".self_attn.";
    float scale[2] = {1.f, 1.f};
    for (int i = 0; i < 2; ++i) {
      const std::string name = base + (i == 0 ? "k_scale" : "v_scale");
      if (!ckpt.has(name)) continue;
      auto t = ckpt.get(name, {});
      if (!t.is_ok()) t = ckpt.get(name, {1});
      if (!t.is_ok()) return t.status().with_context("the fp8 KV cache's scale");
      scale[i] = load_as_f32(t->data, t->dtype, 0);
      if (!(scale[i] > 0) || !std::isfinite(scale[i]))
        return Status::error(name + " is " + std::to_string(scale[i]) + "; a KV scale must be positive and finite");
    }
    kv->set_scales(l, scale[0], scale[1]);
  }
  return Status::ok();
}

}  // namespace

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
  if (!backend_->supports_kv_dtype(shape.dtype, config_.head_dim))
    return Status::error("the " + backend_->name() + " backend cannot keep a " + std::string(dtype_name(shape.dtype)) +
                         " KV cache for head_dim " + std::to_string(config_.head_dim) +
                         (shape.dtype == DType::kF8E4M3 ? " (fp8 needs a multiple of 16 there)" : ""));
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

  // The memory report: on the GPU each share is what it took off the device's free
  // memory; host backends count their buffers.
  const bool gpu = backend_->device() == Device::kCuda;
  int64_t free_mark = backend_->device_memory_free();
  const auto took = [&] {
    const int64_t now = backend_->device_memory_free();
    const int64_t d = free_mark - now;
    free_mark = now;
    return std::max<int64_t>(d, 0);
  };

  LlamaWeights weights;
  std::shared_ptr<Checkpoint> checkpoint;
  if (parsed.load_format == LoadFormat::kDummy) {
    weights = dummy_llama_weights(config_, weight_dtype, backend_.get(), args.seed + 1, parsed.quantization);
  } else {
    QV_ASSIGN_OR_RETURN(Checkpoint ckpt, Checkpoint::open(args.model));
    checkpoint = std::make_shared<Checkpoint>(std::move(ckpt));
    QV_ASSIGN_OR_RETURN(weights, load_llama_weights(config_, checkpoint, backend_.get(), parsed.quantization,
                                                    args.on_load_progress));
  }
  // What the projection weights are, where they are not the checkpoint's floats.
  const char* fp8_held = gpu ? "projection weights held as e4m3, scaled per row"
                             : "projection weights held as their e4m3 values in bf16, scaled per row";
  if (parsed.quantization == WeightQuantization::kInt8)
    std::fprintf(stderr, "quiver: projection weights quantized at load to int8, one scale per output channel (from %s)\n",
                 std::string(dtype_name(weights.quantized_from)).c_str());
  if (config_.fp8.scale != Fp8Config::Scale::kNone)
    std::fprintf(stderr, "quiver: FP8 checkpoint (quant_method %s, scales per %s): %s\n", config_.fp8.method.c_str(),
                 config_.fp8.scale == Fp8Config::Scale::kTensor    ? "tensor"
                 : config_.fp8.scale == Fp8Config::Scale::kChannel ? "output channel"
                                                                   : "block",
                 config_.fp8.scale != Fp8Config::Scale::kBlock ? fp8_held
                 : gpu ? "projection weights dequantized to bf16 at load"
                       : "projection weights dequantized to float32 at load");
  else if (parsed.quantization == WeightQuantization::kFp8)
    std::fprintf(stderr, "quiver: projection weights quantized at load to fp8 e4m3, one scale per output channel (from %s): %s\n",
                 std::string(dtype_name(weights.quantized_from)).c_str(), fp8_held);
  model_ = std::make_unique<LlamaModel>(config_, std::move(weights), backend_.get(), max_model_len_);
  memory_.weights = gpu ? took() : static_cast<int64_t>(model_->weights().weight_bytes());

  if (args.enable_lora) {
    const int cpu_loras = args.max_cpu_loras > 0 ? args.max_cpu_loras : args.max_loras;
    const VocabLimits vocab{args.lora_extra_vocab_size, args.max_lora_vocab_rows};
    adapters_ = std::make_unique<AdapterRegistry>(config_, args.max_lora_rank, cpu_loras, vocab, lora_dtype, tokenizer_,
                                                  base_vocab_rows(checkpoint, config_));
    slots_ = std::make_unique<LoraSlotPool>(backend_.get(), config_, args.max_loras, args.max_lora_rank, lora_dtype,
                                            vocab);
    memory_.lora_slots = gpu ? took() : static_cast<int64_t>(slots_->bytes());
  }

  const int blocks_per_seq = (max_model_len_ + args.block_size - 1) / args.block_size;
  RunnerLimits limits;
  limits.max_num_batched_tokens = args_.max_num_batched_tokens;
  limits.max_num_seqs = args.max_num_seqs;
  limits.max_blocks_per_seq = blocks_per_seq;
  limits.max_model_len = max_model_len_;
  // On the GPU, tokens are sampled where the logits are (device_sampling.h): a decode step
  // then downloads a few bytes per row instead of the [rows, vocab] logits.
  limits.sample_on_device = gpu;
  if (limits.sample_on_device) device_sampling_ = std::make_unique<DeviceSampling>();
  runner_ = std::make_unique<ModelRunner>(model_.get(), slots_.get(), limits);
  if (gpu) {
    // Grow every scratch buffer to its largest step before measuring what is free; the
    // one-block cache it runs on is gone before the real one is allocated.
    auto profile_kv = std::make_unique<KvCache>(backend_.get(), shape, 1);
    runner_->set_kv_cache(profile_kv.get());
    runner_->profile_largest_steps();
    profile_kv.reset();
    memory_.activations = took();
  } else {
    memory_.activations = static_cast<int64_t>(runner_->buffer_bytes());
  }

  KvPlanInput kp;
  kp.device = gpu;
  kp.total = gpu ? backend_->device_memory_bytes() : host_memory_bytes();
  // Where MemAvailable is unknown (no /proc/meminfo), physical RAM stands in for it.
  kp.free = gpu ? backend_->device_memory_free() : host_memory_available();
  if (!gpu && kp.free <= 0) kp.free = kp.total;
  kp.gpu_memory_utilization = args.gpu_memory_utilization;
  const bool graphs = !args.enforce_eager && backend_->supports_graphs();
  kp.reserve = graphs ? runner_->graph_memory_estimate() : 0;
  kp.mapped_weights = !gpu && parsed.load_format != LoadFormat::kDummy ? memory_.weights : 0;
  kp.kv_cache_memory = parsed.kv_cache_memory;
  kp.num_kv_blocks = args.num_kv_blocks;
  kp.bytes_per_block = shape.bytes_per_block();
  kp.block_size = args.block_size;
  kp.max_model_len = max_model_len_;
  kp.max_num_seqs = args.max_num_seqs;
  QV_ASSIGN_OR_RETURN(const KvPlan kv_plan, plan_kv_cache(kp));
  kv_ = std::make_unique<KvCache>(backend_.get(), shape, kv_plan.num_blocks);
  if (shape.dtype == DType::kF8E4M3 && checkpoint) QV_RETURN_IF_ERROR(load_kv_scales(*checkpoint, kv_.get()));
  blocks_ = std::make_unique<BlockPool>(kv_plan.num_blocks, args.block_size, args.enable_prefix_caching);
  runner_->set_kv_cache(kv_.get());
  if (gpu) took();  // the cache itself: reported from its shape
  memory_.kv_cache = int64_t{kv_plan.num_blocks} * shape.bytes_per_block();
  memory_.kv_tokens = int64_t{kv_plan.num_blocks} * args.block_size;
  memory_.max_model_len = max_model_len_;
  memory_.kv_source = kv_plan.source;
  // Readers of last_step() (metrics, start-up report) see the pool's size before any step.
  last_step_.kv_blocks_total = kv_plan.num_blocks;

  if (args.enable_lora) {
    for (const auto& [name, path] : args.lora_modules) {
      auto added = add_lora(name, path);
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

  if (graphs) {
    graph_info_ = runner_->capture_graphs();
    memory_.graphs = took();
    std::fprintf(stderr, "quiver: captured %d decode graphs (%d batch-size buckets up to %d, LoRA %s) in %.2f s\n",
                 graph_info_.num_graphs, graph_info_.num_buckets, graph_info_.max_bucket,
                 slots_ ? "on and off" : "off", graph_info_.seconds);
  }
  std::fprintf(stderr, "quiver: %s\n", describe(memory_).c_str());
  return Status::ok();
}

}  // namespace quiver
