-- Loaded by busted once, before the spec files (.busted: helper).
--
-- luv keeps its event loop in a userdata that only the first luv module table references (its _loop field);
-- a later require("luv") in the same Lua state makes a new table over that same loop (luaopen_luv finds it in
-- the registry). Busted unloads what a spec file loaded when the file ends, so the first file's luv table became
-- garbage while a later file ran its own luv loop, and its __gc closed and freed the loop under it: a segfault in
-- libuv (eval_run_spec.lua then bench_serve_spec.lua in one busted call). Required here, before any file, luv
-- stays loaded for the whole run.
require("luv")
