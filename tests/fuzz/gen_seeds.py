#!/usr/bin/env python3
"""Writes the committed seed corpus of the fuzz targets (tests/fuzz/seeds/): a few small valid safetensors
files and config.json texts covering each dtype, FP8 + scale, metadata, empty and scalar tensors, and the
nested, flat and legacy config forms. Rerun after changing it: python3 tests/fuzz/gen_seeds.py"""
import json
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
