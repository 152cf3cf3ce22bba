--[[
glm53.generation.defaults - what a checkpoint directory says about generating from it: the token ids that end
the model's turn (where generation stops by default) and the sampling defaults of generation_config.json.

    local defaults = require("glm53.generation.defaults")
    local tok = assert(require("glm53.engine.tokenizer").load("models/glm53-tiny/tokenizer.json"))
    local ids, source = assert(defaults.eos_ids("models/glm53-tiny", tok))
    -- { 2256, 2263, 2265 }, "generation_config.json"; models/tiny names none there, so its ids are { 768, 775, 777 },
    -- "the tokenizer's end tokens (<|endoftext|>, <|user|>, <|observation|>)"
    local sampling = assert(defaults.sampling("models/glm53-tiny"))   -- {} here; GLM-5.3: temperature 1, top_p 0.95

End tokens, in this order (the first that names any id wins):
  1. generation_config.json `eos_token_id` (a number or a list), as transformers' generate reads it;
  2. config.json `eos_token_id`, at the top level, then in text_config;
  3. the tokenizer's end tokens, the ones GLM-5.3's own generation_config.json lists: <|endoftext|> (154820),
     <|user|> (154827: the model hands the turn back) and <|observation|> (154829: it waits for a tool result).
     Checkpoints written by transformers' save_pretrained from a bare config (the bundled tiny model among them)
     have no eos_token_id anywhere: the config class defaults it to null.
eos_ids(dir, tok) returns the ids (an empty list when there is no tokenizer and nothing in the files) and a phrase
saying where they came from. sampling(dir) returns the sampling options generation_config.json sets, of those vLLM
reads (temperature, top_p, top_k, min_p, repetition_penalty; an empty table without the file). Both return nil, err for a file that exists but is not a JSON
object. Argument errors raise.
]]
local cjson = require("cjson")
local file = require("glm53.util.file")

local M = {}

-- The generation_config.json keys vLLM takes as a model's sampling defaults (do_sample is ignored, as vLLM does).
M.SAMPLING_KEYS = { "temperature", "top_p", "top_k", "min_p", "repetition_penalty" }

-- GLM-5.3's generation_config.json eos_token_id, by token (reference/peers-and-tokenizer.md §4.3).
M.END_TOKENS = { "<|endoftext|>", "<|user|>", "<|observation|>" }

local function check_dir(dir, what)
    if type(dir) ~= "string" then error(what .. ": dir must be a checkpoint directory", 3) end
end

-- The JSON object in path: a table, false when there is no such file, or nil, err.
local function read_json(path)
    if not file.exists(path) then return false end
    local text, err = file.read_file(path)
    if not text then return nil, err end
    local ok, value = pcall(cjson.decode, text)
    if not ok or type(value) ~= "table" then return nil, path .. ": not a JSON object" end
    return value
end

-- An eos_token_id value (a number, a list of numbers, or null) as a list of ids.
local function id_list(v)
    if type(v) == "number" then return { v } end
    local out = {}
    if type(v) == "table" then
        for _, id in ipairs(v) do
            if type(id) == "number" then out[#out + 1] = id end
        end
    end
    return out
end

function M.eos_ids(dir, tok)
    check_dir(dir, "defaults.eos_ids")
    if tok ~= nil and (type(tok) ~= "table" or type(tok.token_id) ~= "function") then
        error("defaults.eos_ids: tok must be a glm53.engine.tokenizer object or nil", 2)
    end
    local gen, err = read_json(dir .. "/generation_config.json")
    if gen == nil then return nil, err end
    if gen then
        local ids = id_list(gen.eos_token_id)
        if #ids > 0 then return ids, "generation_config.json" end
    end
    local config
    config, err = read_json(dir .. "/config.json")
    if config == nil then return nil, err end
    if config then
        local ids = id_list(config.eos_token_id)
        if #ids == 0 and type(config.text_config) == "table" then ids = id_list(config.text_config.eos_token_id) end
        if #ids > 0 then return ids, "config.json" end
    end
    local ids = {}
    if tok then
        for _, t in ipairs(M.END_TOKENS) do ids[#ids + 1] = tok:token_id(t) end
    end
    return ids, "the tokenizer's end tokens (" .. table.concat(M.END_TOKENS, ", ") .. ")"
end

function M.sampling(dir)
    check_dir(dir, "defaults.sampling")
    local gen, err = read_json(dir .. "/generation_config.json")
    if gen == nil then return nil, err end
    local out = {}
    if gen then
        for _, key in ipairs(M.SAMPLING_KEYS) do
            if type(gen[key]) == "number" then out[key] = gen[key] end
        end
    end
    return out
end

return M
