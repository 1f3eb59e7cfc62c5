// The engine's outputs and counters as read-only Python classes. quiver/outputs.py turns
// them into vLLM's RequestOutput / CompletionOutput / Logprob; only requests a caller
// looks at are converted, so LLM.generate pays nothing per step for unfinished ones.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "engine/llm_engine.h"

namespace py = pybind11;

namespace quiver::python {

void bind_outputs(py::module_& m) {
  py::class_<TokenLogprobs>(m, "TokenLogprobs")
      .def_readonly("token", &TokenLogprobs::token)
      .def_readonly("logprob", &TokenLogprobs::logprob)
      .def_readonly("rank", &TokenLogprobs::rank)
      .def_readonly("top", &TokenLogprobs::top);

  py::class_<CompletionOutput>(m, "CompletionOutput")
      .def_readonly("index", &CompletionOutput::index)
      .def_readonly("text", &CompletionOutput::text)
      .def_readonly("token_ids", &CompletionOutput::token_ids)
      .def_readonly("logprobs", &CompletionOutput::logprobs)
      .def_readonly("finish_reason", &CompletionOutput::finish_reason)
      .def_readonly("stop_reason", &CompletionOutput::stop_reason)
      .def_readonly("num_new_tokens", &CompletionOutput::num_new_tokens)
      .def_readonly("delta_text", &CompletionOutput::delta_text);

  py::class_<RequestOutput>(m, "RequestOutput")
      .def_readonly("request_id", &RequestOutput::request_id)
      .def_readonly("prompt", &RequestOutput::prompt)
      .def_readonly("prompt_token_ids", &RequestOutput::prompt_token_ids)
      .def_readonly("prompt_logprobs", &RequestOutput::prompt_logprobs)
      .def_readonly("outputs", &RequestOutput::outputs)
      .def_readonly("lora_name", &RequestOutput::lora_name)
      .def_readonly("finished", &RequestOutput::finished)
      .def_readonly("error", &RequestOutput::error)
      .def_readonly("first_token_s", &RequestOutput::first_token_s)
      .def_readonly("num_cached_tokens", &RequestOutput::num_cached_tokens)
      .def_readonly("finished_s", &RequestOutput::finished_s);

  py::class_<StepStats>(m, "StepStats")
      .def_readonly("step", &StepStats::step)
      .def_readonly("num_prefill_tokens", &StepStats::num_prefill_tokens)
      .def_readonly("num_decode_tokens", &StepStats::num_decode_tokens)
      .def_readonly("num_seqs", &StepStats::num_seqs)
      .def_readonly("adapters", &StepStats::adapters)
      .def_readonly("num_running", &StepStats::num_running)
      .def_readonly("num_waiting", &StepStats::num_waiting)
      .def_readonly("path", &StepStats::path)
      .def_readonly("lora_active", &StepStats::lora_active)
      .def_readonly("ms", &StepStats::ms)
      .def("__repr__", &StepStats::trace_line);

  py::class_<EngineCounters>(m, "EngineCounters")
      .def_readonly("steps", &EngineCounters::steps)
      .def_readonly("prompt_tokens", &EngineCounters::prompt_tokens)
      .def_readonly("generation_tokens", &EngineCounters::generation_tokens)
      .def_readonly("preemptions", &EngineCounters::preemptions)
      .def_readonly("requests_finished", &EngineCounters::requests_finished)
      .def_readonly("prefix_cache_hit_blocks", &EngineCounters::prefix_cache_hit_blocks)
      .def_readonly("step_seconds", &EngineCounters::step_seconds);

  py::class_<AdapterInfo>(m, "AdapterInfo")
      .def_readonly("name", &AdapterInfo::name)
      .def_readonly("path", &AdapterInfo::path)
      .def_readonly("max_rank", &AdapterInfo::max_rank);

  py::class_<AdapterCacheStats>(m, "AdapterCacheStats")
      .def_readonly("num_cached", &AdapterCacheStats::num_cached)
      .def_readonly("loads", &AdapterCacheStats::loads);
}

}  // namespace quiver::python
