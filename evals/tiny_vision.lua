-- evals/tiny_vision.lua: the tiny model's picture questions (evals/data/tiny/vision.jsonl and images/): the
-- colour, shape, count or position (quadrant) of shapes in a 112 x 112 picture. The answer is the reply after
-- the think block, stripped of surrounding whitespace and lower-cased, and must equal the gold word(s) ("Red",
-- " red\n" are red; "red." and "top-left" are not red and top left).
--
-- The picture is the item's image_url part; load() joins its path to the JSONL file's directory, and the eval
-- runner preprocesses it as the engine does (glm53.engine.vision) in-process, or sends it as a data URL to a
-- server. Items are grouped by the question's kind (meta.kind: colour, shape, count, position).

local common = require("evals.common")
local json = require("glm53.chat.json")
local tiny = require("evals.tiny")

local M = tiny.task({ family = "vision", modes = { "words" }, max_tokens = 96 })  -- describes every shape first

--- Items { id, messages (image paths joined to the file's directory), answer, images (those paths), meta,
-- group = meta.kind }.
function M.load(path, opts)
    local dir = common.dirname(path)
    local function resolve(p) return p:sub(1, 1) == "/" and p or dir .. p end
    return tiny.load(path, opts, "vision", function(row, item)
        local answer, why = tiny.field(row, "answer")
        if not answer then return nil, why end
        local images = {}
        for mi, msg in ipairs(item.messages) do
            if json.kind(msg.content) == "array" then
                for pi, part in ipairs(msg.content) do
                    if part.type == "image_url" then
                        local url = json.kind(part.image_url) == "object" and part.image_url.url
                        if type(url) ~= "string" then
                            return nil, string.format("messages[%d].content[%d]: image_url.url (a path) expected", mi, pi)
                        end
                        part.image_url.url = resolve(url)
                        images[#images + 1] = part.image_url.url
                    end
                end
            end
        end
        if #images == 0 then return nil, "field \"messages\": no image_url part" end
        item.images = images
        item.group = item.meta and type(item.meta.kind) == "string" and item.meta.kind or nil
        return item
    end)
end

--- The reply, stripped and lower-cased.
function M.extract(output, mode, item)
    common.argcheck(type(output) == "string", 1, "extract", "output string expected")
    tiny.check_mode(M, mode, "extract")
    return common.lower(common.strip(output))
end

--- The same text as the lower-cased gold.
M.match = common.matcher(function(answer, gold) return answer == common.lower(gold) end)

return M
