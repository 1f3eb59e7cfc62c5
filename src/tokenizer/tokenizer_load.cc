// Tokenizer::load: reads DIR/tokenizer.json with DIR's tokenizer_config.json and chat
// template (tokenizer/tokenizer_config.h), and Tokenizer::apply_chat_template.
#include <filesystem>

#include "tokenizer/hf_tokenizer.h"
#include "tokenizer/tokenizer_config.h"

namespace quiver {

using nlohmann::json;
namespace fs = std::filesystem;

Result<std::unique_ptr<Tokenizer>> Tokenizer::load(const std::string& model_dir) {
  fs::path dir(model_dir);
  fs::path tokenizer_path = dir / "tokenizer.json";
  if (!fs::exists(tokenizer_path)) {
    return Status::error(tokenizer_path.string() + ": not found (quiver needs a Hugging Face tokenizer.json)");
  }
  QV_ASSIGN_OR_RETURN(json j, read_json_file(tokenizer_path));
  QV_ASSIGN_OR_RETURN(TokenizerConfig config, read_tokenizer_config(dir));
  auto tokenizer = HfTokenizer::create(j, config);
  if (!tokenizer) return tokenizer.status().with_context(tokenizer_path.string());
  return std::unique_ptr<Tokenizer>(std::move(tokenizer.value()));
}

Result<std::string> Tokenizer::apply_chat_template(const nlohmann::ordered_json& messages,
                                                   bool add_generation_prompt) const {
  return apply_chat_template(messages, add_generation_prompt, nlohmann::ordered_json::object());
}

Result<std::string> Tokenizer::apply_chat_template(const nlohmann::ordered_json& messages, bool add_generation_prompt,
                                                   const nlohmann::ordered_json& extra_variables,
                                                   const ChatTemplate* override_template) const {
  const ChatTemplate* tmpl = override_template != nullptr ? override_template : chat_template();
  if (tmpl == nullptr) {
    QV_RETURN_IF_ERROR(chat_template_status());
    return Status::error("this tokenizer has no chat template (tokenizer_config.json \"chat_template\" "
                         "or chat_template.jinja)");
  }
  if (!messages.is_array()) return Status::error("messages must be an array");
  nlohmann::ordered_json variables = extra_variables.is_object() ? extra_variables : nlohmann::ordered_json::object();
  if (!variables.contains("bos_token")) variables["bos_token"] = bos_token();
  if (!variables.contains("eos_token")) variables["eos_token"] = eos_token();
  return tmpl->render_ordered(messages, add_generation_prompt, variables);
}

}  // namespace quiver
