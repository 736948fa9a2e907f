"""The Lua scripts of the ``redis`` saver, each with its KEYS, ARGV and reply.

Every script gets a thread's keys (:class:`threadline.redis_keys.ThreadKeys`) in order as KEYS
(the first five, :attr:`ThreadKeys.data`, when it needs no lease), so one script touches one
thread only and stays on one cluster slot (they share the hash tag ``{thread_id}``). Records are
netstrings (:mod:`threadline.checkpoint.redis.records`), which Lua reads without a decoder.
Large values never pass through a script: the saver moves blobs with plain HSET/HMGET.
"""

from __future__ import annotations

# Shared by every script. KEYS are always a thread's ThreadKeys in order:
# 1 idx, 2 cp, 3 blobs, 4 widx, 5 w, 6 lease, 7 fence counter.
LIB = r"""
local function items(s, pos, n)  -- n netstrings from pos; returns them and the next pos
  local out = {}
  for i = 1, n do
    local colon = string.find(s, ':', pos, true)
    local size = tonumber(string.sub(s, pos, colon - 1))
    out[i] = string.sub(s, colon + 1, colon + size)
    pos = colon + size + 1
  end
  return out, pos
end
local function blob_fields(record)  -- the blobs-hash fields a checkpoint record refers to
  local head, pos = items(record, 1, 1)
  return (items(record, pos, tonumber(head[1])))
end
local function writes_of(m)  -- write fields of the checkpoint with index member m
  return redis.call('ZRANGEBYLEX', KEYS[4], '[' .. m .. '\0', '(' .. m .. '\1')
end
local function fenced(token)
  return token ~= '' and redis.call('GET', KEYS[6]) ~= token
end
local function refresh(ttl)  -- every key of the thread except the lease (it has its own)
  for _, i in ipairs({1, 2, 3, 4, 5, 7}) do redis.call('EXPIRE', KEYS[i], ttl) end
end
"""

# KEYS[1..5] = idx, cp, blobs, widx, w
# ARGV = checkpoint_ns, checkpoint_id pairs; an empty id means the latest of that ns
# returns per pair {checkpoint_id, record, {write records}}, or nil when there is no
#   such checkpoint (the caller HMGETs the blobs the record names: no big values in Lua)
LOAD = (
    LIB
    + r"""
local out = {}
for i = 1, #ARGV, 2 do
  local ns, id = ARGV[i], ARGV[i + 1]
  if id == '' then
    local latest = redis.call('ZREVRANGEBYLEX', KEYS[1], '(' .. ns .. '\1', '[' .. ns .. '\0',
                              'LIMIT', 0, 1)
    if latest[1] then id = string.sub(latest[1], #ns + 2) end
  end
  local m = ns .. '\0' .. id
  local record = id ~= '' and redis.call('HGET', KEYS[2], m)
  if record then
    local wf, writes = writes_of(m), {}
    if #wf > 0 then writes = redis.call('HMGET', KEYS[5], unpack(wf)) end
    out[#out + 1] = {id, record, writes}
  else
    out[#out + 1] = false
  end
end
return out
"""
)

# Runs in one MULTI/EXEC right after a plain HSET of this put's blobs (big values stay out
# of Lua). When fenced it takes those fields out again, so the thread is as before: their
# versions are fresh (get_next_version adds a random part), so no other checkpoint refers
# to them -- unless this very checkpoint is already stored (a retried put whose first
# attempt went through), and then they are its own and stay.
# KEYS[1..7] = ThreadKeys
# ARGV[1] = ttl seconds, ARGV[2] = fencing token or '', ARGV[3] = index member,
# ARGV[4] = checkpoint record, ARGV[5..] = the blob fields HSET just before
# returns 1, or 0 when fenced (nothing written)
PUT = (
    LIB
    + r"""
if fenced(ARGV[2]) then
  if #ARGV > 4 and redis.call('HEXISTS', KEYS[2], ARGV[3]) == 0 then
    redis.call('HDEL', KEYS[3], unpack(ARGV, 5))
  end
  return 0
end
redis.call('ZADD', KEYS[1], 0, ARGV[3])
redis.call('HSET', KEYS[2], ARGV[3], ARGV[4])
refresh(ARGV[1])
return 1
"""
)

# KEYS[1..7] = ThreadKeys
# ARGV[1] = ttl seconds, ARGV[2] = fencing token or '',
# ARGV[3..] = write field, write record, '1' to replace an existing write / '0' to keep it
# returns 1, or 0 when fenced (nothing written)
PUT_WRITES = (
    LIB
    + r"""
if fenced(ARGV[2]) then return 0 end
for i = 3, #ARGV, 3 do
  if ARGV[i + 2] == '1' or redis.call('HEXISTS', KEYS[5], ARGV[i]) == 0 then
    redis.call('HSET', KEYS[5], ARGV[i], ARGV[i + 1])
    redis.call('ZADD', KEYS[4], 0, ARGV[i])
  end
end
refresh(ARGV[1])
return 1
"""
)

# KEYS[1..5] = idx, cp, blobs, widx, w
# ARGV = index members of checkpoints to delete
# deletes them, their writes, and every blob no remaining checkpoint refers to
# returns the number of checkpoints deleted
DROP = (
    LIB
    + r"""
local n = 0
for _, m in ipairs(ARGV) do
  n = n + redis.call('ZREM', KEYS[1], m)
  redis.call('HDEL', KEYS[2], m)
  local wf = writes_of(m)
  if #wf > 0 then
    redis.call('HDEL', KEYS[5], unpack(wf))
    redis.call('ZREM', KEYS[4], unpack(wf))
  end
end
local live, dead = {}, {}
for _, record in ipairs(redis.call('HVALS', KEYS[2])) do
  for _, f in ipairs(blob_fields(record)) do live[f] = true end
end
for _, f in ipairs(redis.call('HKEYS', KEYS[3])) do
  if not live[f] then dead[#dead + 1] = f end
end
for i = 1, #dead, 1000 do  -- unpack() has a stack limit
  redis.call('HDEL', KEYS[3], unpack(dead, i, math.min(i + 999, #dead)))
end
return n
"""
)

# name -> source; the saver registers each once per client
SCRIPTS: dict[str, str] = {
    "load": LOAD,
    "put": PUT,
    "put_writes": PUT_WRITES,
    "drop": DROP,
}
