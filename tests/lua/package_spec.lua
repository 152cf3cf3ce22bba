-- The package layout: require("glm53") and its short names, and one module name per concept (the flat module
-- names of the first layout are gone).
local glm53 = require("glm53")

describe("require('glm53')", function()
    it("resolves each short name to its module", function()
        local aliases = {
            model = "glm53.engine.model", seq = "glm53.engine.seq", sampler = "glm53.engine.sampler",
            tokenizer = "glm53.engine.tokenizer", vision = "glm53.engine.vision",
            checkpoint = "glm53.engine.checkpoint", generation = "glm53.generation.driver",
            chat = "glm53.chat.template", json = "glm53.chat.json", npy = "glm53.util.npy", cli = "glm53.util.cli",
        }
        for short, name in pairs(aliases) do
            assert.are.equal(require(name), glm53[short], "glm53." .. short)
        end
    end)

    it("gives nil for a name that is no module, and the library version", function()
        assert.is_nil(glm53.no_such_module)
        assert.is_nil(glm53.ffi)                    -- a sub-package without an init.lua is not a module
        assert.are.equal("string", type(glm53.version()))
    end)

    it("has no module left under a flat name of the first layout", function()
        for _, old in ipairs({ "cdef", "core", "checkpoint", "model", "sampler", "tokenizer", "vision", "spec",
                               "chat", "pycompat", "json", "parsers", "cli", "npy", "base64", "clock" }) do
            assert.is_nil(package.searchpath("glm53." .. old, "./lua/?.lua;./lua/?/init.lua"), "glm53." .. old)
        end
    end)
end)
