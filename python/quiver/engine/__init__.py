"""The engine layer, at vLLM's module paths: engine.arg_utils, engine.llm_engine."""
