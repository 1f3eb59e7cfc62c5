// _quiver: the native layer of the quiver package. It exposes the C++ engine's own
// structs (EngineArgs, SamplingParams, LoRARequest, RequestOutput, step counters) and
// PyEngine; the vLLM-shaped classes users see are written in Python on top (quiver/).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "py_engine.h"

namespace py = pybind11;

namespace quiver::python {

void bind_params(py::module_& m);
void bind_outputs(py::module_& m);

namespace {

std::unique_ptr<PyEngine> create_engine(const EngineArgs& args) {
  Result<std::unique_ptr<LLMEngine>> created = Status::error("not created");
  {
    // Loading weights and capturing graphs takes a while; other threads may run.
    py::gil_scoped_release release;
    created = LLMEngine::create(args);
  }
  if (!created.is_ok()) throw py::value_error(created.message());
  return std::make_unique<PyEngine>(std::move(created).value());
}

void bind_tokenizer(py::module_& m) {
  py::class_<PyTokenizer>(m, "Tokenizer")
      .def("encode", &PyTokenizer::encode, py::arg("text"), py::arg("add_special_tokens"))
      .def("decode", &PyTokenizer::decode, py::arg("ids"), py::arg("skip_special_tokens"))
      .def("apply_chat_template", &PyTokenizer::apply_chat_template, py::arg("messages_json"),
           py::arg("add_generation_prompt"), py::arg("template_source"), py::arg("variables_json"),
           py::arg("continue_final_message") = false, py::arg("tool_arguments_as_objects") = false)
      .def_property_readonly("vocab_size", &PyTokenizer::vocab_size)
      .def_property_readonly("identity", &PyTokenizer::identity);
}

void bind_engine(py::module_& m) {
  py::class_<PyEngine>(m, "Engine")
      .def(py::init(&create_engine), py::arg("args"))
      .def("add_request", &PyEngine::add_request, py::arg("request_id"), py::arg("text"), py::arg("token_ids"),
           py::arg("params"), py::arg("lora"), py::arg("priority") = 0, py::arg("cache_salt") = py::none())
      .def("add_beam_search", &PyEngine::add_beam_search, py::arg("request_id"), py::arg("text"),
           py::arg("token_ids"), py::arg("params"), py::arg("lora"), py::arg("cache_salt") = py::none())
      .def("step", &PyEngine::step)
      .def("step_finished", &PyEngine::step_finished)
      .def("abort_request", &PyEngine::abort_request, py::arg("request_id"))
      .def("has_unfinished_requests", &PyEngine::has_unfinished_requests)
      .def("reset_prefix_cache", &PyEngine::reset_prefix_cache)
      .def("num_unfinished_requests", &PyEngine::num_unfinished_requests)
      .def("last_step", &PyEngine::last_step)
      .def("counters", &PyEngine::counters)
      .def("list_loras", &PyEngine::list_loras)
      .def("add_lora", &PyEngine::add_lora, py::arg("name"), py::arg("path"))
      .def("remove_lora", &PyEngine::remove_lora, py::arg("name"))
      .def("lora_cache_stats", &PyEngine::lora_cache_stats)
      .def("tokenizer", &PyEngine::tokenizer, py::arg("lora"))
      .def_property_readonly("max_model_len", &PyEngine::max_model_len)
      .def_property_readonly("vocab_size", &PyEngine::vocab_size)
      .def_property_readonly("eos_token_ids", &PyEngine::eos_token_ids)
      .def_property_readonly("device", &PyEngine::device)
      .def_property_readonly("args", &PyEngine::args);
}

}  // namespace

}  // namespace quiver::python

PYBIND11_MODULE(_quiver, m) {
  m.doc() = "quiver's native engine; use the quiver package, not this module";
#ifdef QUIVER_HAS_CUDA
  m.attr("has_cuda") = true;
#else
  m.attr("has_cuda") = false;
#endif
  quiver::python::bind_params(m);
  quiver::python::bind_outputs(m);
  quiver::python::bind_tokenizer(m);
  quiver::python::bind_engine(m);
}
