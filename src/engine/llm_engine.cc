// LLMEngine's request loop: add_request / step / abort, sampling results into request
// outputs, adapters at run time. Construction from EngineArgs is llm_engine_init.cc.
#include "engine/llm_engine.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "core/splitmix.h"
#include "engine/device_sampling.h"
#include "engine/engine_lora_slots.h"
#include "engine/model_runner.h"
#include "engine/token_constraints.h"
#include "engine/request_state.h"
#include "kv/block_pool.h"
#include "kv/kv_cache.h"
#include "model/llama.h"
#include "sched/scheduler.h"
#include "structured/grammar_cache.h"
#include "tokenizer/tokenizer.h"

namespace quiver {

namespace {

Status check_prompt_ids(const std::vector<int32_t>& ids, int64_t vocab) {
  for (size_t i = 0; i < ids.size(); ++i)
    if (ids[i] < 0 || ids[i] >= vocab)
      return Status::error("prompt token id " + std::to_string(ids[i]) + " at position " + std::to_string(i) +
                           " is outside the vocabulary [0, " + std::to_string(vocab) + ")");
  return Status::ok();
}

}  // namespace

LLMEngine::~LLMEngine() = default;

Result<std::unique_ptr<LLMEngine>> LLMEngine::create(const EngineArgs& args) {
  std::unique_ptr<LLMEngine> engine(new LLMEngine());
  QV_RETURN_IF_ERROR(engine->init(args));
  return engine;
}

Result<AdapterRegistry::Loaded> LLMEngine::find_adapter(const LoRARequest& lora) const {
  if (!adapters_) return Status::error("request asks for adapter '" + lora.name + "' but LoRA is not enabled (--enable-lora)");
  auto found = adapters_->find(lora.name);
  if (found.is_ok()) return AdapterRegistry::Loaded{std::move(found).value(), nullptr};
  if (lora.path.empty()) return found.status();
  return adapters_->load(lora.name, lora.path);
}

Result<std::shared_ptr<const Tokenizer>> LLMEngine::tokenizer_for(const std::optional<LoRARequest>& lora) {
  if (!lora.has_value() || lora->name.empty()) return tokenizer_;
  QV_ASSIGN_OR_RETURN(AdapterRegistry::Loaded a, find_adapter(*lora));
  if (a.weights == nullptr) return a.info.tokenizer;
  const std::shared_ptr<const LoraAdapter> read = a.weights;
  QV_ASSIGN_OR_RETURN(AdapterInfo registered, adapters_->register_loaded(std::move(a)));
  report_adapter(*read);
  return registered.tokenizer;
}

Status LLMEngine::add_request(const std::string& id, const PromptInput& prompt, const SamplingParams& params,
                              const std::optional<LoRARequest>& lora, int priority) {
  return add_request_bound(id, prompt, params, lora, priority, nullptr);
}

Status LLMEngine::add_request_bound(const std::string& id, const PromptInput& prompt, const SamplingParams& params,
                                    const std::optional<LoRARequest>& lora, int priority, const AdapterBinding* bound) {
  if (requests_.count(id)) return Status::error("request id '" + id + "' is already in use");
  if (priority != 0 && args_.scheduling_policy != "priority")
    return Status::error("priority " + std::to_string(priority) +
                         " given, but priority scheduling is not enabled (--scheduling-policy priority)");
  if (prompt.cache_salt.has_value() && prompt.cache_salt->empty())
    return Status::error("cache_salt must be a non-empty string when given");
  // Ids past the base vocabulary can only be an adapter's (checked against it below).
  const bool adapter_request = lora.has_value() && !lora->name.empty();
  const int64_t most_vocab = adapter_request ? runner_->logits_width() : config_.vocab_size;
  QV_RETURN_IF_ERROR(params.validate(most_vocab));
  for (const auto& [name, asked] : {std::pair<const char*, int>{"logprobs", params.logprobs},
                                    {"prompt_logprobs", params.prompt_logprobs}})
    if (asked > args_.max_logprobs)
      return Status::error(std::string(name) + " " + std::to_string(asked) + " exceeds the engine's max_logprobs (" +
                           std::to_string(args_.max_logprobs) + ")");
  auto req = std::make_unique<Request>();
  req->id = id;
  req->params = params;
  req->arrival = std::chrono::steady_clock::now();
  req->vocab_size = config_.vocab_size;
  req->tokenizer = tokenizer_;

  // The adapter before the prompt: its tokenizer reads the text, its vocabulary bounds the
  // ids. One named by a path it is not registered under is read now and registered only
  // once the request passes every check: a refused request leaves nothing behind.
  std::optional<AdapterInfo> adapter;
  AdapterRegistry::Loaded unregistered;
  if (bound != nullptr) {
    adapter = bound->info;
  } else if (adapter_request) {
    QV_ASSIGN_OR_RETURN(unregistered, find_adapter(*lora));
    adapter = unregistered.info;
  }
  if (adapter) {
    // Only its files say which ids it adds.
    if (adapter->vocab_size < most_vocab)
      QV_RETURN_IF_ERROR(params.validate(adapter->vocab_size).with_context("adapter '" + lora->name + "'"));
    req->vocab_size = adapter->vocab_size;
    req->tokenizer = adapter->tokenizer;
  }
  const Tokenizer* tokenizer = req->tokenizer.get();
  if (params.structured_outputs.active()) {
    auto g = grammar_for(params.structured_outputs, req->tokenizer);
    if (!g.is_ok()) return g.status();
    req->grammar = std::move(g).value();
  }
  QV_ASSIGN_OR_RETURN(req->constraints, make_token_constraints(params, tokenizer, runner_->logits_width()));

  std::vector<int32_t> ids = prompt.token_ids;
  if (prompt.text.has_value()) {
    if (!tokenizer)
      return Status::error(std::string("text prompt, but the model folder has no tokenizer.json") +
                           (adapter ? ", nor does adapter '" + lora->name + "'" : "") + " (send prompt_token_ids)");
    auto enc = tokenizer->encode(*prompt.text, true);
    if (!enc.is_ok()) return enc.status().with_context("prompt");
    ids = std::move(enc).value();
    req->prompt_text = *prompt.text;
  }
  if (ids.empty()) return Status::error("the prompt is empty");
  params.truncate_prompt(ids, max_model_len_);
  QV_RETURN_IF_ERROR(check_prompt_ids(ids, most_vocab));
  if (adapter && adapter->vocab_size < most_vocab)
    QV_RETURN_IF_ERROR(check_prompt_ids(ids, adapter->vocab_size).with_context("adapter '" + lora->name + "'"));
  if (static_cast<int64_t>(ids.size()) + params.max_tokens > max_model_len_)
    return Status::error("prompt (" + std::to_string(ids.size()) + " tokens) + max_tokens (" +
                         std::to_string(params.max_tokens) + ") exceeds the maximum context length " +
                         std::to_string(max_model_len_));

  if (!params.stop.empty() && !tokenizer) return Status::error("stop strings need a tokenizer; use stop_token_ids");

  // The adapter last: registering it, loading its weights into the host cache and pinning
  // them (below) are the side effects, and no check follows them.
  if (adapter) {
    if (unregistered.weights != nullptr) {
      const std::shared_ptr<const LoraAdapter> read = unregistered.weights;
      QV_ASSIGN_OR_RETURN(adapter, adapters_->register_loaded(std::move(unregistered)));
      report_adapter(*read);
    }
    auto weights = bound != nullptr ? Result<std::shared_ptr<const LoraAdapter>>(bound->weights)
                                    : adapters_->get(adapter->uid);
    if (!weights.is_ok()) return weights.status();
    req->lora_name = lora->name;
    req->lora_uid = adapter->uid;
    req->adapter = weights.value();
  }

  for (int i = 0; i < params.n; ++i) {
    auto st = std::make_unique<SeqState>();
    st->req = req.get();
    st->index = i;
    st->seq.seq_id = next_seq_id_++;
    st->seq.tokens = ids;
    st->seq.num_prompt_tokens = static_cast<int>(ids.size());
    st->seq.max_tokens = params.max_tokens;
    st->seq.lora_uid = req->lora_uid;
    st->seq.needs_prompt_logits = params.prompt_logprobs >= 0 && i == 0;
    st->seq.priority = priority;
    if (prompt.cache_salt.has_value()) st->seq.cache_salt = BlockPool::salt_root(*prompt.cache_salt);
    const uint64_t seed = params.seed.has_value() ? *params.seed + static_cast<uint64_t>(i) : splitmix64(rng_state_);
    st->rng.seed(seed);
    st->seed = seed;
    st->out.index = i;
    if (tokenizer)
      st->detok = std::make_unique<IncrementalDetokenizer>(tokenizer, ids, params.skip_special_tokens,
                                                           params.spaces_between_special_tokens);
    st->stops = std::make_unique<StopChecker>(params.stop, params.include_stop_str_in_output);
    req->seqs.push_back(std::move(st));
  }
  for (auto& st : req->seqs) {
    Status s = scheduler_->add(&st->seq);
    if (!s.is_ok()) {
      for (auto& other : req->seqs) scheduler_->finish(&other->seq);
      return s;
    }
  }
  if (req->adapter) slot_provider_->hold(req->lora_uid, req->adapter);
  for (auto& st : req->seqs) states_[&st->seq] = st.get();
  requests_[id] = std::move(req);
  return Status::ok();
}

bool LLMEngine::abort_request(const std::string& id) {
  if (auto beam = beams_.find(id); beam != beams_.end()) {
    beam->second->aborted = true;
    for (const auto& [part, owner] : beam_parts_)
      if (owner.first == beam->second.get()) abort_request(part);
    return true;
  }
  auto it = requests_.find(id);
  if (it == requests_.end()) return false;
  for (int i = 0; i < static_cast<int>(it->second->seqs.size()); ++i)
    if (!it->second->seqs[i]->out.finished()) finish_seq(*it->second, i, "abort", std::nullopt);
  aborted_.push_back(id);
  return true;
}

bool LLMEngine::reset_prefix_cache() { return blocks_->reset_prefix_cache(); }

bool LLMEngine::has_unfinished_requests() const { return !requests_.empty() || !beams_.empty(); }

int LLMEngine::num_unfinished_requests() const {
  return static_cast<int>(requests_.size() - beam_parts_.size() + beams_.size());
}

size_t LLMEngine::weight_bytes() const {
  size_t n = 0;
  for (const EngineRank& r : ranks_) n += r.model->weights().weight_bytes();
  return n;
}
size_t LLMEngine::embedding_bytes() const {
  size_t n = 0;
  for (const EngineRank& r : ranks_) n += r.model->weights().embed.bytes();
  return n;
}
DType LLMEngine::kv_cache_dtype() const { return kv_->shape().dtype; }

Result<AdapterInfo> LLMEngine::add_lora(const std::string& name, const std::string& path,
                                        const std::vector<std::string>& allowlist) {
  if (!adapters_) return Status::error("LoRA is not enabled (--enable-lora)");
  auto info = adapters_->add(name, path, allowlist);
  if (!info.is_ok()) return info;
  if (auto w = adapters_->get(info->uid); w.is_ok()) report_adapter(*w.value());
  return info;
}

void LLMEngine::report_adapter(const LoraAdapter& a) const {
  // What the adapter takes of a slot, whole vocabulary replacements included, at its load.
  std::fprintf(stderr, "quiver: %s\n", describe_adapter(a, slots_->vocab_limits(), config_, slots_->dtype()).c_str());
}

Status LLMEngine::remove_lora(const std::string& name) {
  if (!adapters_) return Status::error("LoRA is not enabled (--enable-lora)");
  return adapters_->remove(name);
}

std::vector<AdapterInfo> LLMEngine::list_loras() const {
  return adapters_ ? adapters_->list() : std::vector<AdapterInfo>{};
}

AdapterCacheStats LLMEngine::lora_cache_stats() const {
  if (!adapters_) return {};
  return {adapters_->num_cached(), adapters_->loads()};
}

void LLMEngine::finish_seq(Request& req, int i, const std::string& reason, std::optional<std::string> stop_reason,
                           bool by_stop_string) {
  SeqState& st = *req.seqs[i];
  if (st.out.finished()) return;
  scheduler_->finish(&st.seq);
  if (!by_stop_string) {
    // Release text held back as a possible stop-string prefix, and any incomplete tail.
    std::string tail;
    if (st.detok) {
      auto f = st.detok->flush();
      if (f.is_ok()) tail = f.value();
    }
    auto pushed = st.stops->push(tail);
    st.out.text += pushed.emit + st.stops->flush();
  }
  st.out.finish_reason = reason;
  st.out.stop_reason = stop_reason;
  req.touched = true;
}

std::string LLMEngine::non_finite_logits_error(const Request& req, const std::string& seen) {
  return "the model produced a non-finite logit (" + seen + ")" +
         (req.lora_name.empty() ? "" : " with adapter '" + req.lora_name + "'") + "; the weights are broken or overflow";
}

void LLMEngine::fail_request(Request& req, const std::string& error) {
  if (!req.error.empty()) return;
  req.error = error;
  // Finished after the commit, like any other end: the token sampled from the bad row
  // keeps the scheduler's bookkeeping whole, and make_output reports only the error.
  for (int i = 0; i < static_cast<int>(req.seqs.size()); ++i)
    pending_finish_.push_back({&req, i, "error", std::nullopt, false});
  req.touched = true;
}

void LLMEngine::process_sample(Request& req, int i, int32_t token, std::optional<TokenLogprobs> logprobs) {
  SeqState& st = *req.seqs[i];
  const SamplingParams& p = req.params;
  if (logprobs.has_value()) st.out.logprobs.push_back(std::move(*logprobs));
  if (req.grammar) st.grammar_state = req.grammar->advance(st.grammar_state, token);
  st.seq.tokens.push_back(token);
  st.out.token_ids.push_back(token);
  if (req.first_token_s < 0) req.first_token_s = seconds_since(req.arrival);
  ++counters_.generation_tokens;
  req.touched = true;

  const int generated = st.seq.num_generated();
  const bool is_eos = std::find(config_.eos_token_ids.begin(), config_.eos_token_ids.end(), token) != config_.eos_token_ids.end();
  const bool is_stop_id = std::find(p.stop_token_ids.begin(), p.stop_token_ids.end(), token) != p.stop_token_ids.end();
  const bool stop_token = generated >= p.min_tokens && ((is_eos && !p.ignore_eos) || is_stop_id);

  // Text and stop strings. As in vLLM, a stop token's own text is not part of the output
  // unless include_stop_str_in_output asks for it.
  std::optional<std::string> stop_str;
  if (st.detok && (!stop_token || p.include_stop_str_in_output)) {
    auto piece = st.detok->push(token);
    if (piece.is_ok()) {
      auto r = st.stops->push(piece.value());
      st.out.text += r.emit;
      stop_str = r.stopped;
    }
  }
  // Finishing waits until after the scheduler's commit (see step()), so the blocks this
  // step completed are published to the prefix cache first. stop_reason: the stop string,
  // the stop_token_ids entry, or none for the model's EOS (vLLM's convention).
  if (stop_str.has_value() && generated >= p.min_tokens) {
    pending_finish_.push_back({&req, i, "stop", stop_str, true});
  } else if (stop_token) {
    pending_finish_.push_back({&req, i, "stop", is_stop_id ? std::optional<std::string>(std::to_string(token)) : std::nullopt,
                               false});
  } else if (generated >= p.max_tokens || st.seq.num_tokens() >= max_model_len_) {
    pending_finish_.push_back({&req, i, "length", std::nullopt, false});
  }
}

std::vector<RequestOutput> LLMEngine::step() {
  const auto t0 = std::chrono::steady_clock::now();
  ScheduledBatch sb = scheduler_->schedule();
  StepStats stats;
  stats.schedule_ms = 1e3 * seconds_since(t0);
  if (!sb.empty()) {
    execute_batch(sb, &stats);
    for (const ScheduledSeq& ss : sb.seqs) process_scheduled(ss, &stats);
    // Finishing waits until after the commit, so the blocks this step completed are
    // published to the prefix cache first.
    scheduler_->commit(sb);
    for (auto& f : pending_finish_) finish_seq(*f.req, f.seq_index, f.reason, f.stop_reason, f.by_stop_string);
    pending_finish_.clear();
  }
  std::vector<RequestOutput> outputs = collect_outputs();
  route_beam_outputs(&outputs);
  record_step(sb, std::move(stats), t0);
  return outputs;
}

void LLMEngine::execute_batch(const ScheduledBatch& sb, StepStats* stats) {
  DeviceSampling* ds = device_sampling_.get();
  if (ds) plan_device_sampling(sb, ds);
  const auto t_model = std::chrono::steady_clock::now();
  // Every rank runs the step (their collectives meet inside it); rank 0's logits are sampled.
  StepPath path;
  rank_threads_->run([&](int r) {
    if (r == 0) path = runner_->execute(sb.batch, &logits_, ds);
    else ranks_[static_cast<size_t>(r)].runner->execute(sb.batch, nullptr, nullptr);
  });
  stats->model_ms = 1e3 * seconds_since(t_model);
  stats->path = path.path;
  stats->lora_active = path.lora_active;
  if (args_.trace) stats->plan = path.plan.describe();
}

void LLMEngine::process_scheduled(const ScheduledSeq& ss, StepStats* stats) {
  SeqState& st = *states_.at(ss.seq);
  Request& req = *st.req;
  const Sequence& seq = st.seq;
  // Rows are logits_width() apart; a request reads the columns of its own vocabulary.
  const size_t width = static_cast<size_t>(runner_->logits_width());
  const int64_t vocab = req.vocab_size;
  if (!req.lora_name.empty() &&
      std::find(stats->adapters.begin(), stats->adapters.end(), req.lora_name) == stats->adapters.end())
    stats->adapters.push_back(req.lora_name);
  if (seq.in_prefill()) {
    stats->num_prefill_tokens += ss.num_tokens;
    counters_.prompt_tokens += ss.num_tokens;
  } else {
    stats->num_decode_tokens += ss.num_tokens;
  }
  // Prompt logprobs: row j predicts the token after position num_computed + j.
  if (seq.needs_prompt_logits && seq.in_prefill()) {
    const int k = req.params.prompt_logprobs;
    req.prompt_logprobs.resize(seq.num_prompt_tokens);
    for (int j = 0; j < ss.num_logit_rows; ++j) {
      const int next = seq.num_computed_tokens + j + 1;
      if (next >= seq.num_prompt_tokens) break;
      const size_t row = static_cast<size_t>(ss.first_logit_row + j);
      req.prompt_logprobs[next] =
          logprobs_for(std::span<const float>(logits_.data() + row * width, static_cast<size_t>(vocab)), seq.tokens[next], k);
    }
    req.touched = true;
  }
  if (!ss.samples) return;
  const int row = ss.first_logit_row + ss.num_logit_rows - 1;
  const int k = req.params.logprobs;
  const DeviceSampling* ds = device_sampling_.get();
  int32_t token;
  std::optional<TokenLogprobs> lp;
  if (ds && ds->has(row)) {
    if (ds->was_dropped(row)) return;  // finished by its grammar
    token = ds->token[static_cast<size_t>(row)];
    // The device reports the chosen token's log_softmax, which a NaN or Inf anywhere in the
    // row turns non-finite: the same failure as on the host path below.
    const float logprob = ds->logprob[static_cast<size_t>(row)];
    if (!std::isfinite(logprob) || token < 0 || token >= vocab) {
      fail_request(req, non_finite_logits_error(req, "logprob " + std::to_string(logprob)));
      token = 0;  // bookkeeping only; the request reports just the error
    } else if (k >= 0) {
      lp = ds->logprobs(row, k);
    }
  } else {
    const std::span<const float> logits(logits_.data() + static_cast<size_t>(row) * width, static_cast<size_t>(vocab));
    // NaN/Inf logits (broken weights or adapter, an overflow) would be sampled as token 0
    // with null logprobs for ever: end this request with the reason instead.
    const auto bad = std::find_if(logits.begin(), logits.end(), [](float v) { return !std::isfinite(v); });
    if (bad != logits.end())
      fail_request(req, non_finite_logits_error(req, std::to_string(*bad) + " for token " +
                                                          std::to_string(bad - logits.begin())));
    const std::optional<int32_t> sampled = sample_host(req, st.index, logits);
    if (!sampled.has_value()) return;  // finished by its grammar
    token = *sampled;
    if (k >= 0 && req.error.empty()) lp = logprobs_for(logits, token, k);
  }
  // Sampling appends to seq.tokens, which the scheduler's commit relies on.
  process_sample(req, st.index, token, std::move(lp));
}

std::vector<RequestOutput> LLMEngine::collect_outputs() {
  for (const auto& id : aborted_) {
    auto it = requests_.find(id);
    if (it != requests_.end()) it->second->touched = true;
  }
  aborted_.clear();
  std::vector<RequestOutput> outputs;
  for (auto it = requests_.begin(); it != requests_.end();) {
    Request& req = *it->second;
    if (!req.touched) {
      ++it;
      continue;
    }
    req.touched = false;
    outputs.push_back(make_output(req));
    if (!outputs.back().finished) {
      ++it;
      continue;
    }
    if (!beam_parts_.count(req.id)) ++counters_.requests_finished;  // a beam search counts once, at its end
    for (const auto& st : req.seqs) states_.erase(&st->seq);
    it = requests_.erase(it);
  }
  return outputs;
}

void LLMEngine::record_step(const ScheduledBatch& sb, StepStats stats, std::chrono::steady_clock::time_point t0) {
  stats.step = ++counters_.steps;
  stats.num_preempted = static_cast<int>(sb.preempted.size());
  counters_.preemptions += stats.num_preempted;
  counters_.prefix_cache_hit_blocks = blocks_->hits();
  stats.num_seqs = static_cast<int>(sb.seqs.size());
  std::sort(stats.adapters.begin(), stats.adapters.end());
  stats.kv_blocks_total = blocks_->num_blocks();
  stats.kv_blocks_used = blocks_->num_used();
  stats.num_running = scheduler_->num_running();
  stats.num_waiting = scheduler_->num_waiting();
  backend_->synchronize();
  stats.ms = 1e3 * seconds_since(t0);
  counters_.step_seconds += stats.ms / 1e3;
  if (args_.trace && !sb.empty()) std::fprintf(stderr, "%s\n", stats.trace_line().c_str());
  last_step_ = std::move(stats);
}

void LLMEngine::plan_device_sampling(const ScheduledBatch& sb, DeviceSampling* ds) {
  ds->reset(static_cast<int>(sb.batch.logit_rows.size()));
  masked_rows_.assign(sb.batch.logit_rows.size(), {nullptr, 0});
  ds->write_mask = [this](int row, uint32_t* words) { return write_device_mask(row, words); };
  for (const ScheduledSeq& ss : sb.seqs) {
    if (!ss.samples) continue;
    const SeqState& st = *states_.at(ss.seq);
    Request* req = st.req;
    const int i = st.index;
    const SamplingParams& p = req->params;
    // Decided from the request's own state only, never from its batch-mates.
    if (!device_can_sample(p, st.seq.num_generated() < p.min_tokens)) continue;
    const sampling::RowParams row{p.temperature, p.top_k, p.top_p, p.min_p, st.seed,
                                  static_cast<uint32_t>(st.seq.num_generated())};
    const int r = ss.first_logit_row + ss.num_logit_rows - 1;
    ds->set_row(r, row, p.logprobs, req->masked());
    if (req->masked()) masked_rows_[static_cast<size_t>(r)] = {req, i};
  }
}

RequestOutput LLMEngine::make_output(Request& req) {
  RequestOutput out;
  out.request_id = req.id;
  out.prompt = req.prompt_text;
  out.prompt_token_ids.assign(req.seqs[0]->seq.tokens.begin(),
                              req.seqs[0]->seq.tokens.begin() + req.seqs[0]->seq.num_prompt_tokens);
  if (req.params.prompt_logprobs >= 0) {
    out.prompt_logprobs = req.prompt_logprobs;
    out.prompt_logprobs.resize(out.prompt_token_ids.size());
  }
  out.lora_name = req.lora_name;
  out.finished = true;
  for (auto& st : req.seqs) {
    CompletionOutput c = st->out;
    c.num_new_tokens = c.token_ids.size() - st->reported_tokens;
    c.delta_text = c.text.substr(std::min(st->reported_text, c.text.size()));
    st->reported_tokens = c.token_ids.size();
    st->reported_text = c.text.size();
    out.finished &= c.finished();
    out.outputs.push_back(std::move(c));
  }
  out.first_token_s = req.first_token_s;
  out.num_cached_tokens = std::max(0, req.seqs[0]->seq.first_cached_tokens);
  if (out.finished) out.finished_s = seconds_since(req.arrival);
  if (!req.error.empty()) {
    out.error = req.error;
    out.outputs.clear();  // what the failed step sampled is not an answer
  }
  return out;
}

}  // namespace quiver
