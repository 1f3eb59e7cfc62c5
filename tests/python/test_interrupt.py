"""A native extension that behaves: Ctrl-C stops LLM.generate between steps and leaves the
engine usable, and step() lets other Python threads run while it computes."""

import os
import signal
import threading
import time

import pytest

from conftest import DEVICE, SQL_QUESTION, sql_lora
from quiver import SamplingParams

LONG = SamplingParams(temperature=0, max_tokens=400, ignore_eos=True)


class InterruptWhenOneFinishes:
    """A progress bar for LLM.generate that sends SIGINT from another thread when the
    first request finishes, so the signal lands while the engine is still stepping the
    others (with the GIL released), on any device and under any load."""

    def __init__(self, total, desc):
        self.sent = False
        self.closed = False

    def update(self, n=1):
        if not self.sent:
            self.sent = True
            threading.Thread(target=os.kill, args=(os.getpid(), signal.SIGINT)).start()

    def set_postfix_str(self, s, refresh=False):
        pass

    def close(self):
        self.closed = True


def test_keyboard_interrupt_stops_generate_and_the_engine_keeps_working(llm):
    engine = llm.llm_engine
    prompts = [f"[user] Tell me fortune number {i}. [/user] [assistant]" for i in range(16)]
    short = SamplingParams(temperature=0, max_tokens=5, ignore_eos=True)
    bars = []

    def bar(total, desc):
        bars.append(InterruptWhenOneFinishes(total, desc))
        return bars[-1]

    start = engine.get_counters().steps
    with pytest.raises(KeyboardInterrupt):
        llm.generate(prompts, [short] + [LONG] * 15, use_tqdm=bar, lora_request=sql_lora())
    # The long requests need 400 steps; generate() stopped a few steps after the signal,
    # aborted them, and closed its progress bar.
    assert bars[0].sent and bars[0].closed
    assert engine.get_counters().steps - start < 100
    assert not engine.has_unfinished_requests()
    out = llm.generate(SQL_QUESTION, SamplingParams(temperature=0, max_tokens=40), lora_request=sql_lora(),
                       use_tqdm=False)
    assert out[0].outputs[0].text.strip().startswith("SELECT icao")


@pytest.mark.skipif(DEVICE != "cpu", reason="GPU steps of the demo model are too short to observe a thread")
def test_step_releases_the_gil(llm):
    engine = llm.llm_engine
    # A prefill of 4 x 480 tokens: one long step, then decode steps.
    for i in range(4):
        engine.add_request(f"gil-{i}", {"prompt_token_ids": [0] + [100 + i + j % 50 for j in range(479)]},
                           SamplingParams(temperature=0, max_tokens=2, ignore_eos=True))
    step_ms = []
    stop = threading.Event()

    def drive():
        while engine.has_unfinished_requests():
            engine.step()
            step_ms.append(engine.last_step_stats().ms)
        stop.set()

    worker = threading.Thread(target=drive)
    gaps = []
    last = time.monotonic()
    worker.start()
    while not stop.is_set():
        now = time.monotonic()
        gaps.append(now - last)
        last = now
    worker.join()
    longest_step_s = max(step_ms) / 1e3
    assert longest_step_s > 0.05, "the workload must make a step long enough to measure"
    # Holding the GIL through a step would freeze this loop for the whole step.
    assert max(gaps) < 0.5 * longest_step_s, (max(gaps), step_ms)
