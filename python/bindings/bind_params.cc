// The engine's inputs as Python classes: EngineArgs, SamplingParams and LoRARequest with
// the C++ field names. pybind11 checks each field's type on assignment (TypeError).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "engine/llm_engine.h"
#include "io/generation_defaults.h"
#include "structured/request_fields.h"

namespace py = pybind11;

namespace quiver::python {

namespace {

// vocab_size is unknown until an engine exists; the engine checks token ids again.
constexpr int64_t kAnyVocabulary = int64_t{1} << 31;

void validate(const SamplingParams& p) {
  Status s = p.validate(kAnyVocabulary);
  if (!s.is_ok()) throw py::value_error(s.message());
}

// The constraint of a request body's structured-output fields (`body_json`: an object such
// as {"structured_outputs": {"regex": "..."}}), read by the parser the server and `quiver
// generate` use, so the three accept and refuse the same things.
StructuredOutputSpec structured_spec(const std::string& body_json) {
  auto body = nlohmann::ordered_json::parse(body_json, nullptr, false);
  if (body.is_discarded() || !body.is_object()) throw py::value_error("structured outputs: not a JSON object");
  std::string field;
  auto spec = structured::read_structured_fields(body, &field);
  if (!spec.is_ok()) throw py::value_error(spec.status().message());
  return std::move(spec).value();
}

// The sampling fields generation_config.json sets under vLLM's `generation_config` setting
// (auto: the model folder's file, vllm: none, else a folder holding one), with vLLM's names
// (max_new_tokens as max_tokens), `override_json` over them; the reader `quiver serve
// --generation-config` and `--override-generation-config` use.
py::dict generation_defaults(const std::string& setting, const std::string& model_dir,
                             const std::string& override_json) {
  auto loaded = load_generation_defaults(setting, model_dir, override_json);
  if (!loaded.is_ok()) throw py::value_error(loaded.status().message());
  const GenerationDefaults& d = loaded.value();
  py::dict out;
  if (d.temperature) out["temperature"] = *d.temperature;
  if (d.top_p) out["top_p"] = *d.top_p;
  if (d.top_k) out["top_k"] = *d.top_k;
  if (d.min_p) out["min_p"] = *d.min_p;
  if (d.repetition_penalty) out["repetition_penalty"] = *d.repetition_penalty;
  if (d.max_new_tokens) out["max_tokens"] = *d.max_new_tokens;
  return out;
}

const char* kind_name(const StructuredOutputSpec& s) {
  switch (s.kind) {
    case StructuredOutputSpec::Kind::kJson: return "json";
    case StructuredOutputSpec::Kind::kJsonObject: return "json_object";
    case StructuredOutputSpec::Kind::kRegex: return "regex";
    case StructuredOutputSpec::Kind::kChoice: return "choice";
    case StructuredOutputSpec::Kind::kNone: break;
  }
  return "none";
}

}  // namespace

void bind_params(py::module_& m) {
  py::class_<EngineArgs>(m, "EngineArgs")
      .def(py::init<>())
      .def_readwrite("model", &EngineArgs::model)
      .def_readwrite("tokenizer", &EngineArgs::tokenizer)
      .def_readwrite("load_format", &EngineArgs::load_format)
      .def_readwrite("dtype", &EngineArgs::dtype)
      .def_readwrite("device", &EngineArgs::device)
      .def_readwrite("threads", &EngineArgs::threads)
      .def_readwrite("tensor_parallel_size", &EngineArgs::tensor_parallel_size)
      .def_readwrite("seed", &EngineArgs::seed)
      .def_readwrite("kv_cache_dtype", &EngineArgs::kv_cache_dtype)
      .def_readwrite("matmul_precision", &EngineArgs::matmul_precision)
      .def_readwrite("quantization", &EngineArgs::quantization)
      .def_readwrite("enable_lora", &EngineArgs::enable_lora)
      .def_readwrite("max_loras", &EngineArgs::max_loras)
      .def_readwrite("max_lora_rank", &EngineArgs::max_lora_rank)
      .def_readwrite("max_cpu_loras", &EngineArgs::max_cpu_loras)
      .def_readwrite("lora_extra_vocab_size", &EngineArgs::lora_extra_vocab_size)
      .def_readwrite("max_lora_vocab_rows", &EngineArgs::max_lora_vocab_rows)
      .def_readwrite("lora_dtype", &EngineArgs::lora_dtype)
      .def_readwrite("max_num_seqs", &EngineArgs::max_num_seqs)
      .def_readwrite("max_num_batched_tokens", &EngineArgs::max_num_batched_tokens)
      .def_readwrite("max_model_len", &EngineArgs::max_model_len)
      .def_readwrite("block_size", &EngineArgs::block_size)
      .def_readwrite("num_kv_blocks", &EngineArgs::num_kv_blocks)
      .def_readwrite("kv_cache_memory", &EngineArgs::kv_cache_memory)
      .def_readwrite("gpu_memory_utilization", &EngineArgs::gpu_memory_utilization)
      .def_readwrite("max_logprobs", &EngineArgs::max_logprobs)
      .def_readwrite("enable_prefix_caching", &EngineArgs::enable_prefix_caching)
      .def_readwrite("scheduling_policy", &EngineArgs::scheduling_policy)
      .def_readwrite("enforce_eager", &EngineArgs::enforce_eager)
      .def_readwrite("trace", &EngineArgs::trace);

  py::class_<StructuredOutputSpec>(m, "StructuredOutputSpec")
      .def(py::init<>())
      .def_property_readonly("kind", &kind_name)
      .def_readonly("json_schema", &StructuredOutputSpec::json_schema)
      .def_readonly("regex", &StructuredOutputSpec::regex)
      .def_readonly("choice", &StructuredOutputSpec::choice);
  m.def("generation_defaults", &generation_defaults, py::arg("setting"), py::arg("model_dir"),
        py::arg("override_json") = "",
        "generation_config.json's sampling fields as a dict of SamplingParams keywords (ValueError naming "
        "the file's bad field, or a folder without the file)");
  m.def("structured_spec", &structured_spec, py::arg("body_json"),
        "The constraint a request body's structured-output fields ask for (ValueError naming the field)");

  py::class_<BeamSearchParams>(m, "BeamSearchParams")
      .def(py::init<>())
      .def_readwrite("beam_width", &BeamSearchParams::beam_width)
      .def_readwrite("max_tokens", &BeamSearchParams::max_tokens)
      .def_readwrite("ignore_eos", &BeamSearchParams::ignore_eos)
      .def_readwrite("temperature", &BeamSearchParams::temperature)
      .def_readwrite("length_penalty", &BeamSearchParams::length_penalty)
      .def_readwrite("logprobs", &BeamSearchParams::logprobs);

  py::class_<SamplingParams>(m, "SamplingParams")
      .def(py::init<>())
      .def_readwrite("n", &SamplingParams::n)
      .def_readwrite("temperature", &SamplingParams::temperature)
      .def_readwrite("top_p", &SamplingParams::top_p)
      .def_readwrite("top_k", &SamplingParams::top_k)
      .def_readwrite("min_p", &SamplingParams::min_p)
      .def_readwrite("seed", &SamplingParams::seed)
      .def_readwrite("presence_penalty", &SamplingParams::presence_penalty)
      .def_readwrite("frequency_penalty", &SamplingParams::frequency_penalty)
      .def_readwrite("repetition_penalty", &SamplingParams::repetition_penalty)
      .def_readwrite("logit_bias", &SamplingParams::logit_bias)
      .def_readwrite("max_tokens", &SamplingParams::max_tokens)
      .def_readwrite("min_tokens", &SamplingParams::min_tokens)
      .def_readwrite("stop", &SamplingParams::stop)
      .def_readwrite("stop_token_ids", &SamplingParams::stop_token_ids)
      .def_readwrite("include_stop_str_in_output", &SamplingParams::include_stop_str_in_output)
      .def_readwrite("ignore_eos", &SamplingParams::ignore_eos)
      .def_readwrite("logprobs", &SamplingParams::logprobs)
      .def_readwrite("prompt_logprobs", &SamplingParams::prompt_logprobs)
      .def_readwrite("skip_special_tokens", &SamplingParams::skip_special_tokens)
      .def_readwrite("spaces_between_special_tokens", &SamplingParams::spaces_between_special_tokens)
      .def_readwrite("allowed_token_ids", &SamplingParams::allowed_token_ids)
      .def_readwrite("bad_words", &SamplingParams::bad_words)
      .def_readwrite("truncate_prompt_tokens", &SamplingParams::truncate_prompt_tokens)
      .def_readwrite("structured_outputs", &SamplingParams::structured_outputs)
      .def("validate", &validate, "ValueError naming the field when a value is out of range");

  py::class_<LoRARequest>(m, "LoRARequest")
      .def(py::init([](std::string name, int64_t id, std::string path) { return LoRARequest{name, id, path}; }),
           py::arg("name"), py::arg("id"), py::arg("path"))
      .def_readonly("name", &LoRARequest::name)
      .def_readonly("id", &LoRARequest::id)
      .def_readonly("path", &LoRARequest::path);
}

}  // namespace quiver::python
