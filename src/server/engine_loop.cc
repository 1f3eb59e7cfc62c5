// The engine thread and the queues that feed it. Only run() and the functions it calls
// touch engine_; everything shared with HTTP threads sits behind mu_.
#include "server/engine_loop.h"

#include <algorithm>
#include <iostream>
#include <utility>

#include "tokenizer/tokenizer.h"

namespace quiver {

namespace {

double seconds(std::chrono::steady_clock::duration d) { return std::chrono::duration<double>(d).count(); }

ApiError unavailable(std::string message) { return ApiError{503, std::move(message), ""}; }

std::string what_of(std::exception_ptr ep) {
  try {
    std::rethrow_exception(ep);
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "unknown exception";
  }
}

}  // namespace

EngineLoop::EngineLoop(std::unique_ptr<LLMEngine> engine, ServerMetrics* metrics, int max_pending_requests,
                       ServingLog* log, std::string model_name)
    : engine_(std::move(engine)),
      metrics_(metrics),
      max_pending_(max_pending_requests),
      log_(log),
      model_name_(std::move(model_name)) {
  tokenizer_ = engine_->shared_tokenizer();
  max_model_len_ = engine_->max_model_len();
  vocab_size_ = engine_->model_config().vocab_size;
  max_loras_ = engine_->args().enable_lora ? engine_->args().max_loras : 0;
  listed_ = engine_->list_loras();
  publish_metrics();  // KV totals and LoRA info are valid before the first request
}

EngineLoop::~EngineLoop() { stop(); }

void EngineLoop::start() { thread_ = std::thread([this] { run(); }); }

void EngineLoop::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

std::optional<ApiError> EngineLoop::submit(std::vector<EngineJob> jobs, std::shared_ptr<ResponseChannel> channel) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_ || draining_) return unavailable("the server is shutting down");
    if (failed_) return unavailable("the engine has failed; see the server log");
    const int n = static_cast<int>(jobs.size());
    if (num_pending_ + n > max_pending_)
      return unavailable("the server is overloaded: " + std::to_string(num_pending_) +
                         " requests in flight (--max-pending-requests " + std::to_string(max_pending_) + ")");
    num_pending_ += n;
    submissions_.push_back(Submission{std::move(jobs), std::move(channel)});
  }
  cv_.notify_all();
  return std::nullopt;
}

void EngineLoop::cancel(std::shared_ptr<ResponseChannel> channel) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    cancels_.push_back(std::move(channel));
  }
  cv_.notify_all();
}

void EngineLoop::abort_all() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    abort_all_ = true;
  }
  cv_.notify_all();
}

void EngineLoop::begin_drain() {
  std::lock_guard<std::mutex> lock(mu_);
  draining_ = true;
}

ApiResult<AdapterInfo> EngineLoop::load_lora(const std::string& name, const std::string& path,
                                             const std::vector<std::string>& allowlist) {
  auto op = std::make_unique<LoraOp>();
  op->load = true;
  op->name = name;
  op->path = path;
  op->allowlist = allowlist;
  auto done = op->done.get_future();
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_ || draining_) return unavailable("the server is shutting down");
    lora_ops_.push_back(std::move(op));
  }
  cv_.notify_all();
  return done.get();
}

std::optional<ApiError> EngineLoop::unload_lora(const std::string& name) {
  auto op = std::make_unique<LoraOp>();
  op->load = false;
  op->name = name;
  auto done = op->done.get_future();
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_ || draining_) return unavailable("the server is shutting down");
    lora_ops_.push_back(std::move(op));
  }
  cv_.notify_all();
  auto r = done.get();
  if (!r.is_ok()) return r.error();
  return std::nullopt;
}

std::vector<AdapterInfo> EngineLoop::adapters() const {
  std::lock_guard<std::mutex> lock(mu_);
  return listed_;
}

bool EngineLoop::has_adapter(const std::string& name) const { return find_adapter(name).has_value(); }

std::optional<AdapterInfo> EngineLoop::find_adapter(const std::string& name) const {
  std::lock_guard<std::mutex> lock(mu_);
  for (const AdapterInfo& a : listed_)
    if (a.name == name) return a;
  return std::nullopt;
}

int EngineLoop::num_in_flight() const {
  std::lock_guard<std::mutex> lock(mu_);
  return num_pending_;
}

void EngineLoop::run() {
  for (;;) {
    std::vector<Submission> subs;
    std::vector<std::shared_ptr<ResponseChannel>> cancels;
    std::vector<std::unique_ptr<LoraOp>> ops;
    bool abort_everything = false, stopping = false;
    {
      std::unique_lock<std::mutex> lock(mu_);
      const bool busy = !failed_ && engine_->has_unfinished_requests();
      if (!busy) {
        cv_.wait(lock, [&] {
          return stop_ || abort_all_ || !submissions_.empty() || !cancels_.empty() || !lora_ops_.empty();
        });
      }
      subs.swap(submissions_);
      cancels.swap(cancels_);
      ops.swap(lora_ops_);
      abort_everything = std::exchange(abort_all_, false) || stop_;
      stopping = stop_;
    }
    try {
      for (auto& s : subs) {
        if (stopping || failed_) {
          s.channel->reject(unavailable(stopping ? "the server is shutting down" : "the engine has failed"));
          std::lock_guard<std::mutex> lock(mu_);
          num_pending_ -= static_cast<int>(s.jobs.size());
        } else {
          admit_guarded(s);
        }
      }
      for (auto& op : ops) {
        if (stopping || failed_) op->done.set_value(unavailable("the server is shutting down"));
        else apply_lora_op_guarded(*op);
      }
      if (!failed_) {
        for (const auto& c : cancels)
          for (const auto& [id, a] : active_)
            if (a.channel == c) engine_->abort_request(id);
        if (abort_everything)
          for (const auto& [id, a] : active_) engine_->abort_request(id);
        if (engine_->has_unfinished_requests()) route(engine_->step());
        // Aborted requests are reported by the step after the abort: finish them now.
        for (int i = 0; stopping && i < 1000 && engine_->has_unfinished_requests(); ++i) route(engine_->step());
        publish_metrics();
      }
    } catch (const std::exception& e) {
      // A step that throws leaves the engine's state unknown: stop serving and say why
      // where an operator looks (the server then exits non-zero for a supervisor).
      std::cerr << "quiver serve: engine failure: " << e.what() << "\n";
      fail_all(ApiError{500, std::string("engine failure: ") + e.what() + " (see the server's stderr)", ""},
               /*engine_failed=*/true);
    }
    if (stopping) {
      fail_all(unavailable("the server is shutting down"), /*engine_failed=*/false);
      return;
    }
  }
}

void EngineLoop::admit_guarded(Submission& s) {
  // add_request validates before it changes anything, so an exception from it is one
  // request's failure: that client gets a 500, everyone else keeps being served.
  const size_t active_before = active_.size();
  try {
    admit(s);
  } catch (...) {
    const std::string what = what_of(std::current_exception());
    std::cerr << "quiver serve: request failed: " << what << "\n";
    for (const auto& [id, a] : active_)
      if (a.channel == s.channel) engine_->abort_request(id);
    s.channel->reject(ApiError{500, "internal error: " + what, ""});
    const size_t admitted = active_.size() - active_before;
    std::lock_guard<std::mutex> lock(mu_);
    num_pending_ -= static_cast<int>(s.jobs.size() - admitted);
  }
}

void EngineLoop::apply_lora_op_guarded(LoraOp& op) {
  try {
    apply_lora_op(op);
  } catch (...) {
    const std::string what = what_of(std::current_exception());
    std::cerr << "quiver serve: adapter operation on '" << op.name << "' failed: " << what << "\n";
    try {
      op.done.set_value(ApiError{500, "adapter operation failed: " + what, ""});
    } catch (const std::future_error&) {
      // already answered before the failure
    }
  }
}

void EngineLoop::admit(Submission& s) {
  std::vector<std::string> added;
  std::optional<ApiError> error;
  for (size_t job = 0; job < s.jobs.size() && !error; ++job) {
    EngineJob& j = s.jobs[job];
    std::optional<LoRARequest> lora;
    if (!j.lora.empty()) {
      const std::optional<AdapterInfo> listed = find_adapter(j.lora);
      if (!listed) {  // unloaded since the HTTP thread looked the name up
        error = ApiError::not_found("The model `" + j.lora + "` does not exist.", "model");
        break;
      }
      // Reloaded meanwhile: the prompt went through the previous registration's tokenizer.
      if (j.lora_uid != 0 && listed->uid != j.lora_uid) {
        error = ApiError::bad_request("The model `" + j.lora + "` was reloaded while the request was being prepared; "
                                      "send it again", "model");
        break;
      }
      lora = LoRARequest{j.lora, 0, ""};
    }
    const std::string id = "req-" + std::to_string(next_id_++);
    PromptInput prompt;
    prompt.token_ids = std::move(j.prompt_token_ids);
    prompt.cache_salt = j.cache_salt;
    Status st = j.beam.has_value() ? engine_->add_beam_search(id, prompt, *j.beam, lora, j.priority)
                                   : engine_->add_request(id, prompt, j.params, lora, j.priority);
    if (!st.is_ok()) {
      error = ApiError::bad_request(st.message());
      break;
    }
    // A request with several prompts logs each as <id>-<prompt index>.
    std::string log_id = s.jobs.size() > 1 ? j.log_id + "-" + std::to_string(job) : j.log_id;
    active_[id] = Active{s.channel, static_cast<int>(job), j.lora, std::move(log_id), false, {}};
    if (!j.lora.empty()) ++lora_refs_[j.lora];
    added.push_back(id);
  }
  if (error) {
    // All or nothing: jobs already added are aborted; their final outputs still arrive
    // through route() (and are ignored by the rejected channel).
    for (const auto& id : added) engine_->abort_request(id);
    s.channel->reject(*error);
    std::lock_guard<std::mutex> lock(mu_);
    num_pending_ -= static_cast<int>(s.jobs.size() - added.size());
    return;
  }
  for (size_t i = 0; i < added.size(); ++i) s.channel->admit();
}

void EngineLoop::apply_lora_op(LoraOp& op) {
  if (op.load) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (pending_unload_.count(op.name))
        return op.done.set_value(ApiError::bad_request(
            "The lora adapter '" + op.name + "' is still being unloaded (requests using it are running)", "lora_name"));
      for (const auto& a : listed_)
        if (a.name == op.name)
          return op.done.set_value(ApiError::bad_request("The lora adapter '" + op.name + "' has already been loaded.",
                                                         "lora_name"));
    }
    auto added = engine_->add_lora(op.name, op.path, op.allowlist);
    if (!added.is_ok())
      return op.done.set_value(ApiError::bad_request("cannot load adapter '" + op.name + "': " + added.message(),
                                                     "lora_path"));
    std::lock_guard<std::mutex> lock(mu_);
    listed_.push_back(added.value());
    return op.done.set_value(added.value());
  }
  AdapterInfo info;
  bool in_use = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = std::find_if(listed_.begin(), listed_.end(), [&](const AdapterInfo& a) { return a.name == op.name; });
    if (it == listed_.end())
      return op.done.set_value(ApiError::not_found("The lora adapter '" + op.name + "' cannot be found.", "lora_name"));
    info = *it;
    listed_.erase(it);
    in_use = lora_refs_.count(op.name) > 0;
    if (in_use) pending_unload_.insert(op.name);
  }
  if (!in_use) {
    Status s = engine_->remove_lora(op.name);
    if (!s.is_ok()) return op.done.set_value(ApiError{500, s.message(), ""});
  }
  op.done.set_value(info);
}

void EngineLoop::route(std::vector<RequestOutput> outputs) {
  const auto now = std::chrono::steady_clock::now();
  for (auto& out : outputs) {
    auto it = active_.find(out.request_id);
    if (it == active_.end()) continue;
    Active& a = it->second;
    size_t new_tokens = 0;
    for (const auto& c : out.outputs) new_tokens += c.num_new_tokens;
    if (new_tokens > 0) {
      if (!a.got_first_token) {
        metrics_->observe_ttft(out.first_token_s >= 0 ? out.first_token_s : 0.0);
        a.got_first_token = true;
      } else {
        metrics_->observe_inter_token(seconds(now - a.last_token));
      }
      a.last_token = now;
    }
    if (!out.error.empty() && !out.finished) {
      engine_->abort_request(out.request_id);  // the request is dead either way
      out.finished = true;
    }
    if (out.finished) {
      std::string reason = "abort";
      if (!out.error.empty()) reason = "error";
      else if (!out.outputs.empty() && !out.outputs[0].finish_reason.empty()) reason = out.outputs[0].finish_reason;
      metrics_->count_finished(reason);
      if (out.finished_s >= 0) metrics_->observe_e2e(out.finished_s);
      int64_t generated = 0;
      for (const auto& c : out.outputs) generated += static_cast<int64_t>(c.token_ids.size());
      metrics_->observe_request_tokens(static_cast<int64_t>(out.prompt_token_ids.size()), generated);
      if (log_ != nullptr && log_->logs_requests())
        log_->request_finished(RequestLogEntry{a.log_id, a.lora.empty() ? model_name_ : a.lora,
                                               static_cast<int64_t>(out.prompt_token_ids.size()), generated,
                                               out.first_token_s, out.finished_s, reason});
    }
    const bool finished = out.finished;
    const std::string id = out.request_id;
    a.channel->push(a.job, std::move(out));
    if (finished) release(id);
  }
}

void EngineLoop::release(const std::string& id) {
  auto it = active_.find(id);
  if (it == active_.end()) return;
  const std::string lora = it->second.lora;
  active_.erase(it);
  if (!lora.empty() && --lora_refs_[lora] == 0) {
    lora_refs_.erase(lora);
    bool pending = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      pending = pending_unload_.erase(lora) > 0;
    }
    if (pending && !failed_) (void)engine_->remove_lora(lora);  // last user gone: forget it now
  }
  std::lock_guard<std::mutex> lock(mu_);
  --num_pending_;
}

void EngineLoop::fail_all(const ApiError& error, bool engine_failed) {
  if (engine_failed) {
    failed_ = true;
    metrics_->set_engine_failed(true);
  }
  for (auto& [id, a] : active_) a.channel->reject(error);
  active_.clear();
  lora_refs_.clear();
  std::lock_guard<std::mutex> lock(mu_);
  pending_unload_.clear();
  const ApiError busy = unavailable(engine_failed ? "the engine has failed" : error.message);
  for (auto& s : submissions_) s.channel->reject(busy);
  submissions_.clear();
  for (auto& op : lora_ops_) op->done.set_value(busy);
  lora_ops_.clear();
  num_pending_ = 0;
}

void EngineLoop::publish_metrics() {
  const StepStats& s = engine_->last_step();
  const EngineCounters& c = engine_->counters();
  EngineGauges g;
  g.num_running = s.num_running;
  g.num_waiting = s.num_waiting;
  g.kv_blocks_used = s.kv_blocks_used;
  g.kv_blocks_total = s.kv_blocks_total;
  g.prompt_tokens = c.prompt_tokens;
  g.generation_tokens = c.generation_tokens;
  g.preemptions = c.preemptions;
  g.max_loras = max_loras_;
  for (const auto& [id, a] : active_) {
    if (a.lora.empty()) continue;
    (a.got_first_token ? g.running_adapters : g.waiting_adapters).insert(a.lora);
  }
  metrics_->set_engine_state(g);
}

}  // namespace quiver
