"""Per-adapter tokenizers through the Python package: get_tokenizer(lora_request), generate
with a text prompt on an adapter that adds tokens, logprob token text of generated new ids,
and chat() rendered with the adapter's template. Folders as tests/server/adapter_tokenizer.py
builds them: llama_vocab's weights with a 512-id tokenizer; adapters "own" (tokenizer.json),
"hf" (vLLM's sql-lora layout) and "tt" (no tokenizer files)."""

import importlib.util
import os

import pytest

from conftest import DEVICE, ROOT

_spec = importlib.util.spec_from_file_location("adapter_tokenizer_folders",
                                               os.path.join(ROOT, "tests/server/adapter_tokenizer.py"))
folders = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(folders)

TEXT = folders.TEXT
NEW_ID_PROMPT = folders.NEW_ID_PROMPT


@pytest.fixture(scope="module")
def setup(tmp_path_factory, device_available):
    from quiver import LLM
    root = str(tmp_path_factory.mktemp("adapter_tokenizer"))
    base = folders.build(root)
    llm = LLM(base, enable_lora=True, max_loras=3, max_lora_rank=8, device=DEVICE)
    return llm, root


def lora(root, name, lora_id):
    from quiver.lora.request import LoRARequest
    return LoRARequest(name, lora_id, os.path.join(root, name))


def test_get_tokenizer_of_an_adapter(setup):
    llm, root = setup
    base = llm.get_tokenizer()
    own = llm.get_tokenizer(lora(root, "own", 1))
    hf = llm.get_tokenizer(lora(root, "hf", 2))
    tt = llm.get_tokenizer(lora(root, "tt", 3))
    assert own.encode(TEXT)[:2] == [1, 512] and own.encode(TEXT)[-1] == 513
    assert hf.encode(TEXT) == own.encode(TEXT)
    assert all(t < 512 for t in base.encode(TEXT))
    assert tt.encode(TEXT) == base.encode(TEXT)
    assert own.decode([512, 515]) == "[user][/assistant]"
    assert own.vocab_size == len(own) == 516 and base.vocab_size == 512
    # Cached per adapter, like the base model's.
    assert llm.get_tokenizer(lora(root, "own", 1)) is own and llm.get_tokenizer() is base
    assert llm.llm_engine.get_tokenizer(lora(root, "own", 1)) is own
    chat = [{"role": "user", "content": "hi"}]
    assert own.apply_chat_template(chat, tokenize=False, add_generation_prompt=True) == "[user] hi [/user] [assistant]"
    assert base.apply_chat_template(chat, tokenize=False).startswith("<s>[INST] hi")


def test_generate_text_prompt_on_the_adapter(setup):
    from quiver import SamplingParams
    llm, root = setup
    params = SamplingParams(max_tokens=3, temperature=0)
    outs = llm.generate([TEXT, TEXT], params, lora_request=[lora(root, "own", 1), None], use_tqdm=False)
    assert outs[0].prompt_token_ids == llm.get_tokenizer(lora(root, "own", 1)).encode(TEXT)
    assert outs[1].prompt_token_ids == llm.get_tokenizer().encode(TEXT)
    assert 512 in outs[0].prompt_token_ids and 512 not in outs[1].prompt_token_ids
    assert outs[0].prompt == TEXT


def test_generated_new_ids_have_their_text(setup):
    from quiver import SamplingParams
    llm, root = setup
    out = llm.generate({"prompt_token_ids": NEW_ID_PROMPT}, SamplingParams(max_tokens=3, temperature=0, logprobs=1),
                       lora_request=lora(root, "hf", 2), use_tqdm=False)[0].outputs[0]
    assert out.token_ids[0] == 513
    assert out.text.startswith("[/user]") and out.text.endswith("[/user]")
    assert out.logprobs[0][513].decoded_token == "[/user]"
    stopped = llm.generate({"prompt_token_ids": NEW_ID_PROMPT}, SamplingParams(max_tokens=3, temperature=0,
                                                                                stop=["[/user]"]),
                           lora_request=lora(root, "hf", 2), use_tqdm=False)[0].outputs[0]
    assert stopped.finish_reason == "stop" and stopped.stop_reason == "[/user]" and stopped.token_ids == [513]


def test_chat_renders_with_the_adapters_template(setup):
    from quiver import SamplingParams
    llm, root = setup
    messages = [{"role": "user", "content": "list users"}]
    params = SamplingParams(max_tokens=2, temperature=0)
    own, base = llm.chat([messages, messages], params, lora_request=[lora(root, "own", 1), None], use_tqdm=False)
    assert own.prompt == "[user] list users [/user] [assistant]"
    assert own.prompt_token_ids[0] == 512 and own.prompt_token_ids[-1] == 514
    assert base.prompt.startswith("<s>[INST] list users") and base.prompt_token_ids[0] == 1


def test_a_refused_request_does_not_register_its_adapter(setup):
    from quiver import SamplingParams
    from quiver.lora.request import LoRARequest
    llm, root = setup
    fresh = LoRARequest("fresh", 99, os.path.join(root, "own"))
    with pytest.raises(ValueError, match="maximum context length"):
        llm.llm_engine.add_request("too-long", {"prompt_token_ids": [5] * 250}, SamplingParams(max_tokens=10),
                                   lora_request=fresh)
    assert 99 not in llm.llm_engine.list_loras()
    assert not llm.llm_engine.has_unfinished_requests()
    out = llm.generate(TEXT, SamplingParams(max_tokens=1), lora_request=fresh, use_tqdm=False)[0]
    assert out.prompt_token_ids[1] == 512 and 99 in llm.llm_engine.list_loras()


def test_the_sql_lora_layout_as_committed_gives_hfs_text(device_available):
    """The committed llama_vocab fixture as it is, vocab_added laid out as vLLM's sql-lora adapter
    (adapter_model.bin, added_tokens.json, new_embeddings.safetensors, tokenizer_config.json
    without tokenizer.json): LLM.generate of its text requests, batched with the other
    vocabulary adapters and the base model, gives HF's greedy output text."""
    import json
    from quiver import LLM, SamplingParams
    from quiver.lora.request import LoRARequest
    model = os.path.join(ROOT, "tests/fixtures/llama_vocab")
    read = lambda name: [json.loads(line) for line in open(os.path.join(model, name)) if line.strip()]
    expected = {e["id"]: e for e in read("expected.jsonl")}
    texts = [r for r in read("requests.jsonl") if "prompt" in r]
    names = sorted({r["lora"] for r in texts if r["lora"]})
    llm = LLM(model, enable_lora=True, max_loras=len(names), max_lora_rank=8, device=DEVICE)
    loras = {n: LoRARequest(n, i + 1, os.path.join(model, "adapters", n)) for i, n in enumerate(names)}
    params = SamplingParams(temperature=0, max_tokens=12, ignore_eos=True)
    outs = llm.generate([r["prompt"] for r in texts], params, lora_request=[loras.get(r["lora"]) for r in texts])
    assert "vocab_added" in names and len(texts) >= 8
    for r, out in zip(texts, outs):
        assert out.outputs[0].text == expected[r["id"]]["text"], r["id"]
        assert list(out.prompt_token_ids) == expected[r["id"]]["prompt_token_ids"], r["id"]
