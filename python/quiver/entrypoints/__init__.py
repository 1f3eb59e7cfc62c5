"""User-facing entry points, at vLLM's module paths: entrypoints.llm.LLM."""
