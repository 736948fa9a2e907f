"""The Lua scripts of :class:`~threadline.store.redis.RedisStore` (ADR 0015), each with its
KEYS, ARGV and reply.

A script touches one root's keys (``{L'}``: index, vector set, items, all passed as KEYS) or
the root set's (``{#}``), so each runs on one cluster slot. Expiry follows one rule, ``keep``:
a key that indexes an item never expires before it — ``PERSIST`` for an item without TTL, else
``PEXPIRE 2t`` when the key has ``t`` or less left (so a key is extended at most once per
``t``, not on every write). Vector-set commands run only in mode ``v`` (Redis 8).
"""

from __future__ import annotations

LIB = r"""
local function keep(k, t, before)  -- k indexes an item with TTL t ms (0: none); PTTL before
  if t == 0 then
    if before ~= -1 then redis.call('PERSIST', k) end
    return 0
  end
  if before == -2 or (before >= 0 and before <= t) then
    redis.call('PEXPIRE', k, 2 * t)
    return 2 * t
  end
  return -1
end
local function drop_vectors(vs, m)  -- elements m\0 0..n-1 of item m
  local j = 0
  while redis.call('VREM', vs, m .. '\0' .. j) == 1 do j = j + 1 end
end
"""

# KEYS: item, index, vector set. ARGV: member, value JSON, ttl ms (0: none), number of
# vectors, mode ('v' vector set, 'e' exact, '' no index), the vectors (exact mode: one blob),
# attributes JSON, then one FP32 blob per vector (mode 'v'). Both timestamps are the server's
# TIME in µs (InMemoryStore sets both on every put). Reply: 1.
PUT = (
    LIB
    + r"""
local m, t, n, mode = ARGV[1], tonumber(ARGV[3]), tonumber(ARGV[4]), ARGV[5]
local now = redis.call('TIME')
local us = now[1] .. string.format('%06d', tonumber(now[2]))
local before = redis.call('PTTL', KEYS[2])
if mode == 'v' then drop_vectors(KEYS[3], m) end
redis.call('DEL', KEYS[1])
local f = {'v', ARGV[2], 'c', us, 'u', us}
if t > 0 then f[#f + 1] = 't'; f[#f + 1] = t end
if n > 0 then f[#f + 1] = 'n'; f[#f + 1] = n end
if mode == 'e' and n > 0 then f[#f + 1] = 'e'; f[#f + 1] = ARGV[6] end
redis.call('HSET', KEYS[1], unpack(f))
if t > 0 then redis.call('PEXPIRE', KEYS[1], t) end
redis.call('ZADD', KEYS[2], 0, m)
keep(KEYS[2], t, before)
if mode == 'v' and n > 0 then
  local vb = redis.call('PTTL', KEYS[3])
  for j = 1, n do
    redis.call('VADD', KEYS[3], 'FP32', ARGV[7 + j], m .. '\0' .. (j - 1), 'NOQUANT', 'SETATTR', ARGV[7])
  end
  keep(KEYS[3], t, vb)
end
return 1
"""
)

# KEYS: item, index, vector set. ARGV: member, mode. Reply: 1.
DELETE = (
    LIB
    + r"""
if ARGV[2] == 'v' then drop_vectors(KEYS[3], ARGV[1]) end
redis.call('DEL', KEYS[1])
redis.call('ZREM', KEYS[2], ARGV[1])
return 1
"""
)

# Items of one root by member, and the lazy clean-up: a member whose item is gone (expired)
# leaves the index (and its vectors the vector set) here, atomically — put and delete change
# an item and its member together, so a missing item means an expired one.
# KEYS: index, vector set, item 1..n. ARGV: mode, what to read ('f' the fields v c u t n, 'e'
# those and e, 'k' only c: whether it exists, 'r' nothing: refresh only), refresh ('1':
# PEXPIRE each item that has a TTL, keep the index), member 1..n.
# Reply: {ms the index was extended to (-1: not), then per item the fields read}.
READ = (
    LIB
    + r"""
local mode, what, refresh = ARGV[1], ARGV[2], ARGV[3] == '1'
local fields = ({f = {'v', 'c', 'u', 't', 'n'}, e = {'v', 'c', 'u', 't', 'n', 'e'}, k = {'c'}})[what]
local out, longest = {-1}, -1
for i = 3, #KEYS do
  if what == 'r' then
    local t = redis.call('HGET', KEYS[i], 't')
    if t then
      redis.call('PEXPIRE', KEYS[i], t)
      if tonumber(t) > longest then longest = tonumber(t) end
    end
  else
    local got = redis.call('HMGET', KEYS[i], unpack(fields))
    if not got[1] then
      if redis.call('ZREM', KEYS[1], ARGV[i + 1]) == 1 and mode == 'v' then
        drop_vectors(KEYS[2], ARGV[i + 1])
      end
    elseif refresh and got[4] then
      local t = tonumber(got[4])
      redis.call('PEXPIRE', KEYS[i], t)
      if t > longest then longest = t end
    end
    for j = 1, #fields do out[#out + 1] = got[j] end
  end
end
if longest > 0 then
  out[1] = keep(KEYS[1], longest, redis.call('PTTL', KEYS[1]))
  if mode == 'v' then keep(KEYS[2], longest, redis.call('PTTL', KEYS[2])) end
end
return out
"""
)

# Distinct namespaces of one root in order, by skipping through the index (each step one
# ZRANGEBYLEX LIMIT 1): a namespace found skips its own items, a namespace cut to max_depth
# skips all it holds, a concrete prefix label that differs skips its subtree.
# KEYS: index. ARGV: from, to (ZRANGEBYLEX bounds), how many to find, step budget, max depth
# (0: none), the root label, #prefix, prefix labels ('*' any), #suffix, suffix labels.
# Reply: {1 when the range is done, the bound to go on from, steps taken, then per namespace
# the encoding of its labels below the root and the member found}.
NAMESPACES = r"""
local cursor, hi, want = ARGV[1], ARGV[2], tonumber(ARGV[3])
local budget, depth = tonumber(ARGV[4]), tonumber(ARGV[5])
local root, pre, suf, at = ARGV[6], {}, {}, 8
for i = 1, tonumber(ARGV[7]) do pre[i] = ARGV[at]; at = at + 1 end
for i = 1, tonumber(ARGV[at]) do suf[i] = ARGV[at + i] end
local function enc(labels, n)
  local parts = {}
  for i = 1, n do parts[i] = labels[i] .. '\0' end
  return table.concat(parts)
end
local function subtree_end(rest, j)  -- the bound after every member under rest[1..j]
  return '[' .. enc(rest, j - 1) .. rest[j] .. '\1'
end
local out, steps = {}, 0
while #out < 2 * want do
  if steps >= budget then return {0, cursor, steps, unpack(out)} end
  steps = steps + 1
  local m = redis.call('ZRANGEBYLEX', KEYS[1], cursor, hi, 'LIMIT', 0, 1)[1]
  if not m then return {1, cursor, steps, unpack(out)} end
  local rest, pos = {}, 1
  while pos <= #m and string.byte(m, pos) ~= 0 do
    local e = string.find(m, '\0', pos, true)
    rest[#rest + 1] = string.sub(m, pos, e - 1)
    pos = e + 1
  end
  local full = {root, unpack(rest)}
  local ok, mismatch = #full >= #pre, nil
  for i = 1, math.min(#pre, #full) do
    if pre[i] ~= '*' and pre[i] ~= full[i] then ok = false; mismatch = i; break end
  end
  if ok then
    if #full < #suf then ok = false end
    for i = 1, math.min(#suf, #full) do
      local s = suf[#suf - i + 1]
      if s ~= '*' and s ~= full[#full - i + 1] then ok = false; break end
    end
  end
  local own_end = '[' .. enc(rest, #rest) .. '\1'
  if mismatch == 1 then
    return {1, cursor, steps, unpack(out)}
  elseif mismatch then
    cursor = subtree_end(rest, mismatch - 1)
  elseif not ok then
    cursor = own_end
  elseif depth > 0 and #full >= depth then
    out[#out + 1] = enc(rest, depth - 1); out[#out + 1] = m
    if depth == 1 then return {1, cursor, steps, unpack(out)} end
    cursor = subtree_end(rest, depth - 1)
  else
    out[#out + 1] = enc(rest, #rest); out[#out + 1] = m
    cursor = own_end
  end
end
return {0, cursor, steps, unpack(out)}
"""

# KEYS: root set, generations. ARGV: pairs of root label and ms its index was set to keep
# (0: an item without TTL). Adds each root, bumps its generation (what ROOT_DROP checks), and
# keeps both keys as long as the longest. Reply: 1.
ROOT_TOUCH = r"""
local rb, gb, longest = redis.call('PTTL', KEYS[1]), redis.call('PTTL', KEYS[2]), -1
for i = 1, #ARGV, 2 do
  redis.call('ZADD', KEYS[1], 0, ARGV[i])
  redis.call('HINCRBY', KEYS[2], ARGV[i], 1)
  local t = tonumber(ARGV[i + 1])
  if t == 0 then longest = 0 elseif longest ~= 0 and t > longest then longest = t end
end
for i, before in ipairs({rb, gb}) do
  if longest == 0 then
    if before ~= -1 then redis.call('PERSIST', KEYS[i]) end
  elseif before == -2 or (before >= 0 and before <= longest) then
    redis.call('PEXPIRE', KEYS[i], longest)
  end
end
return 1
"""

# A page of roots in order with their generations. KEYS: root set, generations. ARGV: from,
# to, count. Reply: {label, generation, ...}.
ROOTS = r"""
local out = {}
for _, r in ipairs(redis.call('ZRANGEBYLEX', KEYS[1], ARGV[1], ARGV[2], 'LIMIT', 0, tonumber(ARGV[3]))) do
  out[#out + 1] = r; out[#out + 1] = redis.call('HGET', KEYS[2], r) or ''
end
return out
"""

# Forget a root whose index was seen empty, unless a put touched it since (its generation
# changed). KEYS: root set, generations. ARGV: label, generation seen. Reply: 1 if dropped.
ROOT_DROP = r"""
if (redis.call('HGET', KEYS[2], ARGV[1]) or '') ~= ARGV[2] then return 0 end
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('HDEL', KEYS[2], ARGV[1])
return 1
"""

# Whether the server has vector sets (Redis 8). KEYS: a key never written (the cluster node
# to ask). Reply: 1 or 0 (another error is raised).
PROBE = r"""
local r = redis.pcall('VCARD', KEYS[1])
if type(r) == 'table' and r.err then
  local e = string.lower(r.err)  -- 'Unknown Redis command called from script' (Redis 7)
  if string.find(e, 'unknown', 1, true) and string.find(e, 'command', 1, true) then return 0 end
  return redis.error_reply(r.err)
end
return 1
"""

SCRIPTS = {
    "probe": PROBE,
    "put": PUT,
    "delete": DELETE,
    "read": READ,
    "namespaces": NAMESPACES,
    "root_touch": ROOT_TOUCH,
    "roots": ROOTS,
    "root_drop": ROOT_DROP,
}
