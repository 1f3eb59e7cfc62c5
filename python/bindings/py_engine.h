// PyEngine: the Python-facing owner of one LLMEngine. Every entry point takes the engine
// mutex with the GIL released, so Python threads may share an engine while step() runs
// without the GIL, and no two threads are ever inside the engine at once.
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <pybind11/pybind11.h>

#include "engine/llm_engine.h"
#include "py_tokenizer.h"

namespace quiver::python {

class PyEngine {
 public:
  explicit PyEngine(std::unique_ptr<LLMEngine> engine) : engine_(std::move(engine)) {}

  // Raises ValueError with the engine's message. Gives the tokenizer the request's text goes
  // through (nullopt: none), for its logprob token text.
  std::optional<PyTokenizer> add_request(const std::string& request_id, const std::optional<std::string>& text,
                                         const std::vector<int32_t>& token_ids, const SamplingParams& params,
                                         const std::optional<LoRARequest>& lora, int priority,
                                         const std::optional<std::string>& cache_salt);
  // LLMEngine::add_beam_search; the same errors and tokenizer as add_request.
  std::optional<PyTokenizer> add_beam_search(const std::string& request_id, const std::optional<std::string>& text,
                                             const std::vector<int32_t>& token_ids, const BeamSearchParams& params,
                                             const std::optional<LoRARequest>& lora,
                                             const std::optional<std::string>& cache_salt);
  std::vector<RequestOutput> step();
  // step() keeping only the requests that finished: LLM.generate's loop, which then builds
  // no Python object for a request that merely progressed.
  std::vector<RequestOutput> step_finished();
  bool abort_request(const std::string& request_id);
  bool has_unfinished_requests();
  bool reset_prefix_cache();
  int num_unfinished_requests();
  StepStats last_step();
  EngineCounters counters();
  std::vector<AdapterInfo> list_loras();
  // Registers and loads an adapter now rather than on its first request; ValueError when
  // it does not load or the name is taken.
  void add_lora(const std::string& name, const std::string& path);
  void remove_lora(const std::string& name);  // ValueError for an unknown name
  AdapterCacheStats lora_cache_stats();

  // The tokenizer of requests with `lora` (the base model's without): the adapter's own or
  // the base's; nullopt when there is none. A LoRARequest with a path registers its adapter
  // first, as add_request does; ValueError when that fails or the adapter is unknown.
  std::optional<PyTokenizer> tokenizer(const std::optional<LoRARequest>& lora);

  int max_model_len() const { return engine_->max_model_len(); }
  int64_t vocab_size() const { return engine_->model_config().vocab_size; }
  // The ids generation stops at (config.json's and generation_config.json's).
  std::vector<int64_t> eos_token_ids() const { return engine_->model_config().eos_token_ids; }
  std::string device() const { return engine_->backend()->name(); }
  const EngineArgs& args() const { return engine_->args(); }

 private:
  // `add` (add_request or add_beam_search) under the engine mutex; ValueError with its
  // message, else the tokenizer the request's text goes through (nullopt: none).
  std::optional<PyTokenizer> add_with(const PromptInput& prompt, const std::optional<LoRARequest>& lora,
                                      const std::function<Status(const PromptInput&)>& add);
  // Runs f under the engine mutex. Waiting for the mutex must not hold the GIL, or a
  // thread inside step() that needs the GIL later could deadlock with this one.
  template <typename F>
  auto locked(F&& f) {
    pybind11::gil_scoped_release release;
    std::lock_guard<std::mutex> lock(mu_);
    return f();
  }
  std::mutex mu_;
  std::unique_ptr<LLMEngine> engine_;
};

}  // namespace quiver::python
