"""Chat-template rendering for the training data (Python stdlib; jinja2 when installed).

Two renderers of GLM-5.3's chat template (training/chat_template.jinja, a copy of the model's template):

* render_jinja: the template itself through jinja2, configured as transformers configures it (the environment
  of tests/chat/make_refs.py). This is the renderer of record: train.py uses it whenever jinja2 imports.
* render_python: the same output for the message shapes training/data.py produces (user/system text, user
  content lists with text and image parts, assistant turns with reasoning, content and tool calls, runs of tool
  results), written out in Python. It is the fallback where jinja2 is missing; training/tests check it byte for
  byte against glm53's Lua renderer and jinja2.

Both return the prompt string; add_generation_prompt=True appends "<|assistant|><think>".
"""

import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
TEMPLATE_PATH = os.path.join(HERE, "chat_template.jinja")

TOOLS_HEADER = (
    "<|system|>\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n"
)
TOOLS_FOOTER = (
    "</tools>\n\nFor each function call, output the function name and arguments within the following XML format:\n"
    "<tool_call>{function-name}<arg_key>{arg-key-1}</arg_key><arg_value>{arg-value-1}</arg_value>"
    "<arg_key>{arg-key-2}</arg_key><arg_value>{arg-value-2}</arg_value>...</tool_call>"
)
IMAGE_SPAN = "<|begin_of_image|><|image|><|end_of_image|>"


def template_text():
    with open(TEMPLATE_PATH, encoding="utf-8") as f:
        return f.read()


_jinja_template = None


def jinja_available():
    try:
        import jinja2  # noqa: F401
    except ImportError:
        return False
    return True


def render_jinja(messages, tools=None, add_generation_prompt=True):
    global _jinja_template
    if _jinja_template is None:
        sys.path.insert(0, os.path.join(ROOT, "tests", "chat"))
        import make_refs  # the jinja2 environment transformers uses (trim/lstrip blocks, loopcontrols, tojson)

        _jinja_template = make_refs.make_env().from_string(template_text())
    return _jinja_template.render(messages=messages, tools=tools, documents=None,
                                  add_generation_prompt=add_generation_prompt)


# ----------------------------------------------------------------------------------------------------------
# The template in Python, for the shapes data.py produces
# ----------------------------------------------------------------------------------------------------------

def _visible(content):
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        out = []
        for part in content:
            if isinstance(part, str):
                out.append(part)
            elif part.get("type") == "text":
                out.append(part["text"])
            elif part.get("type") in ("image", "image_url"):
                out.append(IMAGE_SPAN)
            else:
                raise ValueError(f"render_python: unsupported content part {part!r}")
        return "".join(out)
    raise ValueError(f"render_python: unsupported content {content!r}")


def _tool_json(tool):
    if "function" in tool:
        tool = tool["function"]
    items = [f'"{k}": {json.dumps(v, ensure_ascii=False)}' for k, v in tool.items() if k not in ("defer_loading", "strict")]
    return "{" + ", ".join(items) + "}"


def _call_of(tc):
    return tc["function"] if tc.get("function") else tc


def _id_of(m):
    for k in ("tool_call_id", "id"):
        if m.get(k):
            return str(m[k])
    return ""


def _tool_block(messages, start):
    """'<|observation|>' and the <tool_response>s of the run of tool messages starting at `start`."""
    end = start
    while end + 1 < len(messages) and messages[end + 1].get("role") == "tool":
        end += 1
    block = messages[start:end + 1]
    calls = None
    if start > 0 and messages[start - 1].get("role") == "assistant" and messages[start - 1].get("tool_calls"):
        calls = messages[start - 1]["tool_calls"]
    ordered = block
    if calls:
        result_ids = [_id_of(m) for m in block]
        call_ids = [_id_of(c) for c in calls]
        if (all(result_ids) and all(call_ids) and len(set(result_ids)) == len(result_ids)
                and len(set(call_ids)) == len(call_ids) and set(result_ids) <= set(call_ids)):
            by_id = {_id_of(m): m for m in block}
            ordered = [by_id[c] for c in call_ids if c in by_id]
    for m in block:
        if not isinstance(m.get("content"), str):
            raise ValueError("render_python: tool results must be strings")
    return "<|observation|>" + "".join(f"<tool_response>{m['content']}</tool_response>" for m in ordered)


def _assistant(m):
    content = _visible(m.get("content"))
    reasoning = None
    if isinstance(m.get("reasoning_content"), str):
        reasoning = m["reasoning_content"]
    elif "</think>" in content:
        reasoning = content.split("</think>")[0].split("<think>")[-1]
        content = content.split("</think>")[-1]
    out = ["<|assistant|>", f"<think>{reasoning}</think>" if reasoning is not None else "<think></think>"]
    if content.strip():
        out.append(content.strip())
    for tc in m.get("tool_calls") or []:
        call = _call_of(tc)
        args = call["arguments"]
        if not isinstance(args, dict):
            raise ValueError("render_python: tool-call arguments must be a mapping")
        out.append("<tool_call>" + call["name"])
        for k, v in args.items():
            out.append(f"<arg_key>{k}</arg_key><arg_value>{v if isinstance(v, str) else json.dumps(v, ensure_ascii=False)}</arg_value>")
        out.append("</tool_call>")
    return "".join(out)


def render_python(messages, tools=None, add_generation_prompt=True):
    out = ["[gMASK]<sop><|system|>Reasoning Effort: Max"]
    if tools:
        out.append(TOOLS_HEADER)
        for tool in tools:
            t = tool["function"] if "function" in tool else tool
            if not t.get("defer_loading"):
                out.append(_tool_json(tool) + "\n")
        out.append(TOOLS_FOOTER)
    for i, m in enumerate(messages):
        role = m.get("role")
        if role == "user":
            out.append("<|user|>" + _visible(m.get("content")))
        elif role == "system":
            out.append("<|system|>" + _visible(m.get("content")))
        elif role == "assistant":
            out.append(_assistant(m))
        elif role == "tool":
            if i == 0 or messages[i - 1].get("role") != "tool":
                out.append(_tool_block(messages, i))
    if add_generation_prompt:
        out.append("<|assistant|><think>")
    return "".join(out)


def render(messages, tools=None, add_generation_prompt=True):
    """jinja2 when installed (the renderer of record), else the Python port."""
    if jinja_available():
        return render_jinja(messages, tools, add_generation_prompt)
    return render_python(messages, tools, add_generation_prompt)


def renderer_name():
    return "jinja2" if jinja_available() else "python"
