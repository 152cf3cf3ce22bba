"""training/chat.py's Python renderer against glm53's Lua renderer (byte-equal to jinja2) and jinja2 itself."""

import unittest

import helpers
import chat
import data as D


def sample():
    """(name, messages, tools, add_generation_prompt): whole conversations and eval prompts of every family."""
    out = []
    for fam in D.FAMILIES:
        for split, n in (("train", 30), ("heldout", 10)):
            for i in range(n):
                opts = {"tokens": 300} if fam == "retrieval" else {}
                it = D.make_item(fam, split, i, **opts)
                out.append((it["id"] + "/full", it["messages"], it["tools"], False))
                out.append((it["id"] + "/prompt", D.prompt_messages(it), it["tools"], True))
    return out


class TestRenderer(unittest.TestCase):
    @unittest.skipUnless(helpers.LUAJIT and helpers.has_cjson(), "needs luajit with lua-cjson")
    def test_python_equals_lua(self):
        cases = sample()
        payload = [dict(messages=m, tools=t, add_generation_prompt=g) if t else
                   dict(messages=m, add_generation_prompt=g) for _, m, t, g in cases]
        got = helpers.lua_json("training/render_chat.lua", payload)
        self.assertEqual(len(got), len(cases))
        for (name, m, t, g), r in zip(cases, got):
            self.assertNotIn("error", r, name)
            self.assertEqual(chat.render_python(m, t, g), r["text"], name)

    @unittest.skipUnless(chat.jinja_available(), "needs jinja2")
    def test_python_equals_jinja2(self):
        for name, m, t, g in sample():
            self.assertEqual(chat.render_python(m, t, g), chat.render_jinja(m, t, g), name)

    def test_template_copy_is_the_models(self):
        import os

        with open(os.path.join(helpers.TRAINING, "tokenizer", "tokenizer_config.json")) as f:
            import json

            self.assertEqual(json.load(f)["chat_template"], chat.template_text())


class TestSpans(unittest.TestCase):
    def test_spans_cover_assistant_turns_and_end_tokens(self):
        for fam in D.FAMILIES:
            for i in range(40):
                it = D.make_item(fam, "train", i)
                text, spans = D.training_text(it, chat.render_python)
                n_assistant = sum(1 for m in it["messages"] if m["role"] == "assistant")
                self.assertEqual(len(spans), n_assistant, it["id"])
                for s, e in spans:
                    self.assertEqual(text[s - len("<|assistant|><think>"):s], "<|assistant|><think>")
                    self.assertTrue(text[s:e].endswith(("<|endoftext|>", "<|observation|>")), it["id"])
                    self.assertIn("</think>", text[s:e])
                self.assertEqual(spans[-1][1], len(text))
                # the prompt part renders the same as the eval prompt with the generation prompt
                prompt = chat.render_python(D.prompt_messages(it), it["tools"], True)
                self.assertEqual(text[:spans[-1][0]], prompt, it["id"])


if __name__ == "__main__":
    unittest.main()
