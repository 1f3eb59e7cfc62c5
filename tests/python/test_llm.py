"""LLM: generate() over prompt forms, per-prompt parameters and adapters, the progress
bar, and chat() through the model's chat template."""

import io

import pytest

from conftest import DEVICE, SQL_ANSWER, SQL_QUESTION, engine_kwargs, pirate_lora, sql_lora
from quiver import LLM, RequestOutput, SamplingParams
from quiver.entrypoints.progress import ProgressBar

GREEDY = SamplingParams(temperature=0, max_tokens=40)
SQL_USER = SQL_QUESTION[len("[user] "):-len(" [/user] [assistant]")]


def test_generate_keeps_input_order_and_prompt_forms(llm):
    ids = llm.get_tokenizer().encode(SQL_QUESTION)
    outs = llm.generate([SQL_QUESTION, {"prompt": SQL_QUESTION}, {"prompt_token_ids": ids}], GREEDY,
                        lora_request=sql_lora(), use_tqdm=False)
    assert all(isinstance(o, RequestOutput) and o.finished for o in outs)
    assert [o.outputs[0].text for o in outs] == [SQL_ANSWER] * 3
    assert outs[0].prompt == outs[1].prompt == SQL_QUESTION and outs[2].prompt is None
    assert outs[0].prompt_token_ids == outs[2].prompt_token_ids == ids
    assert ids[0] == 0, "text prompts get the BOS token"
    assert len({o.request_id for o in outs}) == 3
    assert outs[0].lora_request == sql_lora() and outs[0].outputs[0].lora_request == sql_lora()


def test_generate_per_prompt_params_and_adapters(llm):
    outs = llm.generate([SQL_QUESTION] * 3, [GREEDY, GREEDY, SamplingParams(temperature=0, max_tokens=3)],
                        lora_request=[sql_lora(), None, pirate_lora()], use_tqdm=False)
    assert outs[0].outputs[0].text == SQL_ANSWER
    assert outs[1].outputs[0].text != SQL_ANSWER and outs[1].lora_request is None
    assert len(outs[2].outputs[0].token_ids) == 3
    with pytest.raises(ValueError, match="sampling_params has 2 entries for 3 prompts"):
        llm.generate([SQL_QUESTION] * 3, [GREEDY, GREEDY], use_tqdm=False)
    with pytest.raises(ValueError, match="lora_request has 1 entries for 2 prompts"):
        llm.generate([SQL_QUESTION] * 2, GREEDY, lora_request=[sql_lora()], use_tqdm=False)
    with pytest.raises(TypeError, match="sampling_params"):
        llm.generate(SQL_QUESTION, {"temperature": 0}, use_tqdm=False)


def test_a_bad_prompt_raises_and_the_rest_is_aborted(llm):
    with pytest.raises(ValueError, match="exceeds the maximum context length"):
        llm.generate([SQL_QUESTION, {"prompt_token_ids": list(range(600))}], GREEDY, use_tqdm=False)
    assert not llm.llm_engine.has_unfinished_requests()
    with pytest.raises(ValueError, match="outside the vocabulary"):
        llm.generate({"prompt_token_ids": [0, 999999]}, GREEDY, use_tqdm=False)
    with pytest.raises(ValueError, match="exactly one of"):
        llm.generate({"prompt": "a", "prompt_token_ids": [1]}, GREEDY, use_tqdm=False)
    with pytest.raises(ValueError, match="unsupported keys"):
        llm.generate({"prompt": "a", "multi_modal_data": {}}, GREEDY, use_tqdm=False)


def test_progress_bar(llm, capsys):
    llm.generate([SQL_QUESTION] * 3, GREEDY, lora_request=sql_lora())
    err = capsys.readouterr().err
    assert "Processed prompts: 100%|" in err and "| 3/3 [" in err and "est. speed input:" in err
    llm.generate([SQL_QUESTION], GREEDY, use_tqdm=False)
    assert "Processed prompts" not in capsys.readouterr().err
    buf = io.StringIO()
    bar = ProgressBar(total=4, desc="d", file=buf)
    bar.update(1)
    bar.update(1)
    assert bar.line().startswith("d:  50%|████████████▌            | 2/4 [00:00<")
    bar.close()
    assert buf.getvalue().endswith("\n")


def test_use_tqdm_may_be_a_factory(llm):
    made = []

    class Bar:
        def __init__(self, total, desc):
            made.append(self)
            self.total, self.n, self.closed = total, 0, False

        def update(self, n=1):
            self.n += n

        def set_postfix_str(self, s, refresh=False):
            pass

        def close(self):
            self.closed = True

    llm.generate([SQL_QUESTION] * 2, GREEDY, use_tqdm=Bar)
    assert [(b.total, b.n, b.closed) for b in made] == [(2, 2, True)]


def test_chat_uses_the_chat_template(llm):
    messages = [{"role": "user", "content": SQL_USER}]
    out = llm.chat(messages, GREEDY, lora_request=sql_lora(), use_tqdm=False)[0]
    assert out.prompt == "<|bos|>" + SQL_QUESTION
    assert out.outputs[0].text == SQL_ANSWER
    # The template's BOS is not doubled by tokenization.
    assert out.prompt_token_ids == llm.get_tokenizer().encode(SQL_QUESTION)
    batch = llm.chat([messages, [{"role": "user", "content": "Tell me a fortune."}]], GREEDY, use_tqdm=False)
    assert len(batch) == 2 and batch[1].prompt == "<|bos|>[user] Tell me a fortune. [/user] [assistant]"
    custom = llm.chat(messages, GREEDY, use_tqdm=False, chat_template="{{ messages[0]['content'] }}!",
                      add_generation_prompt=False)[0]
    assert custom.prompt == SQL_USER + "!"
    with pytest.raises(ValueError, match="only the user and assistant roles"):
        llm.chat([{"role": "system", "content": "x"}], GREEDY, use_tqdm=False)
    with pytest.raises(ValueError, match="continue_final_message"):
        llm.chat(messages, GREEDY, continue_final_message=True)  # with add_generation_prompt


def test_chat_continues_the_final_message(llm):
    # The sql adapter's answer, begun by the caller: the model writes the rest of it.
    begun = " SELECT icao"
    messages = [{"role": "user", "content": SQL_USER}, {"role": "assistant", "content": begun}]
    out = llm.chat(messages, GREEDY, lora_request=sql_lora(), add_generation_prompt=False,
                   continue_final_message=True, use_tqdm=False)[0]
    assert out.prompt == "<|bos|>" + SQL_QUESTION + " " + begun
    assert begun + out.outputs[0].text == SQL_ANSWER
    rendered = llm.get_tokenizer().apply_chat_template(messages, tokenize=False, continue_final_message=True)
    assert rendered == out.prompt


def test_tokenizer(llm):
    tok = llm.get_tokenizer()
    assert tok is llm.llm_engine.get_tokenizer() and tok.vocab_size == 6144
    messages = [{"role": "user", "content": SQL_USER}]
    text = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert text == "<|bos|>" + SQL_QUESTION
    assert tok.apply_chat_template(messages, add_generation_prompt=True) == tok.encode(text, add_special_tokens=False)
    ids = tok.encode(SQL_QUESTION)
    assert ids[0] == 0 and tok.encode(SQL_QUESTION, add_special_tokens=False) == ids[1:]
    assert tok.decode(ids) == "<|bos|>" + SQL_QUESTION
    assert tok.decode(ids, skip_special_tokens=True) == SQL_QUESTION
    with pytest.raises(ValueError, match="1000000 is not in the vocabulary"):
        tok.decode([10**6])
    with pytest.raises(TypeError, match="conversation"):
        tok.apply_chat_template("hello")


@pytest.mark.skipif(DEVICE == "cuda", reason="tensor parallelism across GPUs needs several of them")
def test_tensor_parallel_ranks_give_the_same_answers(llm):
    """tensor_parallel_size=2 (vLLM's keyword): the demo's 6 heads and 2 KV heads split over
    two ranks, the adapters sliced with them; greedy answers and logprobs as one rank's."""
    params = SamplingParams(temperature=0, max_tokens=40, logprobs=2)
    split = LLM(**engine_kwargs(tensor_parallel_size=2, threads=2))
    prompts = [SQL_QUESTION] * 3
    loras = [sql_lora(), None, pirate_lora()]
    want = llm.generate(prompts, params, lora_request=loras, use_tqdm=False)
    got = split.generate(prompts, params, lora_request=loras, use_tqdm=False)
    assert got[0].outputs[0].text == SQL_ANSWER
    # The demo is bf16 and the CPU rounds its matmul inputs to bf16: one rank and two differ
    # like two bf16 runs, held to the 16-bit rule of docs/numerics.md (logprobs within 0.25,
    # a greedy token may differ only where one rank's top two are closer than that).
    bound = 0.25
    for w, g in zip(want, got):
        for tw, tg, lw, lg in zip(w.outputs[0].token_ids, g.outputs[0].token_ids, w.outputs[0].logprobs,
                                  g.outputs[0].logprobs):
            top = sorted((e.logprob for e in lw.values()), reverse=True)
            if tw != tg:
                assert top[0] - top[1] < bound
                break
            assert lg[tw].logprob == pytest.approx(lw[tw].logprob, abs=bound)
    with pytest.raises(ValueError, match="does not divide the model's 6 attention heads"):
        LLM(**engine_kwargs(tensor_parallel_size=4))


def _generation_config(folder, **fields):
    folder.mkdir(exist_ok=True)
    (folder / "generation_config.json").write_text(__import__("json").dumps(fields))
    return str(folder)


def test_default_sampling_params_come_from_the_generation_config(llm, tmp_path):
    # The demo's own generation_config.json sets no sampling field: vLLM's defaults.
    assert vars(llm.get_default_sampling_params()) == vars(SamplingParams())
    folder = _generation_config(tmp_path / "g", temperature=0.0, top_k=7, repetition_penalty=1.3,
                                max_new_tokens=5, do_sample=True)
    model = LLM(**engine_kwargs(generation_config=folder))
    p = model.get_default_sampling_params()
    assert (p.temperature, p.repetition_penalty, p.max_tokens) == (0.0, 1.3, 5)
    # generate() and chat() without sampling params use them; given params are taken as they are.
    want = model.generate(SQL_QUESTION, SamplingParams(temperature=0, repetition_penalty=1.3, max_tokens=5),
                          use_tqdm=False)[0].outputs[0]
    got = model.generate(SQL_QUESTION, use_tqdm=False)[0].outputs[0]
    assert got.token_ids == want.token_ids and len(got.token_ids) == 5
    plain = model.generate(SQL_QUESTION, SamplingParams(temperature=0, max_tokens=5), use_tqdm=False)[0].outputs[0]
    assert plain.token_ids == llm.generate(SQL_QUESTION, SamplingParams(temperature=0, max_tokens=5),
                                           use_tqdm=False)[0].outputs[0].token_ids
    chat = model.chat([{"role": "user", "content": SQL_USER}], use_tqdm=False)[0].outputs[0]
    assert len(chat.token_ids) == 5
    # override_generation_config goes over the file; "vllm" reads none.
    over = LLM(**engine_kwargs(generation_config=folder, override_generation_config={"max_new_tokens": 3,
                                                                                     "top_p": 0.5}))
    p = over.get_default_sampling_params()
    assert (p.temperature, p.max_tokens) == (0.0, 3)
    none = LLM(**engine_kwargs(generation_config="vllm", override_generation_config={"temperature": 0.5}))
    assert none.get_default_sampling_params().temperature == 0.5


def test_a_bad_generation_config_is_refused_by_name(tmp_path):
    with pytest.raises(ValueError, match="no generation_config.json"):
        LLM(**engine_kwargs(generation_config=str(tmp_path)))
    folder = _generation_config(tmp_path / "bad", top_k="many")
    with pytest.raises(ValueError, match="top_k"):
        LLM(**engine_kwargs(generation_config=folder))
    with pytest.raises(ValueError, match="override-generation-config.*temperature"):
        LLM(**engine_kwargs(override_generation_config={"temperature": "hot"}))
    with pytest.raises(TypeError, match="override_generation_config"):
        LLM(**engine_kwargs(override_generation_config=[("temperature", 0)]))


# tools and chat_template_kwargs reach the template as variables, and content given as
# OpenAI's text parts renders as the joined string, as through the server.
def test_chat_template_variables_and_content_parts(llm):
    template = ("{% for m in messages %}[{{ m['role'] }}] {{ m['content'] }}\n{% endfor %}"
                "{% if tools %}tools={{ tools | length }}\n{% endif %}{% if flag %}flag={{ flag }}\n{% endif %}")
    tok = llm.get_tokenizer()
    parts = [{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}]
    tools = [{"type": "function", "function": {"name": "f", "parameters": {}}}]
    text = tok.apply_chat_template(parts, tokenize=False, chat_template=template, tools=tools, flag="on")
    assert text == "[user] a\nb\ntools=1\nflag=on\n"
    assert tok.apply_chat_template([{"role": "user", "content": "a\nb"}], tokenize=False,
                                   chat_template=template) == "[user] a\nb\n"
    with pytest.raises(ValueError, match="only text content parts"):
        tok.apply_chat_template([{"role": "user", "content": [{"type": "image_url"}]}], chat_template=template)
    out = llm.chat(parts, SamplingParams(temperature=0, max_tokens=2), chat_template=template, tools=tools,
                   chat_template_kwargs={"flag": "on"}, use_tqdm=False)[0]
    assert out.prompt == text
    with pytest.raises(TypeError, match="chat_template_kwargs"):
        llm.chat(parts, chat_template_kwargs=["flag"], use_tqdm=False)


# What a template prints with tojson keeps the caller's key order, as in transformers; LLM.chat
# gives the template an assistant's tool call arguments as the object their JSON string holds
# (vLLM's chat rule), where apply_chat_template, as transformers', passes them as given.
def test_chat_keeps_key_order_and_tool_call_arguments_as_objects(llm):
    template = ("{{ tools | tojson }}|{% for m in messages %}{% if m.tool_calls %}"
                "{{ m.tool_calls[0].function | tojson }}{% endif %}{% endfor %}")
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    messages = [{"role": "user", "content": "hi"},
                {"role": "assistant", "content": None, "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"z": 1, "a": 2}'}}]}]
    tok = llm.get_tokenizer()
    tools_json = '[{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]'
    assert tok.apply_chat_template(messages, tokenize=False, chat_template=template, tools=tools) == (
        tools_json + '|{"name": "f", "arguments": "{\\"z\\": 1, \\"a\\": 2}"}')
    out = llm.chat(messages, SamplingParams(temperature=0, max_tokens=1), chat_template=template, tools=tools,
                   add_generation_prompt=False, use_tqdm=False)[0]
    assert out.prompt == tools_json + '|{"name": "f", "arguments": {"z": 1, "a": 2}}'
    messages[1]["tool_calls"][0]["function"]["arguments"] = "{z"
    with pytest.raises(ValueError, match=r"messages\[1\]\.tool_calls.*not valid JSON"):
        llm.chat(messages, chat_template=template, add_generation_prompt=False, use_tqdm=False)


# num_cached_tokens, as vLLM: the prompt tokens the prefix cache held when the request was
# first scheduled; the demo's block size is 16.
def test_num_cached_tokens_counts_prefix_cache_hits():
    model = LLM(**engine_kwargs(block_size=16))
    greedy = SamplingParams(temperature=0, max_tokens=2)
    first = model.generate(SQL_QUESTION, greedy, use_tqdm=False)[0]
    again = model.generate(SQL_QUESTION, greedy, use_tqdm=False)[0]
    assert first.num_cached_tokens == 0
    n = len(again.prompt_token_ids)
    assert 0 < again.num_cached_tokens < n and again.num_cached_tokens % 16 == 0
    assert again.num_cached_tokens >= (n - 1) // 16 * 16 - 16
    assert again.outputs[0].token_ids == first.outputs[0].token_ids
    off = LLM(**engine_kwargs(enable_prefix_caching=False))
    off.generate(SQL_QUESTION, greedy, use_tqdm=False)
    assert off.generate(SQL_QUESTION, greedy, use_tqdm=False)[0].num_cached_tokens == 0


def test_reset_prefix_cache():
    model = LLM(**engine_kwargs(block_size=16))
    greedy = SamplingParams(temperature=0, max_tokens=2)
    first = model.generate(SQL_QUESTION, greedy, use_tqdm=False)[0]
    assert model.generate(SQL_QUESTION, greedy, use_tqdm=False)[0].num_cached_tokens > 0
    engine = model.llm_engine
    engine.add_request("running", SQL_QUESTION, SamplingParams(max_tokens=4))
    engine.step()
    assert model.reset_prefix_cache() is False  # a request holds blocks: nothing changes
    while engine.has_unfinished_requests():
        engine.step()
    assert model.reset_prefix_cache() is True
    after = model.generate(SQL_QUESTION, greedy, use_tqdm=False)[0]
    assert after.num_cached_tokens == 0 and after.outputs[0].token_ids == first.outputs[0].token_ids
