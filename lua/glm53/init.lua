--[[
glm53 - LuaJIT package for the glm53 inference engine (GLM-5.3-Flash).

    local glm53 = require("glm53")
    local ckpt = assert(glm53.checkpoint.open("models/glm53-tiny"))
    ckpt:print_tensors()
    print(glm53.version())

Modules load on first use. The short names stand for these modules:

    glm53.model       glm53.engine.model        Model and Batch: load a checkpoint, run batched steps
    glm53.seq         glm53.engine.seq          sequences (per-sequence caches)
    glm53.async       glm53.engine.async        steps on the model's worker thread, called back on a luv loop
    glm53.sampler     glm53.engine.sampler      the C sampler and Lua sampling policies
    glm53.tokenizer   glm53.engine.tokenizer    the C tokenizer and the incremental detokeniser
    glm53.vision      glm53.engine.vision       images and videos: preprocessing, the tower, placement
    glm53.checkpoint  glm53.engine.checkpoint   read-only access to checkpoint tensors
    glm53.generation  glm53.generation.driver   the generation driver (plain and MTP speculative decoding)
    glm53.chat        glm53.chat.template       the GLM-5.3 chat template
    glm53.json        glm53.chat.json           order-preserving, Python-compatible JSON
    glm53.npy         glm53.util.npy            NumPy .npy files
    glm53.cli         glm53.util.cli            the argument parser of the glm53 command and the scripts

Any other name n is looked up as the module "glm53.n" (a sub-package with an init.lua), and is nil when there
is none. The rest is reached by its full name: glm53.ffi.*, glm53.chat.parsers, glm53.chat.pycompat,
glm53.generation.defaults, glm53.util.*, glm53.report.*, and the commands of bin/glm53, glm53.cli.* (glm53.cli.main
runs them).
]]
local ALIASES = {
    model = "glm53.engine.model",
    seq = "glm53.engine.seq",
    async = "glm53.engine.async",
    sampler = "glm53.engine.sampler",
    tokenizer = "glm53.engine.tokenizer",
    vision = "glm53.engine.vision",
    checkpoint = "glm53.engine.checkpoint",
    generation = "glm53.generation.driver",
    chat = "glm53.chat.template",
    json = "glm53.chat.json",
    npy = "glm53.util.npy",
    cli = "glm53.util.cli",
}

local glm53 = {}

setmetatable(glm53, {
    __index = function(t, name)
        local module = ALIASES[name] or "glm53." .. name
        local ok, mod = pcall(require, module)
        if not ok then
            if tostring(mod):find("module '" .. module .. "' not found", 1, true) then return nil end
            error(mod, 2)
        end
        rawset(t, name, mod)
        return mod
    end,
})

function glm53.version()
    local core = require("glm53.ffi.core")
    return core.ffi.string(core.C.glm53_version())
end

return glm53
