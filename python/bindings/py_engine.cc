#include "py_engine.h"

#include <pybind11/pybind11.h>

#include <nlohmann/json.hpp>

#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace py = pybind11;

namespace quiver::python {

namespace {

[[noreturn]] void raise_value_error(const std::string& message) { throw py::value_error(message); }

}  // namespace

void PyEngine::add_request(const std::string& request_id, const std::optional<std::string>& text,
                           const std::vector<int32_t>& token_ids, const SamplingParams& params,
                           const std::optional<LoRARequest>& lora) {
  PromptInput prompt;
  prompt.text = text;
  prompt.token_ids = token_ids;
  // The GIL stays released for the whole call: an adapter's first use reads its files.
  Status s = locked([&] { return engine_->add_request(request_id, prompt, params, lora); });
  if (!s.is_ok()) raise_value_error(s.message());
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

const Tokenizer& PyEngine::tokenizer() const {
  if (engine_->tokenizer() == nullptr)
    raise_value_error("the model folder '" + engine_->args().model + "' has no tokenizer.json");
  return *engine_->tokenizer();
}

// The tokenizer is immutable after start-up, so these need no engine lock.
std::vector<int32_t> PyEngine::encode(const std::string& text, bool add_special_tokens) {
  auto ids = tokenizer().encode(text, add_special_tokens);
  if (!ids.is_ok()) raise_value_error(ids.message());
  return std::move(ids).value();
}

std::string PyEngine::decode(const std::vector<int32_t>& ids, bool skip_special_tokens) {
  auto text = tokenizer().decode(ids, skip_special_tokens);
  if (!text.is_ok()) raise_value_error(text.message());
  return std::move(text).value();
}

std::string PyEngine::apply_chat_template(const std::string& messages_json, bool add_generation_prompt,
                                          const std::string& template_source) {
  const Tokenizer& tok = tokenizer();
  const auto messages = nlohmann::json::parse(messages_json, nullptr, /*allow_exceptions=*/false);
  if (messages.is_discarded() || !messages.is_array()) raise_value_error("messages must be a list of dicts");
  Result<std::string> text = Status::error("no template");
  if (template_source.empty()) {
    // The same path as the server's /v1/chat/completions.
    text = tok.apply_chat_template(messages, add_generation_prompt);
  } else {
    auto parsed = ChatTemplate::parse(template_source);
    if (!parsed.is_ok()) raise_value_error("chat_template: " + parsed.message());
    const nlohmann::json vars = {{"bos_token", tok.bos_token()}, {"eos_token", tok.eos_token()}};
    text = parsed->render(messages, add_generation_prompt, vars);
  }
  if (!text.is_ok()) raise_value_error(text.message());
  return std::move(text).value();
}

}  // namespace quiver::python
