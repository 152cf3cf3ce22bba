--[[
glm53 - LuaJIT package for the glm53 inference engine (GLM-5.3-Flash).

    local glm53 = require("glm53")
    local ckpt = assert(glm53.checkpoint.open("models/tiny"))
    ckpt:print_tensors()

Submodules load on first use: glm53.checkpoint, glm53.model, glm53.tokenizer, glm53.chat, ...
]]
local glm53 = {}

setmetatable(glm53, {
    __index = function(t, name)
        local ok, mod = pcall(require, "glm53." .. name)
        if not ok then
            if tostring(mod):find("module 'glm53." .. name .. "' not found", 1, true) then return nil end
            error(mod, 2)
        end
        rawset(t, name, mod)
        return mod
    end,
})

function glm53.version()
    local core = require("glm53.core")
    return core.ffi.string(core.C.glm53_version())
end

return glm53
