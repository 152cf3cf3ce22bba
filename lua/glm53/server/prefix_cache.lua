--[[
glm53.server.prefix_cache - prompt prefixes whose caches are already computed, as dedicated sequences, in an LRU
bounded by their cache bytes.

    local prefix_cache = require("glm53.server.prefix_cache")
    local cache = prefix_cache.new({ bytes = 512 * 2^20 })
    local pre = cache:lookup(ids, layers)      -- the longest kept prefix of ids (at most #ids - 1 tokens), or nil
    if not cache:has(ids, b, layers) then ... d:add(ids, { boundary = b, on_boundary = function(s)
        cache:insert(assert(d:snapshot(s))) end }) end
    cache:clear()                              -- frees every entry

An entry is a prefix of glm53.generation.driver (d:snapshot): a sequence that ends exactly at a boundary of its
tokens (the end of a rendered system message or tools block), because a sequence can only be forked within its
last max_rollback tokens - the KDA states before that are not kept. New requests fork the longest entry their
tokens start with and prefill only the rest. `layers` is how many MTP layers the request's stream keeps in step
(0 without speculative decoding); an entry serves it only when it was made with at least as many.

Entries with streams still waiting to fork them (pins) are never evicted. Lookups compare tokens, longest entry
first; entries are few (one per distinct system prompt), so that is cheaper than hashing every prefix length.
]]
local M = {}

local Cache = {}
Cache.__index = Cache

-- opts.bytes: the budget for the entries' cache memory (default 512 MiB).
function M.new(opts)
    opts = opts or {}
    local budget = opts.bytes or 512 * 1024 * 1024
    if type(budget) ~= "number" or budget < 0 then error("prefix_cache.new: bytes must be a number >= 0", 2) end
    return setmetatable({ budget = budget, entries = {}, bytes = 0, tick = 0 }, Cache)
end

local function starts_with(ids, pre)
    if pre.L > #ids then return false end
    local all = pre.all
    for i = pre.L, 1, -1 do            -- prompts that share a system block differ at the end first
        if ids[i] ~= all[i] then return false end
    end
    return true
end

-- The longest entry that ids starts with, shorter than ids, made with at least `layers` MTP layers.
function Cache:lookup(ids, layers)
    layers = layers or 0
    local best
    for _, e in ipairs(self.entries) do
        if e.L < #ids and e.layers >= layers and (not best or e.L > best.L) and starts_with(ids, e) then best = e end
    end
    if best then
        self.tick = self.tick + 1
        best.used = self.tick
    end
    return best
end

-- Whether an entry holds exactly the first n tokens of ids with at least `layers` MTP layers.
function Cache:has(ids, n, layers)
    for _, e in ipairs(self.entries) do
        if e.L == n and e.layers >= (layers or 0) and starts_with(ids, e) then return true end
    end
    return false
end

-- Keeps a prefix (the cache owns it from now on), then evicts the least recently used unpinned entries beyond the
-- budget. A duplicate of an entry already kept is freed instead.
function Cache:insert(pre)
    if self:has(pre.all, pre.L, pre.layers) then
        pre:free()
        return false
    end
    self.tick = self.tick + 1
    pre.used = self.tick
    pre.bytes = pre.seq:cache_bytes()
    self.entries[#self.entries + 1] = pre
    self.bytes = self.bytes + pre.bytes
    self:evict()
    return pre.seq ~= nil
end

function Cache:evict()
    while self.bytes > self.budget do
        local victim, at
        for i, e in ipairs(self.entries) do
            if e.pins == 0 and (not victim or e.used < victim.used) then victim, at = e, i end
        end
        if not victim then return end
        table.remove(self.entries, at)
        self.bytes = self.bytes - victim.bytes
        victim:free()
    end
end

function Cache:count() return #self.entries end

function Cache:clear()
    for _, e in ipairs(self.entries) do e:free() end
    self.entries, self.bytes = {}, 0
end

return M
