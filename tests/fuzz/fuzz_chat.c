/*
 * fuzz_chat.c - libFuzzer target: the chat template renderer (lua/glm53/chat/template.lua) on conversations built
 * from arbitrary bytes, run on an embedded LuaJIT.
 *
 * The renderer is Lua, so this harness is the C half: it starts one Lua state, loads the package from the
 * checkout's lua/ and the driver tests/fuzz/fuzz_chat.lua (which builds the conversation, renders it and checks
 * the properties; its header lists them), and calls the driver with each input. A driver error starting
 * "FINDING" is a broken property and traps; so does any other error of the driver.
 *
 * What Lua cannot check about itself is checked here, from a debug hook:
 *   - a budget of VM instructions and of Lua heap per input: a renderer that loops or blows up turns into a
 *     finding (the hook raises; the budget flag makes it a finding even when the renderer catches the error);
 *   - coverage: libFuzzer sees only instrumented C, which the renderer is not, so a line hook counts
 *     (chunk, line) -> (chunk, line) edges of the Lua code into libFuzzer's extra counters, and the corpus grows
 *     by what the renderer does. The JIT compiler is off so that every line runs through the interpreter and
 *     its hooks (template.lua and pycompat.lua turn it off for themselves anyway).
 * Built and run by tests/fuzz/run.sh (target "chat"), which passes GLM53_FUZZ_ROOT, the checkout.
 */
#include <lauxlib.h>
#include <lua.h>
#include <luajit.h>
#include <lualib.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef GLM53_FUZZ_ROOT
#define GLM53_FUZZ_ROOT "."
#endif

enum {
    COUNT_EVERY  = 1000,        /* VM instructions between count hooks */
    MAX_COUNTS   = 40000,       /* 40 M instructions per input; a big normal input takes about 1 M */
    MAX_HEAP_KB  = 512 * 1024,  /* Lua heap (live + garbage) per input */
    COV_SIZE     = 1 << 16,
};

/* libFuzzer reads counters in this section as coverage (its "extra counters"). */
__attribute__((section("__libfuzzer_extra_counters"))) static uint8_t lua_cov[COV_SIZE];

static lua_State *L;
static int driver_ref = LUA_NOREF;
static long counts;
static int over_budget;        /* 1: instructions, 2: memory */
static uint32_t prev_loc;

static void hook(lua_State *L, lua_Debug *ar) {
    if (ar->event == LUA_HOOKLINE) {
        if (!lua_getinfo(L, "S", ar)) return;
        /* chunk names are interned strings, so the pointer names the file; linedefined names the function */
        uint32_t loc = (uint32_t)((uintptr_t)ar->source * 0x9E3779B1u) ^ (uint32_t)ar->linedefined * 0x85EBCA6Bu ^
                       (uint32_t)ar->currentline * 0xC2B2AE35u;
        loc ^= loc >> 15;
        uint32_t edge = (loc ^ prev_loc) & (COV_SIZE - 1);
        if (lua_cov[edge] < 255) lua_cov[edge]++;
        prev_loc = loc >> 1;
        return;
    }
    if (ar->event == LUA_HOOKCOUNT) {
        if (!over_budget && ++counts > MAX_COUNTS) over_budget = 1;
        if (!over_budget && lua_gc(L, LUA_GCCOUNT, 0) > MAX_HEAP_KB) over_budget = 2;
        if (over_budget) luaL_error(L, "fuzz_chat: %s budget exceeded", over_budget == 1 ? "instruction" : "memory");
    }
}

/* lua-cjson (which glm53.chat.json loads when it is there) keeps a malloc'ed buffer until the state closes */
static void close_state(void) {
    if (L) lua_close(L);
    L = NULL;
}

static void die(const char *what) {
    fprintf(stderr, "fuzz_chat: %s\n", what);
    exit(1);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    const char *root = getenv("GLM53_FUZZ_ROOT");
    if (!root) root = GLM53_FUZZ_ROOT;
    L = luaL_newstate();
    if (!L) die("cannot create a Lua state");
    luaL_openlibs(L);
    luaJIT_setmode(L, 0, LUAJIT_MODE_ENGINE | LUAJIT_MODE_OFF);
    static const char boot[] =
        "local root = ...\n"
        "package.path = root .. '/lua/?.lua;' .. root .. '/lua/?/init.lua;' .. package.path\n"
        "return dofile(root .. '/tests/fuzz/fuzz_chat.lua')";
    if (luaL_loadstring(L, boot) != 0 || (lua_pushstring(L, root), lua_pcall(L, 1, 1, 0)) != 0) {
        fprintf(stderr, "fuzz_chat: loading the driver from %s: %s\n", root, lua_tostring(L, -1));
        exit(1);
    }
    if (lua_type(L, -1) != LUA_TFUNCTION) die("tests/fuzz/fuzz_chat.lua must return a function");
    driver_ref = luaL_ref(L, LUA_REGISTRYINDEX);
    atexit(close_state);
    lua_sethook(L, hook, LUA_MASKLINE | LUA_MASKCOUNT, COUNT_EVERY);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    /* garbage of earlier inputs must not count against this one */
    if (lua_gc(L, LUA_GCCOUNT, 0) > 64 * 1024) lua_gc(L, LUA_GCCOLLECT, 0);
    counts = 0;
    over_budget = 0;
    prev_loc = 0;
    lua_rawgeti(L, LUA_REGISTRYINDEX, driver_ref);
    lua_pushlstring(L, (const char *)data, size);
    int status = lua_pcall(L, 1, 0, 0);
    if (over_budget) {
        fprintf(stderr, "fuzz_chat: FINDING: the %s budget ran out (a runaway render): %s\n",
                over_budget == 1 ? "instruction" : "memory", status ? lua_tostring(L, -1) : "(error caught)");
        __builtin_trap();
    }
    if (status != 0) {
        const char *msg = lua_tostring(L, -1);
        fprintf(stderr, "fuzz_chat: %s\n", msg ? msg : "(an error that is not a string)");
        if (!msg || strncmp(msg, "FINDING", 7) != 0) fprintf(stderr, "fuzz_chat: (an error of the driver itself)\n");
        __builtin_trap();
    }
    lua_settop(L, 0);
    return 0;
}
