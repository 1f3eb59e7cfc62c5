#include "server/responses_stream.h"

namespace quiver {

using nlohmann::json;

std::string ResponsesStream::event(const char* type, json fields) {
  fields["type"] = type;
  fields["sequence_number"] = sequence_++;
  return std::string("event: ") + type + "\ndata: " + safe_dump(fields) + "\n\n";
}

std::string ResponsesStream::start() {
  // Statements, not one expression: the events' sequence numbers follow their order.
  const json response = response_object(*request_, meta_, "in_progress", json::array(), nullptr);
  std::string out = event("response.created", {{"response", response}});
  return out + event("response.in_progress", {{"response", response}});
}

std::string ResponsesStream::open_reasoning() {
  reasoning_ = {true, new_id_("rs_"), ""};
  return event("response.output_item.added",
               {{"output_index", done_.size()},
                {"item", {{"id", reasoning_.id}, {"type", "reasoning"}, {"summary", json::array()},
                          {"content", json::array()}, {"status", "in_progress"}}}});
}

std::string ResponsesStream::close_reasoning() {
  if (!reasoning_.open) return "";
  reasoning_.open = false;
  const json item = {{"id", reasoning_.id},
                     {"type", "reasoning"},
                     {"summary", json::array()},
                     {"content", json::array({{{"type", "reasoning_text"}, {"text", reasoning_.text}}})},
                     {"status", "completed"}};
  std::string out = event("response.reasoning_text.done", {{"item_id", reasoning_.id},
                                                           {"output_index", done_.size()},
                                                           {"content_index", 0},
                                                           {"text", reasoning_.text}});
  out += event("response.output_item.done", {{"output_index", done_.size()}, {"item", item}});
  done_.push_back(item);
  return out;
}

std::string ResponsesStream::open_message() {
  message_ = {true, new_id_("msg_"), ""};
  message_sent_ = true;
  std::string out = event("response.output_item.added",
                          {{"output_index", done_.size()},
                           {"item", {{"id", message_.id}, {"type", "message"}, {"role", "assistant"},
                                     {"status", "in_progress"}, {"content", json::array()}}}});
  return out + event("response.content_part.added",
                     {{"item_id", message_.id},
                      {"output_index", done_.size()},
                      {"content_index", 0},
                      {"part", {{"type", "output_text"}, {"text", ""}, {"annotations", json::array()}}}});
}

std::string ResponsesStream::close_message(const std::string& status) {
  if (!message_.open) return "";
  message_.open = false;
  const json part = {{"type", "output_text"},
                     {"text", message_.text},
                     {"annotations", json::array()},
                     {"logprobs", json::array()}};
  const json item = {{"id", message_.id},
                     {"type", "message"},
                     {"role", "assistant"},
                     {"status", status},
                     {"content", json::array({part})}};
  const json where = {{"item_id", message_.id}, {"output_index", done_.size()}, {"content_index", 0}};
  json text_done = where, part_done = where;
  text_done["text"] = message_.text;
  text_done["logprobs"] = json::array();
  part_done["part"] = part;
  std::string out = event("response.output_text.done", text_done);
  out += event("response.content_part.done", part_done);
  out += event("response.output_item.done", {{"output_index", done_.size()}, {"item", item}});
  done_.push_back(item);
  return out;
}

std::string ResponsesStream::piece(const ChoicePiece& p) {
  std::string out;
  if (!p.reasoning.empty()) {
    if (!reasoning_.open && !message_.open) out += open_reasoning();
    if (reasoning_.open) {
      reasoning_.text += p.reasoning;
      out += event("response.reasoning_text.delta", {{"item_id", reasoning_.id},
                                                     {"output_index", done_.size()},
                                                     {"content_index", 0},
                                                     {"delta", p.reasoning}});
    }
  }
  if (!p.text.empty()) {
    out += close_reasoning();
    if (!message_.open) out += open_message();
    message_.text += p.text;
    out += event("response.output_text.delta", {{"item_id", message_.id},
                                                {"output_index", done_.size()},
                                                {"content_index", 0},
                                                {"delta", p.text},
                                                {"logprobs", json::array()}});
  }
  return out;
}

std::string ResponsesStream::function_call(const json& call) {
  const std::string id = new_id_("fc_");
  json item = {{"id", id},
               {"type", "function_call"},
               {"call_id", call["id"]},
               {"name", call["function"]["name"]},
               {"arguments", ""},
               {"status", "in_progress"}};
  const json& arguments = call["function"]["arguments"];
  std::string out = event("response.output_item.added", {{"output_index", done_.size()}, {"item", item}});
  out += event("response.function_call_arguments.delta",
               {{"item_id", id}, {"output_index", done_.size()}, {"delta", arguments}});
  out += event("response.function_call_arguments.done",
               {{"item_id", id}, {"output_index", done_.size()}, {"arguments", arguments}});
  item["arguments"] = arguments;
  item["status"] = "completed";
  out += event("response.output_item.done", {{"output_index", done_.size()}, {"item", item}});
  done_.push_back(item);
  return out;
}

std::string ResponsesStream::finish(const ChoicePiece& last, const Usage& usage) {
  std::string out = piece(last);
  out += close_reasoning();
  // A choice with nothing else still answers with a message, as the whole response does.
  if (!message_sent_ && last.tool_calls.empty() && done_.empty()) out += open_message();
  const std::string status = response_status(last);
  out += close_message(status == "incomplete" ? "incomplete" : "completed");
  for (const json& call : last.tool_calls) out += function_call(call);
  const json response = response_object(*request_, meta_, status, done_, &usage);
  return out + event(status == "completed" ? "response.completed" : "response.incomplete", {{"response", response}});
}

std::string ResponsesStream::error(const ApiError& e) {
  return event("error", {{"code", e.status}, {"message", e.message}, {"param", e.param.empty() ? json() : json(e.param)}});
}

}  // namespace quiver
