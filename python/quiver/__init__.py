"""quiver: multi-LoRA LLM inference with vLLM's offline Python API.

A vLLM script runs with its imports changed from vllm to quiver:

    from quiver import LLM, SamplingParams
    from quiver.lora.request import LoRARequest

    llm = LLM(model="models/demo/base", enable_lora=True, max_loras=2)
    outs = llm.generate(["Tell me a fortune."], SamplingParams(temperature=0, max_tokens=16),
                        lora_request=LoRARequest("sql", 1, "models/demo/adapters/sql"))
"""

from .engine.arg_utils import EngineArgs
from .engine.llm_engine import LLMEngine
from .entrypoints.llm import LLM
from .logprobs import Logprob
from .outputs import CompletionOutput, RequestOutput
from .sampling_params import SamplingParams

__version__ = "0.1.0"

__all__ = ["LLM", "LLMEngine", "EngineArgs", "SamplingParams", "RequestOutput", "CompletionOutput", "Logprob",
           "__version__"]
