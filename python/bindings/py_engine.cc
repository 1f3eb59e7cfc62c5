#include "py_engine.h"

#include <pybind11/pybind11.h>


namespace py = pybind11;

namespace quiver::python {

namespace {

[[noreturn]] void raise_value_error(const std::string& message) { throw py::value_error(message); }

}  // namespace

std::optional<PyTokenizer> PyEngine::add_request(const std::string& request_id, const std::optional<std::string>& text,
                                                 const std::vector<int32_t>& token_ids, const SamplingParams& params,
                                                 const std::optional<LoRARequest>& lora, int priority,
                                                 const std::optional<std::string>& cache_salt) {
  return add_with(PromptInput{text, token_ids, cache_salt}, lora, [&](const PromptInput& prompt) {
    return engine_->add_request(request_id, prompt, params, lora, priority);
  });
}

std::optional<PyTokenizer> PyEngine::add_beam_search(const std::string& request_id,
                                                     const std::optional<std::string>& text,
                                                     const std::vector<int32_t>& token_ids,
                                                     const BeamSearchParams& params,
                                                     const std::optional<LoRARequest>& lora,
                                                     const std::optional<std::string>& cache_salt) {
  return add_with(PromptInput{text, token_ids, cache_salt}, lora, [&](const PromptInput& prompt) {
    return engine_->add_beam_search(request_id, prompt, params, lora);
  });
}

std::optional<PyTokenizer> PyEngine::add_with(const PromptInput& prompt, const std::optional<LoRARequest>& lora,
                                              const std::function<Status(const PromptInput&)>& add) {
  // The GIL stays released for the whole call: an adapter's first use reads its files.
  auto added = locked([&]() -> Result<std::shared_ptr<const Tokenizer>> {
    QV_RETURN_IF_ERROR(add(prompt));
    // The request registered its adapter if it had to: this only looks the tokenizer up.
    return engine_->tokenizer_for(lora);
  });
  if (!added.is_ok()) raise_value_error(added.message());
  if (added.value() == nullptr) return std::nullopt;
  return PyTokenizer(std::move(added).value());
}

std::vector<RequestOutput> PyEngine::step() {
  return locked([&] { return engine_->step(); });
}

std::vector<RequestOutput> PyEngine::step_finished() {
  return locked([&] {
    std::vector<RequestOutput> outputs = engine_->step();
    std::erase_if(outputs, [](const RequestOutput& o) { return !o.finished; });
    return outputs;
  });
}

bool PyEngine::abort_request(const std::string& request_id) {
  return locked([&] { return engine_->abort_request(request_id); });
}
bool PyEngine::reset_prefix_cache() {
  return locked([&] { return engine_->reset_prefix_cache(); });
}
bool PyEngine::has_unfinished_requests() {
  return locked([&] { return engine_->has_unfinished_requests(); });
}
int PyEngine::num_unfinished_requests() {
  return locked([&] { return engine_->num_unfinished_requests(); });
}
StepStats PyEngine::last_step() {
  return locked([&] { return engine_->last_step(); });
}
EngineCounters PyEngine::counters() {
  return locked([&] { return engine_->counters(); });
}
std::vector<AdapterInfo> PyEngine::list_loras() {
  return locked([&] { return engine_->list_loras(); });
}
void PyEngine::add_lora(const std::string& name, const std::string& path) {
  auto added = locked([&] { return engine_->add_lora(name, path); });
  if (!added.is_ok()) raise_value_error(added.message());
}
void PyEngine::remove_lora(const std::string& name) {
  Status s = locked([&] { return engine_->remove_lora(name); });
  if (!s.is_ok()) raise_value_error(s.message());
}
AdapterCacheStats PyEngine::lora_cache_stats() {
  return locked([&] { return engine_->lora_cache_stats(); });
}

std::optional<PyTokenizer> PyEngine::tokenizer(const std::optional<LoRARequest>& lora) {
  // Locked: naming an adapter by path registers it.
  auto found = locked([&] { return engine_->tokenizer_for(lora); });
  if (!found.is_ok()) raise_value_error(found.message());
  if (found.value() == nullptr) return std::nullopt;
  return PyTokenizer(std::move(found).value());
}

}  // namespace quiver::python
