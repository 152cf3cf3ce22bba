#!/usr/bin/env python3
"""Writes the committed seed corpus of the fuzz targets (tests/fuzz/seeds/): a few small valid safetensors
files and config.json texts covering each dtype, FP8 + scale, metadata, empty and scalar tensors, and the
nested, flat and legacy config forms; tokenizer files of every supported shape, some unsupported and corrupt
ones; and chat conversations (tests/chat/conversations.json) plus random generator input. The regress_* seeds
are inputs fuzzing found, kept as they were. Rerun after changing it: python3 tests/fuzz/gen_seeds.py"""
import json
import random
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
SIZES = {"F32": 4, "BF16": 2, "F16": 2, "F8_E4M3": 1, "I32": 4, "I64": 8, "F64": 8}


def safetensors(tensors, metadata=None):
    """tensors: list of (name, dtype, shape); data bytes are a counting pattern."""
    header, offset = {}, 0
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, dtype, shape in tensors:
        n = SIZES[dtype]
        for d in shape:
            n *= d
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + n]}
        offset += n
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + bytes(i % 251 for i in range(offset))


def write(sub, name, data):
    os.makedirs(os.path.join(HERE, "seeds", sub), exist_ok=True)
    with open(os.path.join(HERE, "seeds", sub, name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


write("safetensors", "f32_bf16.safetensors",
      safetensors([("model.embed.weight", "BF16", [4, 3]), ("model.norm.weight", "F32", [3])],
                  {"format": "pt"}))
write("safetensors", "fp8_scale.safetensors",
      safetensors([("l.0.mlp.down_proj.weight_scale_inv", "F32", [1, 2]),
                   ("l.0.mlp.down_proj.weight", "F8_E4M3", [3, 5])]))
write("safetensors", "all_dtypes.safetensors",
      safetensors([("a", "F64", [2]), ("b", "I64", [1, 1]), ("c", "I32", [2, 1, 1]), ("d", "F16", [1, 1, 1, 2]),
                   ("e", "F32", []), ("f", "BF16", [0, 7])], {}))

L = 8
write("config", "nested.json", json.dumps({
    "model_type": "glm5_next", "image_token_id": 9, "tie_word_embeddings": False,
    "quantization_config": {"quant_method": "fp8", "fmt": "e4m3", "weight_block_size": [128, 128]},
    "vision_config": {"model_type": "glm5_next_vision", "depth": 2, "hidden_size": 64, "num_heads": 4,
                      "patch_size": [14, 14], "out_hidden_size": 32},
    "text_config": {"model_type": "glm5_next_text", "num_hidden_layers": L, "hidden_size": 32,
                    "index_topk": 8, "index_kpool": 4, "scoring_func": "sigmoid", "topk_method": "noaux_tc",
                    "num_nextn_predict_layers": 1, "linear_lower_bound": -5.0,
                    "layer_types": ["full_attention" if i % 4 == 3 else "linear_attention" for i in range(L)],
                    "mlp_layer_types": ["dense"] * 3 + ["sparse"] * (L - 3),
                    "indexer_types": ["full"] * L}}))
write("config", "flat.json", json.dumps({
    "model_type": "glm5_next_text", "num_hidden_layers": 4, "num_local_experts": 8, "pad_token_id": None,
    "first_k_dense_replace": 1, "index_topk_pattern": "FSFF"}))
write("config", "legacy.json", json.dumps({
    "num_hidden_layers": 6, "index_topk_freq": 2, "index_skip_topk_offset": 2,
    "linear_attn_config": {"num_heads": 4, "head_dim": 8, "short_conv_kernel_size": 3, "gate_lower_bound": None,
                           "safe_gate": False, "kda_layers": [0, 2, 3, 5], "full_attn_layers": [1, 4]}}))

# ---- tokenizer: tokenizer.json shapes (every supported pre-tokenizer / normalizer / decoder form, some
# unsupported ones), tiktoken rank files, corrupt variants; plus models/tiny/tokenizer.json copied as it is.


def byte_spelling(b):
    """GPT-2's bytes_to_unicode."""
    printable = 33 <= b <= 126 or 0xA1 <= b <= 0xAC or 0xAE <= b <= 0xFF
    if printable:
        return chr(b)
    return chr(256 + sum(1 for k in range(b) if not (33 <= k <= 126 or 0xA1 <= k <= 0xAC or 0xAE <= k <= 0xFF)))


GLM_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
             r"\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN_SPLIT = GLM_SPLIT.replace(r"\p{N}{1,3}", r"\p{N}")
DIGITS_SPLIT = r"\p{N}{1,3}"
CJK_SPLIT = r"[一-龥぀-ゟ゠-ヿ]+"


def split(regex, behavior="Isolated", invert=False):
    return {"type": "Split", "pattern": {"Regex": regex}, "behavior": behavior, "invert": invert}


def byte_level(use_regex, add_prefix_space=False):
    return {"type": "ByteLevel", "add_prefix_space": add_prefix_space, "trim_offsets": True, "use_regex": use_regex}


def tokenizer_json(pre, normalizer=None, decoder=None, all_bytes=True, ignore_merges=False, pair_merges=False,
                   added=None, model_extra=None):
    byte_range = range(256) if all_bytes else [ord(c) for c in " abcdehlorw<>|"]
    vocab = {byte_spelling(b): i for i, b in enumerate(byte_range)}
    words = ["ab", "abab", "\u0120ab", "he", "ll", "hell", "hello", "\u0120w", "or", "\u0120wor"]
    merges = [("a", "b"), ("ab", "ab"), ("\u0120", "ab"), ("h", "e"), ("l", "l"), ("he", "ll"), ("hell", "o"),
              ("\u0120", "w"), ("o", "r"), ("\u0120w", "or")]
    for w in words:
        vocab[w] = len(vocab)
    model = {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
             "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": ignore_merges,
             "vocab": vocab, "merges": [list(m) if pair_merges else " ".join(m) for m in merges]}
    model.update(model_extra or {})
    if added is None:
        added = [{"content": "<|user|>", "special": True}, {"content": "<think>", "special": False}]
    added_tokens = []
    for k, a in enumerate(added):
        t = {"id": len(vocab) + k, "content": a["content"], "single_word": False, "lstrip": False, "rstrip": False,
             "normalized": False, "special": False}
        t.update(a)
        added_tokens.append(t)
    return json.dumps({"version": "1.0", "truncation": None, "padding": None, "added_tokens": added_tokens,
                       "normalizer": normalizer, "pre_tokenizer": pre, "post_processor": None,
                       "decoder": decoder if decoder is not None else byte_level(True), "model": model},
                      ensure_ascii=False, separators=(",", ":"))


def glm_pre(*first):
    return {"type": "Sequence", "pretokenizers": [*first, split(GLM_SPLIT), byte_level(False)]}


TOK = {
    # supported shapes
    "glm_split_bytelevel.json": tokenizer_json(glm_pre(), ignore_merges=True),
    "gpt2_bytelevel_regex.json": tokenizer_json(byte_level(True), pair_merges=True),
    "qwen_nfc.json": tokenizer_json({"type": "Sequence", "pretokenizers": [split(QWEN_SPLIT), byte_level(False)]},
                                    normalizer={"type": "NFC"}, all_bytes=False),
    "deepseek_splits.json": tokenizer_json(glm_pre(split(DIGITS_SPLIT), split(CJK_SPLIT)),
                                           normalizer={"type": "Sequence", "normalizers": [{"type": "NFC"}]},
                                           all_bytes=False),
    "nested_sequence.json": tokenizer_json({"type": "Sequence", "pretokenizers": [
        {"type": "Sequence", "pretokenizers": [split(r"\s+|[^\s]+")]}, byte_level(True)]},
        normalizer={"type": "Sequence", "normalizers": []}, all_bytes=False),
    "added_flags.json": tokenizer_json(glm_pre(), all_bytes=False, added=[
        {"content": "<|user|>", "special": True, "lstrip": True},
        {"content": "<|user|>x", "special": True, "rstrip": True},
        {"content": "hello", "single_word": True},
        {"content": "caf\u00e9", "normalized": True},
        {"content": "ab"},
        {"content": ""},
        {"content": "<think>", "id": 9}]),
    # unsupported shapes
    "bad_whitespace_pre.json": tokenizer_json({"type": "Whitespace"}, all_bytes=False),
    "bad_metaspace.json": tokenizer_json({"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always"},
                                         decoder={"type": "Metaspace"}, all_bytes=False),
    "bad_split_removed.json": tokenizer_json(glm_pre(split(r"\d", "Removed")), all_bytes=False),
    "bad_split_invert.json": tokenizer_json(glm_pre(split(r"\d", invert=True)), all_bytes=False),
    "bad_prefix_space.json": tokenizer_json(byte_level(True, True), all_bytes=False),
    "bad_lowercase.json": tokenizer_json(glm_pre(), normalizer={"type": "Lowercase"}, all_bytes=False),
    "bad_wordpiece_decoder.json": tokenizer_json(glm_pre(), decoder={"type": "WordPiece", "prefix": "##"},
                                                 all_bytes=False),
    "bad_byte_fallback.json": tokenizer_json(glm_pre(), model_extra={"byte_fallback": True, "unk_token": "<unk>"},
                                             all_bytes=False),
    "bad_bytelevel_first.json": tokenizer_json({"type": "Sequence", "pretokenizers": [byte_level(False),
                                                                                       split(GLM_SPLIT)]},
                                               all_bytes=False),
}
for name, text in TOK.items():
    write("tokenizer", name, text)
good = TOK["glm_split_bytelevel.json"]
write("tokenizer", "corrupt_truncated.json", good[: len(good) * 2 // 3])
write("tokenizer", "corrupt_escapes.json",
      TOK["bad_lowercase.json"].replace('"ab"', '"a\\ud800b"', 1).replace('"he"', '"\\u00"', 1))
write("tokenizer", "corrupt_bad_utf8.json", TOK["qwen_nfc.json"].encode().replace(b'"ll"', b'"l\xc3"', 1))
write("tokenizer", "corrupt_deep.json", '{"a":' * 130 + "1" + "}" * 130)
b64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
write("tokenizer", "tiktoken.tiktoken",
      "".join(f"{b64[c >> 2]}{b64[(c & 3) << 4]}== {c}\n" for c in range(256)) + "YWI= 256\nY2Q= 257\nYWJjZA== 258\n")
write("tokenizer", "tiktoken_bad.tiktoken", "YWI= 1\nYWI= 2\n!!!! x\n")
with open(os.path.join(HERE, "..", "..", "models", "tiny", "tokenizer.json"), "rb") as f:
    write("tokenizer", "tiny_model.json", f.read())

# ---- chat: tests/chat/conversations.json in the driver's JSON-text form (mode byte 0, messages JSON, NUL, tools
# JSON, NUL, option bytes as tests/fuzz/fuzz_chat.lua's G:options reads them), and random bytes for the generator
# (modes 1-3).
EFFORTS = ["low", "high", "max", "medium", "LOW", "", "High"]
CLEAR = [True, False, None, 0, 1, "", "no"]
AGP = [False, True, None, 0, "", "yes"]


def option_bytes(options):
    flags, rest = 0, b""
    for bit, (key, values) in enumerate([("reasoning_effort", EFFORTS), ("clear_thinking", CLEAR),
                                         ("add_generation_prompt", AGP)]):
        index = [i for i, v in enumerate(values) if key in options and type(v) is type(options[key])
                 and v == options[key]]
        if index:
            flags |= 1 << bit
            rest += bytes(index[:1])
    return bytes([flags]) + rest


with open(os.path.join(HERE, "..", "chat", "conversations.json"), encoding="utf-8") as f:
    conversations = json.load(f)
for conv in conversations:
    tools = conv["options"].get("tools")
    data = (b"\0" + json.dumps(conv["messages"], ensure_ascii=False).encode() + b"\0" +
            (json.dumps(tools, ensure_ascii=False).encode() if tools is not None else b"") + b"\0" +
            option_bytes(conv["options"]))
    write("chat", "conv_" + conv["name"], data)
rng = random.Random(53)
for k in range(8):
    n = [256, 512, 1024, 2048, 4096][k % 5]
    write("chat", f"gen_{k}", bytes([1 + k % 3]) + bytes(rng.randrange(256) for _ in range(n)))
