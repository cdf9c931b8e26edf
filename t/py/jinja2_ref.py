#!/usr/bin/python3
"""jinja2_ref.py: chat templates rendered by Python's jinja2 configured as
transformers' apply_chat_template configures it, the reference that
t/31-chat-jinja2.t compares pagedllm's interpreter with.

    python3 jinja2_ref.py tokenizer_config.json < conversations

Reads the JSON lines pagedllm-tokenize --chat reads (an array of messages,
or an object with "messages", "add_generation_prompt" and other template
variables) and prints one JSON value a line: the rendered prompt, or null
when the template refuses the conversation (raise_exception, a type
error, anything the sandbox forbids).  A config with named templates
renders with its "tool_use" one when the conversation gives tools and its
"default" one otherwise, as transformers picks.
"""

import json
import sys
from datetime import datetime

from jinja2.exceptions import TemplateError
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment


def raise_exception(message):
    raise TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None,
           sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent,
                      separators=separators, sort_keys=sort_keys)


def strftime_now(fmt):
    return datetime.now().strftime(fmt)


def token_text(t):
    return t.get("content") if isinstance(t, dict) else t


def named_templates(chat_template):
    if isinstance(chat_template, str):
        return {"default": chat_template}
    return {t["name"]: t["template"] for t in chat_template}


def main():
    with open(sys.argv[1], encoding="utf-8") as f:
        cfg = json.load(f)
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    templates = {name: env.from_string(src) for name, src
                 in named_templates(cfg["chat_template"]).items()}
    for line in sys.stdin:
        if not line.strip():
            continue
        conv = json.loads(line)
        ctx = dict(conv) if isinstance(conv, dict) else {"messages": conv}
        template = templates["default"]
        if ctx.get("tools") is not None and "tool_use" in templates:
            template = templates["tool_use"]
        ctx["add_generation_prompt"] = bool(
            isinstance(conv, dict) and conv.get("add_generation_prompt"))
        ctx["bos_token"] = token_text(cfg.get("bos_token")) or ""
        ctx["eos_token"] = token_text(cfg.get("eos_token")) or ""
        try:
            out = template.render(**ctx)
        except Exception:  # every refusal prints null, whatever its kind
            out = None
        print(json.dumps(out, ensure_ascii=False))


main()
