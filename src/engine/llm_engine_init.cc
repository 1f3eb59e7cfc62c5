// LLMEngine construction: EngineArgs checked and turned into the backend, model weights,
// LoRA slots, the model runner (profiled at its largest steps on the GPU), the KV cache the
// memory plan sizes from what those left (memory_plan.h), adapter registry, scheduler and
// decode graphs. The request loop (add_request / step / abort) is llm_engine.cc.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <thread>

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
#include "parallel/communicators.h"
#include "parallel/tensor_shard.h"
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
  const int world = args.tensor_parallel_size;
  QV_RETURN_IF_ERROR(check_tensor_parallel(config_, world));
  // Rank r runs on GPU r, or on the host with its share of the threads.
  std::string err;
  ranks_.resize(static_cast<size_t>(world));
  const int host_threads = args.threads > 0 ? args.threads : static_cast<int>(std::thread::hardware_concurrency());
  for (int r = 0; r < world; ++r) {
    BackendOptions bo;
    bo.kind = args.device;
    bo.num_threads = world == 1 ? args.threads : std::max(1, host_threads / world);
    bo.cuda_device = r;
    bo.highest_matmul_precision = parsed.matmul_precision == MatmulPrecision::kHighest;
    ranks_[static_cast<size_t>(r)].backend = make_backend(bo, &err);
    if (!ranks_[static_cast<size_t>(r)].backend)
      return Status::error(world == 1 ? err : "tensor-parallel rank " + std::to_string(r) + ": " + err);
  }
  backend_ = ranks_[0].backend.get();
  if (world > 1) {
    std::vector<Backend*> devices;
    for (const EngineRank& rank : ranks_) devices.push_back(rank.backend.get());
    auto comms = make_communicators(devices, &err);
    if (comms.empty()) return Status::error(err);
    for (int r = 0; r < world; ++r) ranks_[static_cast<size_t>(r)].comm = std::move(comms[static_cast<size_t>(r)]);
  }
  rank_threads_ = std::make_unique<RankThreads>(world);
  // Each rank's thread works on its own device from here on (rank 0's is the caller's).
  QV_RETURN_IF_ERROR(on_ranks([&](int r) {
    ranks_[static_cast<size_t>(r)].backend->bind_thread();
    return Status::ok();
  }));
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
  const ModelConfig rank_config = shard_model_config(config_, {0, world});
  KvCacheShape shape;  // one rank's: its KV heads
  shape.num_layers = config_.num_layers;
  shape.num_kv_heads = rank_config.num_kv_heads;
  shape.head_dim = config_.head_dim;
  shape.block_size = args.block_size;
  shape.dtype = parsed.kv_cache_dtype.value_or(auto_kv);
  if (!backend_->supports_kv_dtype(shape.dtype, config_.head_dim))
    return Status::error("the " + backend_->name() + " backend cannot keep a " + std::string(dtype_name(shape.dtype)) +
                         " KV cache for head_dim " + std::to_string(config_.head_dim) +
                         (shape.dtype == DType::kF8E4M3 ? " (fp8 needs a multiple of 16 there)" : ""));
  const bool gpu = backend_->device() == Device::kCuda;
  // Host ranks share one RAM: a block costs every rank's share of it.
  const int64_t block_bytes = shape.bytes_per_block() * (gpu ? 1 : world);
  EngineLimitsInput bounds;
  bounds.memory_bytes = gpu ? backend_->device_memory_bytes() : host_memory_bytes();
  bounds.kv_bytes_per_block = block_bytes;
  bounds.max_model_len = max_model_len_;
  QV_RETURN_IF_ERROR(check_engine_limits(args_, config_, bounds));

  // Tokenizer: optional (token-id prompts work without one), unless --tokenizer names one.
  const std::string& tokenizer_dir = args.tokenizer.empty() ? args.model : args.tokenizer;
  const bool has_tokenizer = std::filesystem::exists(std::filesystem::path(tokenizer_dir) / "tokenizer.json");
  if (!args.tokenizer.empty() && !has_tokenizer)
    return Status::error("--tokenizer: no tokenizer.json in '" + tokenizer_dir + "'");
  if (has_tokenizer) {
    auto tok = Tokenizer::load(tokenizer_dir);
    if (!tok.is_ok()) return tok.status().with_context(args.tokenizer.empty() ? "tokenizer" : "--tokenizer");
    tokenizer_ = std::move(tok).value();
    // Ids the model emits but the tokenizer lacks would vanish from the text, and ids the
    // tokenizer emits past the embedding would be refused per request: either way the
    // tokenizer belongs to another model. Models pad their vocabulary by a few percent at most.
    const int64_t tok_vocab = tokenizer_->vocab_size(), model_vocab = config_.vocab_size;
    if (tok_vocab > model_vocab || tok_vocab * 10 < model_vocab * 9)
      return Status::error("tokenizer.json has " + std::to_string(tok_vocab) + " token ids but config.json's vocab_size is " +
                           std::to_string(model_vocab) + " (tokenizer made for another model?)");
  }

  // The memory report: on the GPU each share is what it took off rank 0's device's free
  // memory (every rank holds as much); host backends count their buffers, every rank's.
  int64_t free_mark = backend_->device_memory_free();
  const auto took = [&] {
    const int64_t now = backend_->device_memory_free();
    const int64_t d = free_mark - now;
    free_mark = now;
    return std::max<int64_t>(d, 0);
  };

  std::shared_ptr<Checkpoint> checkpoint;
  if (parsed.load_format != LoadFormat::kDummy) {
    QV_ASSIGN_OR_RETURN(Checkpoint ckpt, Checkpoint::open(args.model));
    checkpoint = std::make_shared<Checkpoint>(std::move(ckpt));
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
  QV_RETURN_IF_ERROR(init_ranks(args, parsed, checkpoint, weight_dtype, lora_dtype, limits));
  model_ = ranks_[0].model.get();
  slots_ = ranks_[0].slots.get();
  runner_ = ranks_[0].runner.get();
  // What the projection weights are, where they are not the checkpoint's floats.
  const char* fp8_held = gpu ? "projection weights held as e4m3, scaled per row"
                             : "projection weights held as their e4m3 values in bf16, scaled per row";
  if (parsed.quantization == WeightQuantization::kInt8)
    std::fprintf(stderr, "quiver: projection weights quantized at load to int8, one scale per output channel (from %s)\n",
                 std::string(dtype_name(model_->weights().quantized_from)).c_str());
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
                 std::string(dtype_name(model_->weights().quantized_from)).c_str(), fp8_held);
  if (world > 1)
    std::fprintf(stderr, "quiver: tensor parallel over %d ranks (%s): %lld of %lld query heads, %lld of %lld KV heads, "
                 "%lld of %lld MLP features and %lld of %lld vocabulary rows a rank\n", world,
                 gpu ? "NCCL, one GPU each" : "threads of this process", static_cast<long long>(rank_config.num_heads),
                 static_cast<long long>(config_.num_heads), static_cast<long long>(rank_config.num_kv_heads),
                 static_cast<long long>(config_.num_kv_heads), static_cast<long long>(rank_config.intermediate_size),
                 static_cast<long long>(config_.intermediate_size),
                 static_cast<long long>(model_->weights().lm_head.dim(0)), static_cast<long long>(config_.vocab_size));
  if (gpu) {
    // What loading took: the slot stacks and the runner's buffers are counted from their
    // sizes, the rest is the weights'. The activations: the runner's buffers and what every
    // scratch buffer grew to at its largest step (the one-block cache that step runs on is
    // gone before the real one is allocated).
    memory_.lora_slots = slots_ ? static_cast<int64_t>(slots_->bytes()) : 0;
    const int64_t buffers = static_cast<int64_t>(runner_->buffer_bytes());
    memory_.weights = std::max<int64_t>(took() - memory_.lora_slots - buffers, 0);
    QV_RETURN_IF_ERROR(on_ranks([&](int r) {
      EngineRank& rank = ranks_[static_cast<size_t>(r)];
      auto profile_kv = std::make_unique<KvCache>(rank.backend.get(), shape, 1);
      rank.runner->set_kv_cache(profile_kv.get());
      rank.runner->profile_largest_steps();
      return Status::ok();
    }));
    memory_.activations = buffers + took();
  } else {
    for (const EngineRank& rank : ranks_) {
      memory_.weights += static_cast<int64_t>(rank.model->weights().weight_bytes());
      memory_.lora_slots += rank.slots ? static_cast<int64_t>(rank.slots->bytes()) : 0;
      memory_.activations += static_cast<int64_t>(rank.runner->buffer_bytes());
    }
  }

  KvPlanInput kp;
  kp.device = gpu;
  kp.total = gpu ? backend_->device_memory_bytes() : host_memory_bytes();
  // Where MemAvailable is unknown (no /proc/meminfo), physical RAM stands in for it. Every
  // GPU rank allocates the same blocks: the one with the least free memory decides, each
  // asked on its own thread (a device reports its free memory where it is current).
  if (gpu) {
    std::vector<int64_t> free(ranks_.size());
    QV_RETURN_IF_ERROR(on_ranks([&](int r) {
      free[static_cast<size_t>(r)] = ranks_[static_cast<size_t>(r)].backend->device_memory_free();
      return Status::ok();
    }));
    kp.free = *std::min_element(free.begin(), free.end());
  } else {
    kp.free = host_memory_available();
    if (kp.free <= 0) kp.free = kp.total;
  }
  kp.gpu_memory_utilization = args.gpu_memory_utilization;
  const bool graphs = !args.enforce_eager && backend_->supports_graphs();
  kp.reserve = graphs ? runner_->graph_memory_estimate() : 0;
  kp.mapped_weights = !gpu && parsed.load_format != LoadFormat::kDummy ? memory_.weights : 0;
  kp.kv_cache_memory = parsed.kv_cache_memory;
  kp.num_kv_blocks = args.num_kv_blocks;
  kp.bytes_per_block = block_bytes;
  kp.block_size = args.block_size;
  kp.max_model_len = max_model_len_;
  kp.max_num_seqs = args.max_num_seqs;
  QV_ASSIGN_OR_RETURN(const KvPlan kv_plan, plan_kv_cache(kp));
  QV_RETURN_IF_ERROR(on_ranks([&](int r) {
    EngineRank& rank = ranks_[static_cast<size_t>(r)];
    rank.kv = std::make_unique<KvCache>(rank.backend.get(), shape, kv_plan.num_blocks);
    if (shape.dtype == DType::kF8E4M3 && checkpoint) QV_RETURN_IF_ERROR(load_kv_scales(*checkpoint, rank.kv.get()));
    rank.runner->set_kv_cache(rank.kv.get());
    return Status::ok();
  }));
  kv_ = ranks_[0].kv.get();
  blocks_ = std::make_unique<BlockPool>(kv_plan.num_blocks, args.block_size, args.enable_prefix_caching);
  if (gpu) took();  // the cache itself: reported from its shape
  memory_.kv_cache = int64_t{kv_plan.num_blocks} * block_bytes;
  memory_.kv_tokens = int64_t{kv_plan.num_blocks} * args.block_size;
  memory_.max_model_len = max_model_len_;
  memory_.kv_source = kv_plan.source;
  // Readers of last_step() (metrics, start-up report) see the pool's size before any step.
  last_step_.kv_blocks_total = kv_plan.num_blocks;

  std::vector<LoraSlotPool*> pools;
  if (args.enable_lora) {
    for (const auto& [name, path] : args.lora_modules) {
      auto added = add_lora(name, path);
      if (!added.is_ok()) return added.status().with_context("adapter '" + name + "'");
    }
    for (EngineRank& rank : ranks_) pools.push_back(rank.slots.get());
  }
  slot_provider_ = std::make_unique<EngineLoraSlots>(adapters_.get(), pools, config_, rank_threads_.get());

  SchedulerConfig sc;
  sc.max_num_seqs = args.max_num_seqs;
  sc.max_num_batched_tokens = args_.max_num_batched_tokens;
  sc.max_loras = args.enable_lora ? args.max_loras : 0;
  sc.max_model_len = max_model_len_;
  sc.enable_prefix_caching = args.enable_prefix_caching;
  sc.policy = parsed.scheduling_policy;
  scheduler_ = std::make_unique<Scheduler>(sc, blocks_.get(), slot_provider_.get());

  if (graphs) {
    std::vector<GraphCaptureInfo> info(ranks_.size());
    QV_RETURN_IF_ERROR(on_ranks([&](int r) {
      info[static_cast<size_t>(r)] = ranks_[static_cast<size_t>(r)].runner->capture_graphs();
      return Status::ok();
    }));
    graph_info_ = info[0];
    memory_.graphs = took();
    std::fprintf(stderr, "quiver: captured %d decode graphs (%d batch-size buckets up to %d, LoRA %s) in %.2f s%s\n",
                 graph_info_.num_graphs, graph_info_.num_buckets, graph_info_.max_bucket,
                 slots_ ? "on and off" : "off", graph_info_.seconds, world > 1 ? " on every rank" : "");
  }
  std::fprintf(stderr, "quiver: %s%s\n", describe(memory_).c_str(), gpu && world > 1 ? " (a GPU's; every rank the same)" : "");
  return Status::ok();
}

Status LLMEngine::on_ranks(const std::function<Status(int)>& fn) {
  std::vector<Status> status(ranks_.size(), Status::ok());
  rank_threads_->run([&](int r) { status[static_cast<size_t>(r)] = fn(r); });
  for (size_t r = 0; r < status.size(); ++r)
    if (!status[r].is_ok())
      return ranks_.size() == 1 ? status[r] : status[r].with_context("tensor-parallel rank " + std::to_string(r));
  return Status::ok();
}

Status LLMEngine::init_ranks(const EngineArgs& args, const ParsedEngineArgs& parsed,
                             const std::shared_ptr<Checkpoint>& checkpoint, DType weight_dtype, DType lora_dtype,
                             const RunnerLimits& limits) {
  const int world = static_cast<int>(ranks_.size());
  const VocabLimits vocab{args.lora_extra_vocab_size, args.max_lora_vocab_rows};
  if (args.enable_lora) {
    const int cpu_loras = args.max_cpu_loras > 0 ? args.max_cpu_loras : args.max_loras;
    adapters_ = std::make_unique<AdapterRegistry>(config_, args.max_lora_rank, cpu_loras, vocab, lora_dtype, tokenizer_,
                                                  base_vocab_rows(checkpoint, config_));
  }
  return on_ranks([&](int r) -> Status {
    EngineRank& rank = ranks_[static_cast<size_t>(r)];
    Backend* backend = rank.backend.get();
    const ShardSpec shard{r, world};
    LlamaWeights weights;
    if (!checkpoint) {
      weights = dummy_llama_weights(config_, weight_dtype, backend, args.seed + 1, parsed.quantization, shard);
    } else {
      // Every rank reads the same file; one progress line is enough.
      const auto& progress = r == 0 ? args.on_load_progress : std::function<void(int64_t, int64_t)>();
      QV_ASSIGN_OR_RETURN(weights, load_llama_weights(config_, checkpoint, backend, parsed.quantization, progress, shard));
    }
    const ModelConfig rank_config = shard_model_config(config_, shard);
    rank.model = std::make_unique<LlamaModel>(rank_config, std::move(weights), backend, max_model_len_, rank.comm.get());
    if (args.enable_lora)
      rank.slots = std::make_unique<LoraSlotPool>(backend, rank_config, args.max_loras, args.max_lora_rank, lora_dtype,
                                                  vocab);
    rank.runner = std::make_unique<ModelRunner>(rank.model.get(), rank.slots.get(), limits);
    return Status::ok();
  });
}

}  // namespace quiver
