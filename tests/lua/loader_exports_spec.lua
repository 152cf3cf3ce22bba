-- The loader reads what transformers reads (issue 2, item 2): for every committed fixture (F32, BF16 sharded,
-- FP8 block-scaled, unsharded), tensors exported by transformers after from_pretrained (FP8: dequantised by
-- torch) equal what glm53's loader returns for the same checkpoint names, element for element.
local cjson = require("cjson")
local npy = require("glm53.util.npy")
local checkpoint = require("glm53.engine.checkpoint")
local file = require("glm53.util.file")
local fixtures = require("fixtures")

local function read_json(path)
    local s = file.read_file(path)
    if not s then return nil end
    return cjson.decode(s)
end

for _, fx in ipairs(fixtures.list()) do
    local index = read_json(fx.dir .. "/export/index.json")
    if index then
        describe("loader on " .. fx.name, function()
            local ckpt
            setup(function() ckpt = assert(checkpoint.open(fx.dir)) end)
            teardown(function() ckpt:free() end)

            it("returns transformers' values for " .. #index.tensors .. " exported tensors", function()
                for _, e in ipairs(index.tensors) do
                    local ref = assert(npy.read(fx.dir .. "/export/" .. e.file))
                    local got, n = ckpt:read_into(e.name)
                    assert(got, n)
                    assert.are.equal(ref.n, n, e.name)
                    local worst = 0
                    for i = 0, n - 1 do
                        local d = math.abs(got[i] - ref.data[i])
                        if d > worst then worst = d end
                    end
                    assert.are.equal(0, worst, e.name .. " (" .. e.hf_param .. ")")
                end
            end)

            it("lists every tensor with its dtype, shape and shard", function()
                local list = ckpt:list()
                assert.is_true(#list > 50)
                for _, t in ipairs(list) do
                    assert.is_string(t.name)
                    assert.is_true(#t.shape >= 1)
                    assert.truthy(t.file:match("%.safetensors$"))
                end
            end)
        end)
    end
end
