#!/usr/bin/env python3
"""Renders every chat template in tests/fixtures/chat_templates/*.jinja with every
conversation in tests/fixtures/chat_conversations.jsonl (add_generation_prompt false
and true) and writes the reference outputs to tests/fixtures/chat_expected/<name>.jsonl,
which tests/e2e/test_chat_templates.cc compares quiver's ChatTemplate against.

Renderer: transformers' own `render_jinja_template` (what apply_chat_template calls)
when transformers is importable; otherwise a jinja2 environment built exactly as
transformers' `_compile_jinja_template` builds it (ImmutableSandboxedEnvironment,
trim_blocks, lstrip_blocks, loopcontrols, tojson override, raise_exception and
strftime_now globals). The first line of each output file records which was used.
When transformers and tokenizers are both present, the script also renders through
PreTrainedTokenizerFast.apply_chat_template and reports any difference.

Context per render, as apply_chat_template builds it: messages, tools (None unless
the conversation has some), documents=None, add_generation_prompt, the template's
special tokens (special_tokens.json) and the conversation's "variables".

Usage: python3 tools/make_chat_fixtures.py [--repo DIR]   (no network needed)
"""
import argparse
import json
import pathlib
import sys


def jinja2_renderer():
    import datetime
    import jinja2
    import jinja2.ext
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(fmt):
        return datetime.datetime.now().strftime(fmt)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now

    def render(source, messages, tools, add_generation_prompt, variables):
        return env.from_string(source).render(
            messages=messages, tools=tools, documents=None, add_generation_prompt=add_generation_prompt, **variables
        )

    return render, "jinja2 %s with transformers' _compile_jinja_template settings" % jinja2.__version__


def transformers_renderer():
    import transformers
    from transformers.utils.chat_template_utils import render_jinja_template

    def render(source, messages, tools, add_generation_prompt, variables):
        rendered, _ = render_jinja_template(
            conversations=[messages],
            tools=tools,
            documents=None,
            chat_template=source,
            add_generation_prompt=add_generation_prompt,
            **variables,
        )
        return rendered[0]

    return render, "transformers %s render_jinja_template" % transformers.__version__


def tokenizer_renderer(special_tokens):
    """apply_chat_template through a real (tiny, untrained) fast tokenizer object."""
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast

    def render(source, messages, tools, add_generation_prompt, variables):
        tok = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.BPE()), **special_tokens)
        tok.chat_template = source
        extra = {k: v for k, v in variables.items() if k not in special_tokens}
        return tok.apply_chat_template(
            messages, tools=tools, add_generation_prompt=add_generation_prompt, tokenize=False, **extra
        )

    return render


def error_record(e):
    import jinja2

    # raise_exception raises a bare TemplateError; its message is the template's text.
    kind = "raise_exception" if type(e) is jinja2.exceptions.TemplateError else type(e).__name__
    return {"error": str(e), "error_kind": kind}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--repo", default=str(pathlib.Path(__file__).resolve().parent.parent))
    args = parser.parse_args()
    repo = pathlib.Path(args.repo)
    fixtures = repo / "tests" / "fixtures"
    conversations = [json.loads(l) for l in (fixtures / "chat_conversations.jsonl").read_text().splitlines() if l.strip()]
    special = json.loads((fixtures / "chat_templates" / "special_tokens.json").read_text())

    try:
        render, renderer_name = transformers_renderer()
    except ImportError as e:
        print("transformers not importable (%s); using plain jinja2" % e, file=sys.stderr)
        render, renderer_name = jinja2_renderer()
    print("renderer:", renderer_name)

    out_dir = fixtures / "chat_expected"
    out_dir.mkdir(exist_ok=True)
    mismatches = 0
    for path in sorted((fixtures / "chat_templates").glob("*.jinja")):
        name = path.stem
        source = path.read_text()
        tokens = special.get(name, {})
        try:
            via_tokenizer = tokenizer_renderer(tokens)
        except ImportError:
            via_tokenizer = None
        lines = [json.dumps({"meta": {"template": path.name, "renderer": renderer_name, "special_tokens": tokens}})]
        for conv in conversations:
            variables = dict(tokens)
            variables.update(conv.get("variables", {}))
            for agp in (False, True):
                record = {"id": conv["id"], "add_generation_prompt": agp}
                try:
                    record["output"] = render(source, conv["messages"], conv.get("tools"), agp, variables)
                except Exception as e:  # noqa: BLE001 - every failure is part of the fixture
                    record.update(error_record(e))
                if via_tokenizer is not None and "output" in record:
                    try:
                        other = via_tokenizer(source, conv["messages"], conv.get("tools"), agp, variables)
                        if other != record["output"]:
                            mismatches += 1
                            print("apply_chat_template differs for %s/%s agp=%s" % (name, conv["id"], agp))
                    except Exception as e:  # noqa: BLE001
                        print("apply_chat_template failed for %s/%s: %s" % (name, conv["id"], e))
                lines.append(json.dumps(record, ensure_ascii=False))
        (out_dir / (name + ".jsonl")).write_text("\n".join(lines) + "\n")
        print("wrote", out_dir / (name + ".jsonl"), len(lines) - 1, "renders")
    if mismatches:
        print(mismatches, "renders differ between render_jinja_template and apply_chat_template")


if __name__ == "__main__":
    main()
