// run_tokenize_request: validates one JSON request and runs encode, decode or the chat
// template. Defaults follow transformers: add_special_tokens=true, skip_special_tokens=false,
// add_generation_prompt=false; rendered chat text is encoded without special tokens, since
// the template already wrote them.
#include "tokenizer/tokenize_request.h"

namespace quiver {

using nlohmann::json;
// Requests keep their key order: a chat's tools and tool calls print in it.
using ojson = nlohmann::ordered_json;

namespace {

Result<bool> flag(const ojson& request, const char* key, bool fallback) {
  auto it = request.find(key);
  if (it == request.end() || it->is_null()) return fallback;
  if (!it->is_boolean()) return Status::error(std::string("\"") + key + "\" must be a boolean");
  return it->get<bool>();
}

Result<json> run(const Tokenizer& tokenizer, const ojson& request) {
  if (auto it = request.find("text"); it != request.end()) {
    if (!it->is_string()) return Status::error("\"text\" must be a string");
    QV_ASSIGN_OR_RETURN(bool add_special, flag(request, "add_special_tokens", true));
    QV_ASSIGN_OR_RETURN(std::vector<int32_t> ids, tokenizer.encode(it->get<std::string>(), add_special));
    return json{{"ids", ids}};
  }
  if (auto it = request.find("ids"); it != request.end()) {
    if (!it->is_array()) return Status::error("\"ids\" must be an array of integers");
    std::vector<int32_t> ids;
    for (const ojson& id : *it) {
      if (!id.is_number_integer() || id.get<int64_t>() < INT32_MIN || id.get<int64_t>() > INT32_MAX) {
        return Status::error("\"ids\" must be an array of integers");
      }
      ids.push_back(static_cast<int32_t>(id.get<int64_t>()));
    }
    QV_ASSIGN_OR_RETURN(bool skip, flag(request, "skip_special_tokens", false));
    QV_ASSIGN_OR_RETURN(std::string text, tokenizer.decode(ids, skip));
    return json{{"text", text}};
  }
  if (auto it = request.find("messages"); it != request.end()) {
    if (!it->is_array()) return Status::error("\"messages\" must be an array");
    QV_ASSIGN_OR_RETURN(bool add_prompt, flag(request, "add_generation_prompt", false));
    ojson extra = request.value("chat_template_kwargs", ojson::object());
    if (!extra.is_object()) return Status::error("\"chat_template_kwargs\" must be an object");
    QV_ASSIGN_OR_RETURN(std::string text, tokenizer.apply_chat_template(*it, add_prompt, extra));
    QV_ASSIGN_OR_RETURN(std::vector<int32_t> ids, tokenizer.encode(text, false));
    return json{{"text", text}, {"ids", ids}};
  }
  return Status::error("a request needs \"text\", \"ids\" or \"messages\"");
}

}  // namespace

Result<json> run_tokenize_request(const Tokenizer& tokenizer, const ojson& request) {
  if (!request.is_object()) return Status::error("a request must be a JSON object");
  QV_ASSIGN_OR_RETURN(json response, run(tokenizer, request));
  if (auto id = request.find("id"); id != request.end()) response["id"] = *id;
  return response;
}

}  // namespace quiver
