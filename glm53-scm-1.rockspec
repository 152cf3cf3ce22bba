-- glm53: LuaJIT package + C/CUDA engine for GLM-5.3-Flash. `luarocks make glm53-scm-1.rockspec` builds
-- libglm53 with CMake (the CUDA backend too when nvcc is found), installs the library next to the Lua C modules
-- (where lua/glm53/ffi/core.lua finds it through package.cpath), the Lua package, the bundled model (beside the
-- modules, glm53/models/) and the `glm53` command (bin/glm53) into the tree's bin/.
rockspec_format = "3.0"
package = "glm53"
version = "scm-1"
source = { url = "git+file://." }
description = {
  summary = "Lua-scriptable inference engine for GLM-5.3-Flash (C core, CPU and CUDA backends)",
  license = "MIT",
}
-- "lua ~> 5.1" is how luarocks names LuaJIT 2.1 (it speaks the Lua 5.1 API): glm53 needs LuaJIT itself, for its
-- FFI, which PUC Lua 5.1 does not have. lua-cjson: JSON (configs, --json output, the tokenizer CLI); luv: the event
-- loop of async steps and the server. On Debian the packages lua-cjson and lua-luv provide both outside any rocks
-- tree; scripts/check_rockspec.sh declares them to luarocks as provided (rocks_provided) when they load.
dependencies = { "lua ~> 5.1", "lua-cjson >= 2.1.0", "luv >= 1.30" }
build = {
  type = "cmake",
  variables = {
    CMAKE_BUILD_TYPE = "Release",
    CMAKE_INSTALL_PREFIX = "$(PREFIX)",
    GLM53_LUA_MODULE_DIR = "$(LUADIR)",
    GLM53_LUA_LIB_DIR = "$(LIBDIR)",
  },
  -- A shell launcher (LuaJIT needed, see above), so luarocks copies it as it is instead of wrapping it.
  install = { bin = { glm53 = "bin/glm53" } },
}
