// The engine's inputs as Python classes: EngineArgs, SamplingParams and LoRARequest with
// the C++ field names. pybind11 checks each field's type on assignment (TypeError).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "engine/llm_engine.h"

namespace py = pybind11;

namespace quiver::python {

namespace {

// vocab_size is unknown until an engine exists; the engine checks token ids again.
constexpr int64_t kAnyVocabulary = int64_t{1} << 31;

void validate(const SamplingParams& p) {
  Status s = p.validate(kAnyVocabulary);
  if (!s.is_ok()) throw py::value_error(s.message());
}

}  // namespace

void bind_params(py::module_& m) {
  py::class_<EngineArgs>(m, "EngineArgs")
      .def(py::init<>())
      .def_readwrite("model", &EngineArgs::model)
      .def_readwrite("load_format", &EngineArgs::load_format)
      .def_readwrite("dtype", &EngineArgs::dtype)
      .def_readwrite("device", &EngineArgs::device)
      .def_readwrite("threads", &EngineArgs::threads)
      .def_readwrite("seed", &EngineArgs::seed)
      .def_readwrite("kv_cache_dtype", &EngineArgs::kv_cache_dtype)
      .def_readwrite("matmul_precision", &EngineArgs::matmul_precision)
      .def_readwrite("enable_lora", &EngineArgs::enable_lora)
      .def_readwrite("max_loras", &EngineArgs::max_loras)
      .def_readwrite("max_lora_rank", &EngineArgs::max_lora_rank)
      .def_readwrite("max_cpu_loras", &EngineArgs::max_cpu_loras)
      .def_readwrite("lora_dtype", &EngineArgs::lora_dtype)
      .def_readwrite("max_num_seqs", &EngineArgs::max_num_seqs)
      .def_readwrite("max_num_batched_tokens", &EngineArgs::max_num_batched_tokens)
      .def_readwrite("max_model_len", &EngineArgs::max_model_len)
      .def_readwrite("block_size", &EngineArgs::block_size)
      .def_readwrite("num_kv_blocks", &EngineArgs::num_kv_blocks)
      .def_readwrite("kv_cache_memory", &EngineArgs::kv_cache_memory)
      .def_readwrite("enable_prefix_caching", &EngineArgs::enable_prefix_caching)
      .def_readwrite("enforce_eager", &EngineArgs::enforce_eager)
      .def_readwrite("trace", &EngineArgs::trace);

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
      .def("validate", &validate, "ValueError naming the field when a value is out of range");

  py::class_<LoRARequest>(m, "LoRARequest")
      .def(py::init([](std::string name, int64_t id, std::string path) { return LoRARequest{name, id, path}; }),
           py::arg("name"), py::arg("id"), py::arg("path"))
      .def_readonly("name", &LoRARequest::name)
      .def_readonly("id", &LoRARequest::id)
      .def_readonly("path", &LoRARequest::path);
}

}  // namespace quiver::python
