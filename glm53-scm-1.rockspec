-- glm53: LuaJIT package + C/CUDA engine for GLM-5.3-Flash. `luarocks make glm53-scm-1.rockspec` builds
-- libglm53 with CMake (the CUDA backend too when nvcc is found) and installs the library next to the
-- Lua C modules, where lua/glm53/ffi/core.lua finds it through package.cpath.
rockspec_format = "3.0"
package = "glm53"
version = "scm-1"
source = { url = "git+file://." }
description = {
  summary = "Lua-scriptable inference engine for GLM-5.3-Flash (C core, CPU and CUDA backends)",
  license = "MIT",
}
dependencies = { "lua >= 5.1" }
build = {
  type = "cmake",
  variables = {
    CMAKE_BUILD_TYPE = "Release",
    CMAKE_INSTALL_PREFIX = "$(PREFIX)",
    GLM53_LUA_MODULE_DIR = "$(LUADIR)",
    GLM53_LUA_LIB_DIR = "$(LIBDIR)",
  },
}
