#!/usr/bin/python3
"""Reference renderings of the GLM-5.3 chat template, made with jinja2.

Renders every conversation of tests/chat/conversations.json the way Hugging Face
transformers' apply_chat_template does (ImmutableSandboxedEnvironment with
trim_blocks, lstrip_blocks and loopcontrols; tojson = json.dumps with
ensure_ascii=False and default separators; raise_exception global) and writes
tests/chat/refs.json.  With --fuzz N it also writes N seeded random
conversations with their renderings to tests/chat/fuzz_refs.json.

Two adjustments, both documented in docs/chat.md:
  * Generation prompt.  The public template copy adds a thinking switch to its
    last line; upstream always ends with <|assistant|><think>.  This script
    patches that one expression back to '<think>' (PATCH below) and checks that
    the unpatched file renders the same text for every conversation (no
    conversation passes `thinking` / `enable_thinking`).
  * Tool-call arguments given as JSON text are decoded with json.loads before
    rendering, as an OpenAI-compatible server (vLLM's chat_utils) does; the
    template itself needs a mapping.

Conversation format: {"name", "description", "messages", "options"}, options
holding tools, add_generation_prompt (default true), and template variables
(reasoning_effort, clear_thinking).

Usage: /usr/bin/python3 tests/chat/make_refs.py [--template PATH] [--fuzz N]
Needs python3-jinja2 (Debian).
"""

import argparse
import copy
import hashlib
import json
import os
import random
import sys

import jinja2
import jinja2.ext
import jinja2.sandbox

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
DEFAULT_TEMPLATE = os.path.join(ROOT, "..", "shared", "reference", "glm53-chat-template.jinja")

PATCH_FROM = "{{- '<think>' if thinking_enabled else '<think></think>' -}}"
PATCH_TO = "{{- '<think>' -}}"


def make_env():
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        # transformers' override of jinja's tojson (no HTML escaping)
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    env = jinja2.sandbox.ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    return env


def decode_arguments(messages):
    """JSON-text tool-call arguments become mappings, as vLLM does before templating."""
    messages = copy.deepcopy(messages)
    if not isinstance(messages, list):
        return messages
    for m in messages:
        if not isinstance(m, dict) or not isinstance(m.get("tool_calls"), list):
            continue
        for tc in m["tool_calls"]:
            if not isinstance(tc, dict):
                continue
            target = tc["function"] if tc.get("function") else tc
            if isinstance(target, dict) and isinstance(target.get("arguments"), str):
                target["arguments"] = json.loads(target["arguments"])
    return messages


def render(template, conv):
    options = dict(conv.get("options", {}))
    tools = options.pop("tools", None)
    add_generation_prompt = options.pop("add_generation_prompt", True)
    assert "thinking" not in options and "enable_thinking" not in options
    try:
        messages = decode_arguments(conv["messages"])
        prompt = template.render(messages=messages, tools=tools, documents=None,
                                 add_generation_prompt=add_generation_prompt, **options)
        return {"prompt": prompt}
    except Exception as e:  # the template raising is a reference outcome too
        return {"error": "%s: %s" % (type(e).__name__, e)}


def render_all(patched, unpatched, convs):
    out = []
    for conv in convs:
        ref = render(patched, conv)
        if render(unpatched, conv) != ref:
            sys.exit("patched and unpatched templates differ on %s" % conv["name"])
        out.append(dict({"name": conv["name"]}, **ref))
    return out


# ---------------------------------------------------------------------------
# Seeded random conversations: combinations the hand-written set does not list
# ---------------------------------------------------------------------------

TEXTS = ["hi", "", "  ", "\n", "Hello, world.", "日本語のテキスト", "emoji 👩‍💻 and ZWJ 👨‍👩‍👧", "tab\there",
         "<think>r</think>c", "a</think>b", "</think>", "<think>only open", "  padded  ", "\u3000wide\u3000",
         "quote \" and backslash \\", "line1\nline2", "<tool_call>fake</tool_call>", "e\u0301", "\u00a0nbsp\u00a0"]
IDS = ["a", "b", "c", "", None, 1, "a"]
NAMES = ["search", "get_weather", "calculate", "rare_tool", "nope"]


def rand_scalar(r):
    kind = r.randrange(9)
    if kind == 0:
        return r.choice(TEXTS)
    if kind == 1:
        return r.randint(-10**6, 10**6)
    if kind == 2:
        return r.choice([0.5, 1.0, -0.0, 1e16, 1e-7, 3.14159, 2.5e-300, 1.7976931348623157e308, 123456789.125])
    if kind == 3:
        return r.choice([True, False])
    if kind == 4:
        return None
    if kind == 5:
        return r.choice([2**53 + 1, -2**63, 10**20])
    if kind == 6:
        return r.uniform(-1e4, 1e4)
    return "".join(r.choice("abc xyz\"\\\n\t\u00e9\u4e2d😀") for _ in range(r.randrange(6)))


def rand_json(r, depth=0):
    if depth > 2 or r.random() < 0.5:
        return rand_scalar(r)
    if r.random() < 0.5:
        return [rand_json(r, depth + 1) for _ in range(r.randrange(4))]
    return {r.choice(["k", "z", "a", "é", "key with space", "m"]) + str(i): rand_json(r, depth + 1) for i in range(r.randrange(4))}


def rand_content(r):
    kind = r.randrange(10)
    if kind < 5:
        return r.choice(TEXTS)
    if kind < 8:
        parts = []
        for _ in range(r.randrange(4)):
            p = r.randrange(6)
            if p == 0:
                parts.append({"type": "text", "text": r.choice(TEXTS)})
            elif p == 1:
                parts.append({"type": r.choice(["image", "image_url", "video", "video_url", "input_audio", "audio", "file"])})
            elif p == 2:
                parts.append(r.choice(TEXTS))
            elif p == 3:
                parts.append({"type": "text", "text": rand_scalar(r)})
            else:
                parts.append({"type": "text", "text": r.choice(TEXTS)})
        return parts
    if kind == 8:
        return None
    return rand_scalar(r)


def rand_tool(r, name):
    props = {}
    for i in range(r.randrange(3)):
        props["p%d" % i] = {"type": r.choice(["string", "integer", "number", "boolean", "object", "array"]),
                            "description": r.choice(TEXTS)}
    fn = {"name": name, "description": r.choice(TEXTS),
          "parameters": {"type": "object", "properties": props, "required": list(props)[:1]}}
    if r.random() < 0.2:
        fn["strict"] = True
    if r.random() < 0.3:
        tool = {"name": name, "parameters": fn["parameters"]} if r.random() < 0.3 else fn
    else:
        tool = {"type": "function", "function": fn}
    if r.random() < 0.2:
        tool["defer_loading"] = r.choice([True, False, 1, 0])
    return tool


def rand_call(r):
    args = {("arg%d" % i): rand_json(r) for i in range(r.randrange(4))}
    if r.random() < 0.3:
        args = json.dumps(args, ensure_ascii=r.random() < 0.5)
    elif r.random() < 0.03:
        args = r.choice(["{bad", "[1]", "null"])  # the template raises
    name = r.choice(NAMES)
    cid = r.choice(IDS)
    if r.random() < 0.7:
        c = {"type": "function", "function": {"name": name, "arguments": args}}
    else:
        c = {"name": name, "arguments": args}
    if cid is not None:
        c["id"] = cid
    return c


def rand_tool_message(r, tools_given):
    m = {"role": "tool"}
    k = r.randrange(10)
    if k < 5:
        m["content"] = r.choice(TEXTS)
    elif k < 7:
        m["content"] = rand_content(r)
        if not isinstance(m["content"], (str, list, type(None))) and r.random() < 0.8:
            m["content"] = "scalar"  # truthy scalars and mappings make the template raise
    elif k < 9:
        m["content"] = [dict({"output": rand_content(r)}, **({"tool_call_id": r.choice(IDS)} if r.random() < 0.8 else {}))
                        for _ in range(1 + r.randrange(2))]
    elif tools_given or r.random() < 0.2:  # without tools the template raises
        m["content"] = [{"type": "tool_reference", "name": r.choice(NAMES)} for _ in range(1 + r.randrange(2))]
    else:
        m["content"] = "no tools"
    cid = r.choice(IDS)
    if cid is not None:
        m["tool_call_id" if r.random() < 0.8 else "id"] = cid
    return m


def rand_conversation(r, index):
    options = {}
    tools = None
    if r.random() < 0.5:
        tools = [rand_tool(r, n) for n in r.sample(NAMES[:4], r.randrange(1, 4))]
        options["tools"] = tools
    if r.random() < 0.5:
        options["reasoning_effort"] = r.choice(["low", "high", "max", "none", None])
    if r.random() < 0.5:
        options["clear_thinking"] = r.choice([True, False, None, 1, ""])
    if r.random() < 0.2:
        options["add_generation_prompt"] = False
    messages = []
    for _ in range(r.randrange(1, 9)):
        role = r.choice(["user", "user", "assistant", "assistant", "tool", "tool", "system", "developer"])
        if role == "assistant":
            m = {"role": "assistant", "content": rand_content(r)}
            if r.random() < 0.5:
                m["reasoning_content"] = r.choice(["", "reasoning", None, "multi\nline reasoning"])
            if r.random() < 0.5:
                m["tool_calls"] = [rand_call(r) for _ in range(r.randrange(4))]
            messages.append(m)
            if m.get("tool_calls") and r.random() < 0.7:
                for _ in range(r.randrange(1, 4)):
                    messages.append(rand_tool_message(r, tools))
        elif role == "tool":
            messages.append(rand_tool_message(r, tools))
        else:
            messages.append({"role": role, "content": rand_content(r)})
    return {"name": "fuzz_%04d" % index, "description": "seeded random conversation",
            "messages": messages, "options": options}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--template", default=DEFAULT_TEMPLATE)
    ap.add_argument("--conversations", default=os.path.join(HERE, "conversations.json"))
    ap.add_argument("--out", default=os.path.join(HERE, "refs.json"))
    ap.add_argument("--fuzz", type=int, default=0, help="also write N random conversations")
    ap.add_argument("--fuzz-seed", type=int, default=53)
    ap.add_argument("--fuzz-out", default=os.path.join(HERE, "fuzz_refs.json"))
    args = ap.parse_args()

    with open(args.template, encoding="utf-8") as f:
        source = f.read()
    if source.count(PATCH_FROM) != 1:
        sys.exit("generation-prompt expression not found exactly once; template changed?")
    env = make_env()
    unpatched = env.from_string(source)
    patched = env.from_string(source.replace(PATCH_FROM, PATCH_TO))
    header = {
        "template_sha256": hashlib.sha256(source.encode("utf-8")).hexdigest(),
        "jinja2": jinja2.__version__,
        "generation_prompt_patch": [PATCH_FROM, PATCH_TO],
    }

    with open(args.conversations, encoding="utf-8") as f:
        convs = json.load(f)
    names = [c["name"] for c in convs]
    if len(set(names)) != len(names):
        sys.exit("duplicate conversation names")
    refs = render_all(patched, unpatched, convs)
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(dict(header, refs=refs), f, ensure_ascii=False, indent=1)
        f.write("\n")
    errors = sum(1 for x in refs if "error" in x)
    print("%d conversations (%d expected errors) -> %s" % (len(refs), errors, args.out))

    if args.fuzz:
        r = random.Random(args.fuzz_seed)
        fconvs = [rand_conversation(r, i) for i in range(args.fuzz)]
        frefs = render_all(patched, unpatched, fconvs)
        for c, ref in zip(fconvs, frefs):
            c.update({k: v for k, v in ref.items() if k != "name"})
        with open(args.fuzz_out, "w", encoding="utf-8") as f:
            json.dump(dict(header, seed=args.fuzz_seed, conversations=fconvs), f, ensure_ascii=False)
            f.write("\n")
        ferr = sum(1 for x in frefs if "error" in x)
        print("%d random conversations (%d errors) -> %s" % (len(fconvs), ferr, args.fuzz_out))


if __name__ == "__main__":
    main()
