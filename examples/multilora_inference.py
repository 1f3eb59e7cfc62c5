"""Multi-LoRA offline inference with the LLMEngine API, on the demo model.

The same loop as vLLM's examples/offline_inference/multilora_inference.py: requests for
the base model and for two adapters (sql, pirate) are fed to one engine, one per step,
and every RequestOutput is printed when it finishes. The adapters are not registered up
front; each LoRARequest names its folder and the engine reads it on first use.

    make python
    PYTHONPATH=build/python python3 examples/multilora_inference.py [--device cpu|cuda]
"""

import argparse
from pathlib import Path
from typing import List, Optional, Tuple

from quiver import EngineArgs, LLMEngine, RequestOutput, SamplingParams
from quiver.lora.request import LoRARequest

DEMO = Path(__file__).resolve().parent.parent / "models" / "demo"
SQL_QUESTION = ("[user] Write a SQL query to answer the question based on the table schema.\n\n"
                " context: CREATE TABLE table_name_74 (icao VARCHAR, airport VARCHAR)\n\n"
                " question: Name the ICAO for lilongwe airport [/user] [assistant]")
TREASURE = "[user] Hello my friend, are you ready for the treasure? [/user] [assistant]"


def create_test_prompts(adapters: Path) -> List[Tuple[str, SamplingParams, Optional[LoRARequest]]]:
    """Base-model prompts, then the same question to each adapter: greedy, sampled with a
    seed, and with logprobs, so every kind of output shows up."""
    sql = LoRARequest("sql", 1, str(adapters / "sql"))
    pirate = LoRARequest("pirate", 2, str(adapters / "pirate"))
    greedy = SamplingParams(temperature=0.0, max_tokens=48, logprobs=1, stop=["[/assistant]"])
    return [
        ("[user] Tell me a fortune. [/user] [assistant]", SamplingParams(temperature=0.0, max_tokens=32), None),
        ("[user] Tell me a fortune. [/user] [assistant]",
         SamplingParams(temperature=0.8, top_k=5, seed=7, max_tokens=32), None),
        (SQL_QUESTION, greedy, sql),
        (SQL_QUESTION, SamplingParams(n=2, temperature=0.7, seed=1, max_tokens=48, stop=["[/assistant]"]), sql),
        (TREASURE, greedy, pirate),
        (TREASURE, greedy, None),
    ]


def process_requests(engine: LLMEngine, test_prompts: List[Tuple[str, SamplingParams, Optional[LoRARequest]]]
                     ) -> List[RequestOutput]:
    """Adds one request per step while any are left, and steps until all have finished."""
    request_id = 0
    finished = []
    while test_prompts or engine.has_unfinished_requests():
        if test_prompts:
            prompt, sampling_params, lora_request = test_prompts.pop(0)
            engine.add_request(str(request_id), prompt, sampling_params, lora_request=lora_request)
            request_id += 1
        for request_output in engine.step():
            if request_output.finished:
                print(request_output)
                print()
                finished.append(request_output)
    return finished


def initialize_engine(model: Path, device: str) -> LLMEngine:
    """One engine for the base model and both adapters: max_loras=2 keeps both resident on
    the device at once, max_cpu_loras the host LRU behind them."""
    engine_args = EngineArgs(model=str(model), enable_lora=True, max_loras=2, max_lora_rank=16, max_cpu_loras=2,
                             max_num_seqs=64, device=device)
    return LLMEngine.from_engine_args(engine_args)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, default=DEMO / "base")
    parser.add_argument("--adapters", type=Path, default=DEMO / "adapters")
    parser.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    args = parser.parse_args()
    engine = initialize_engine(args.model, args.device)
    print(f"model {args.model} on {engine.device}\n")
    outputs = process_requests(engine, create_test_prompts(args.adapters))
    print("adapter  | output")
    for out in sorted(outputs, key=lambda o: int(o.request_id)):
        name = out.lora_request.lora_name if out.lora_request else "base"
        for c in out.outputs:
            print(f"{name:<8} | {c.text.strip()[:70]}")


if __name__ == "__main__":
    main()
