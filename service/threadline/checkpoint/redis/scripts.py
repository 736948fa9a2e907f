"""The Lua scripts of the ``redis`` saver, each with its KEYS, ARGV and reply.

Every script gets a thread's keys (:class:`threadline.redis_keys.ThreadKeys`) in order as KEYS
(the first five, :attr:`ThreadKeys.data`, when it needs no lease), so one script touches one
thread only and stays on one cluster slot (they share the hash tag ``{thread_id}``). Records are
netstrings (:mod:`threadline.checkpoint.redis.records`), which Lua reads without a decoder.
Large values never pass through a script: the saver moves whole values and new list items
with plain HSET/HMGET; scripts read only descriptors (at most ``DESCRIPTOR_MAX_BYTES``) and
write only what one put stores when it is small (``PUT_INLINE_BYTES`` in all: a step's one or
two messages, descriptors, the input).
"""

from __future__ import annotations

from threadline.checkpoint.redis.lists import DESCRIPTOR_MAX_BYTES, DREF_TYPE, SEGMENTS_TYPE
from threadline.checkpoint.redis.records import REF_TYPE

# Shared by every script. KEYS are always a thread's ThreadKeys in order:
# 1 idx, 2 cp, 3 blobs, 4 widx, 5 w, 6 lease, 7 fence counter.
LIB = (
    f"local DESCRIPTOR_MAX, SEGMENTS = {DESCRIPTOR_MAX_BYTES}, '{SEGMENTS_TYPE.decode()}\\0'\n"
    f"local REF, DREF = '{REF_TYPE.decode()}', '{DREF_TYPE.decode()}\\0'\n"
) + (
    r"""
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
local function packed_writes(m)  -- the write records stored together at field m (format 3)
  local v, out, pos = redis.call('HGET', KEYS[5], m), {}, 1
  if not v then return out end
  while pos <= #v do
    local one
    one, pos = items(v, pos, 1)
    out[#out + 1] = one[1]
  end
  return out
end
local function pack_all(list)  -- netstrings, as records.pack
  local parts = {}
  for i, r in ipairs(list) do parts[i] = #r .. ':' .. r end
  return table.concat(parts)
end
-- Write records of checkpoint m (one field each, formats 1-2, found by the widx index; and
-- all in field m, format 3), and {item field, item, ...} of the list items its writes
-- stored by reference name (format 3; one message each, so small values only).
local function writes_with_items(m)
  local wf, writes, found = writes_of(m), {}, {}
  if #wf > 0 then writes = redis.call('HMGET', KEYS[5], unpack(wf)) end
  for _, r in ipairs(packed_writes(m)) do writes[#writes + 1] = r end
  local ns = string.match(m, '^(%Z*)')
  for _, r in ipairs(writes) do
    if r then
      local p = items(r, 1, 4)
      if p[3] == REF then
        local lineage, from, to = string.match(p[4], '^(%Z*)%z(%d+)%z(%d+)$')
        for i = tonumber(from), tonumber(to) - 1 do
          local f = ns .. '\0' .. p[2] .. '\0' .. lineage .. '\0' .. i
          found[#found + 1] = f; found[#found + 1] = redis.call('HGET', KEYS[3], f) or ''
        end
      end
    end
  end
  return writes, found
end
local function fenced(token)
  return token ~= '' and redis.call('GET', KEYS[6]) ~= token
end
local function split0(s)  -- the parts of s between NUL bytes
  local out, pos = {}, 1
  while true do
    local z = string.find(s, '\0', pos, true)
    if not z then out[#out + 1] = string.sub(s, pos) return out end
    out[#out + 1] = string.sub(s, pos, z - 1)
    pos = z + 1
  end
end
-- The descriptor blob stored at field f (a list's segments, or a dict of lists by reference,
-- format 3), or nil (big values unread)
local function descriptor(f)
  local n = redis.call('HSTRLEN', KEYS[3], f)
  if n == 0 or n > DESCRIPTOR_MAX then return nil end
  local v = redis.call('HGET', KEYS[3], f)
  if string.sub(v, 1, #SEGMENTS) == SEGMENTS or string.sub(v, 1, #DREF) == DREF then return v end
  return nil
end
-- The TTL of every key of the thread but the lease (it has its own), refreshed only when one
-- of the keys this call wrote (`written`: KEYS indexes) has none or has lost more than
-- `slack` seconds of it: one PTTL (a read) per write instead of six EXPIREs (writes, each
-- replicated and appended to the AOF) -- the EXPIREs were 31 of the 80 commands of a turn.
local function refresh(ttl, written)
  ttl = tonumber(ttl)
  local due = (ttl - math.min(60, math.floor(ttl / 10))) * 1000
  for _, i in ipairs(written) do
    if redis.call('PTTL', KEYS[i]) < due then
      for _, k in ipairs({1, 2, 3, 4, 5, 7}) do redis.call('EXPIRE', KEYS[k], ttl) end
      return
    end
  end
end
local function each_chunk(list, from, to, fn)  -- unpack() has a stack limit: 1000 at a time
  for i = from, to, 1000 do fn(unpack(list, i, math.min(i + 999, to))) end
end
"""
)

# KEYS[1..5] = idx, cp, blobs, widx, w
# ARGV[1] = n, ARGV[2..1+n] = blob fields the caller holds decoded (no descriptor wanted),
# then checkpoint_ns, checkpoint_id pairs; an empty id means the latest of that ns
# returns per pair {checkpoint_id, record, {write records}, {field, descriptor, ...} for the
#   record's other blob fields that hold a list stored item by item, {item field, item, ...}
#   the writes stored by reference name ('' if gone)}, or false when there is no such
#   checkpoint (the caller HMGETs the blobs and items: no big values in Lua)
LOAD = (
    LIB
    + r"""
local out, held = {}, {}
local n = tonumber(ARGV[1])
for i = 2, 1 + n do held[ARGV[i]] = true end
for i = 2 + n, #ARGV, 2 do
  local ns, id = ARGV[i], ARGV[i + 1]
  if id == '' then
    local latest = redis.call('ZREVRANGEBYLEX', KEYS[1], '(' .. ns .. '\1', '[' .. ns .. '\0',
                              'LIMIT', 0, 1)
    if latest[1] then id = string.sub(latest[1], #ns + 2) end
  end
  local m = ns .. '\0' .. id
  local record = id ~= '' and redis.call('HGET', KEYS[2], m)
  if record then
    local writes, found = writes_with_items(m)
    local descs = {}
    for _, f in ipairs(blob_fields(record)) do
      local d = not held[f] and descriptor(f)
      if d then descs[#descs + 1] = f; descs[#descs + 1] = d end
    end
    out[#out + 1] = {id, record, writes, descs, found}
  else
    out[#out + 1] = false
  end
end
return out
"""
)

# This put's whole values, descriptors and the items of lists it stores afresh (all those
# fields are new: versions and lineages carry a random part) come in the script's last ARGV
# group when they are small (up to PUT_INLINE_BYTES: a turn's one or two messages, the
# descriptors, the input; then the put is this one script call), else in a plain HSET right
# before it in one MULTI/EXEC (big values stay out of Lua). When it stores nothing (fenced,
# or a list it extends changed underneath) it writes no inline field and takes the HSET's
# fields out again, so the thread is as before -- unless this very checkpoint is already
# stored (a retried put whose first attempt went through), and then they are its own and stay.
# An extension appends items to a lineage at the position where the list it extends ends;
# another checkpoint may have appended other items there already (a fork from an older
# checkpoint): then nothing is stored and the saver retries with a lineage of its own.
# KEYS[1..7] = ThreadKeys
# ARGV[1] = ttl seconds, ARGV[2] = fencing token or '', ARGV[3] = index member,
# ARGV[4] = checkpoint record,
# then n, and the n blob fields the HSET just before wrote,
# then m, and m item fields that must exist (the last stored item of each extended list),
# then c extensions, each: k, then k pairs (item field, item bytes) to append,
# then r, and r triples (the parent's index member, SHA-1 hex of its writes field, the field
#   with the writes whose list this put appended by reference): format 3, swapped only if
#   the field still holds what the saver wrote,
# then d, and d pairs (blob field, the blob by reference): the parent's dict-of-lists values
#   whose items this put stored (format 3), each replaced if still there (a version's blob is
#   written once, by the put of that version: its content is known),
# then s, and s pairs (blob field, value) to store: the small fields (n is then 0)
# returns 1 stored, 0 fenced, -1 an extended list's items are gone (pruned, deleted),
#   -2 another checkpoint appended other items at an extension's position
PUT = (
    LIB
    + r"""
local n = tonumber(ARGV[5])
local function undo()
  if n > 0 and redis.call('HEXISTS', KEYS[2], ARGV[3]) == 0 then
    each_chunk(ARGV, 6, 5 + n, function(...) redis.call('HDEL', KEYS[3], ...) end)
  end
end
if fenced(ARGV[2]) then undo() return 0 end
local pos = 6 + n
local m = tonumber(ARGV[pos])
for i = pos + 1, pos + m do
  if redis.call('HEXISTS', KEYS[3], ARGV[i]) == 0 then undo() return -1 end
end
pos = pos + m + 1
local first, c = pos + 1, tonumber(ARGV[pos])
for _ = 1, c do
  local k = tonumber(ARGV[first])
  for i = first + 1, first + 2 * k, 2 do
    local cur = redis.call('HGET', KEYS[3], ARGV[i])
    if cur and cur ~= ARGV[i + 1] then undo() return -2 end
  end
  first = first + 1 + 2 * k
end
first = pos + 1
for _ = 1, c do
  local k = tonumber(ARGV[first])
  each_chunk(ARGV, first + 1, first + 2 * k, function(...) redis.call('HSET', KEYS[3], ...) end)
  first = first + 1 + 2 * k
end
for i = first + 1, first + 3 * tonumber(ARGV[first]), 3 do
  local cur = redis.call('HGET', KEYS[5], ARGV[i])
  if cur and redis.sha1hex(cur) == ARGV[i + 1] then redis.call('HSET', KEYS[5], ARGV[i], ARGV[i + 2]) end
end
first = first + 1 + 3 * tonumber(ARGV[first])
for i = first + 1, first + 2 * tonumber(ARGV[first]), 2 do
  if redis.call('HEXISTS', KEYS[3], ARGV[i]) == 1 then redis.call('HSET', KEYS[3], ARGV[i], ARGV[i + 1]) end
end
first = first + 1 + 2 * tonumber(ARGV[first])
local s = tonumber(ARGV[first])
if s > 0 then
  each_chunk(ARGV, first + 1, first + 2 * s, function(...) redis.call('HSET', KEYS[3], ...) end)
end
redis.call('ZADD', KEYS[1], 0, ARGV[3])
redis.call('HSET', KEYS[2], ARGV[3], ARGV[4])
refresh(ARGV[1], (n > 0 or c > 0 or s > 0) and {2, 3} or {2})
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
if #ARGV > 2 then refresh(ARGV[1], {5}) end
return 1
"""
)

# Format 3: a checkpoint's writes in one field of the w hash, its index member (no widx
# entry: a sorted-set member costs ~135 bytes, a quarter of a turn's writes).
# KEYS[1..7] = ThreadKeys
# ARGV[1] = ttl seconds, ARGV[2] = fencing token or '', ARGV[3] = index member,
# ARGV[4] = the write records as netstrings, ARGV[5..] = per record '1' to replace an existing
#   write of the same (task_id, idx) / '0' to keep it
# returns 1, or 0 when fenced (nothing written)
PUT_WRITES_PACKED = (
    LIB
    + r"""
if fenced(ARGV[2]) then return 0 end
if #ARGV < 5 then return 1 end
local cur = redis.call('HGET', KEYS[5], ARGV[3])
if not cur then  -- the checkpoint's first writes (the common case): stored as sent
  redis.call('HSET', KEYS[5], ARGV[3], ARGV[4])
else
  local function key(r)  -- task_id and idx of a write record
    local p = items(r, 1, 6)
    return p[1] .. '\0' .. p[6]
  end
  local list, at = packed_writes(ARGV[3]), {}
  for i, r in ipairs(list) do at[key(r)] = i end
  local new = items(ARGV[4], 1, #ARGV - 4)
  for i, r in ipairs(new) do
    local k = key(r)
    if not at[k] then
      list[#list + 1] = r
      at[k] = #list
    elseif ARGV[4 + i] == '1' then
      list[at[k]] = r
    end
  end
  redis.call('HSET', KEYS[5], ARGV[3], pack_all(list))
end
refresh(ARGV[1], {5})
return 1
"""
)

# KEYS[1..5] = idx, cp, blobs, widx, w
# ARGV = index members of checkpoints to delete
# deletes them, their writes, every blob no remaining checkpoint refers to, and the items of
#   every lineage no remaining list or pending write (by reference) uses. A lineage in use
#   keeps all its items, also past the end of what is used of it: an item's name (lineage,
#   position) must never come to mean other content, since readers cache items by name (and a
#   put then forks instead).
# returns the number of checkpoints deleted
DROP = (
    LIB
    + r"""
local n = 0
for _, m in ipairs(ARGV) do
  n = n + redis.call('ZREM', KEYS[1], m)
  redis.call('HDEL', KEYS[2], m)
  redis.call('HDEL', KEYS[5], m)  -- format 3: all its writes
  local wf = writes_of(m)
  if #wf > 0 then
    redis.call('HDEL', KEYS[5], unpack(wf))
    redis.call('ZREM', KEYS[4], unpack(wf))
  end
end
local live, used, dead = {}, {}, {}
for _, record in ipairs(redis.call('HVALS', KEYS[2])) do
  for _, f in ipairs(blob_fields(record)) do live[f] = true end
end
for f in pairs(live) do
  local d = descriptor(f)
  if d and string.sub(d, 1, #DREF) == DREF then  -- key, channel, lineage, start, end ...
    local ns, parts = string.match(f, '^(%Z*)'), split0(d)
    for i = 2, #parts - 4, 5 do used[ns .. '\0' .. parts[i + 1] .. '\0' .. parts[i + 2]] = true end
  elseif d then
    local channel = string.match(f, '^(%Z*%z%Z*)%z')  -- ns\0channel
    local parts = split0(d)
    for i = 2, #parts - 2, 3 do used[channel .. '\0' .. parts[i]] = true end
  end
end
local w = redis.call('HGETALL', KEYS[5])  -- writes by reference keep their items' lineage
for i = 1, #w, 2 do
  local records = {w[i + 1]}
  if string.match(w[i], '^%Z*%z%Z*$') then records = packed_writes(w[i]) end  -- format 3
  for _, r in ipairs(records) do
    local p = items(r, 1, 4)
    if p[3] == REF then
      used[string.match(w[i], '^(%Z*)') .. '\0' .. p[2] .. '\0' .. string.match(p[4], '^(%Z*)')] = true
    end
  end
end
for _, f in ipairs(redis.call('HKEYS', KEYS[3])) do
  local lineage = string.match(f, '^(%Z*%z%Z*%z%Z*)%z%d+$')
  if lineage then
    if not used[lineage] then dead[#dead + 1] = f end
  elseif not live[f] then
    dead[#dead + 1] = f
  end
end
each_chunk(dead, 1, #dead, function(...) redis.call('HDEL', KEYS[3], ...) end)
return n
"""
)

# KEYS[1..5] = idx, cp, blobs, widx, w
# ARGV[1] = checkpoint_ns, ARGV[2] = checkpoint id ('' = the latest), ARGV[3..] = channels
# Walks the parent chain from the checkpoint's parent (its own writes are pending, not
#   history) until every channel met a non-empty blob (its seed), or the root.
# returns {{checkpoint id, {write records}, {item field, item, ...} its writes by reference
#   name} per ancestor, newest first},
#   {channel, ancestor index (1-based), seed field, ...}, {field, descriptor, ...} of seeds
#   that are lists stored item by item (the caller HMGETs the seeds: no big values in Lua)
DELTA_HISTORY = (
    LIB
    + r"""
local ns, id = ARGV[1], ARGV[2]
if id == '' then
  local latest = redis.call('ZREVRANGEBYLEX', KEYS[1], '(' .. ns .. '\1', '[' .. ns .. '\0', 'LIMIT', 0, 1)
  if latest[1] then id = string.sub(latest[1], #ns + 2) end
end
local function has_value(f)  -- 'empty\0' (6 bytes): the checkpoint has no value for the channel
  local n = redis.call('HSTRLEN', KEYS[3], f)
  return n > 0 and (n ~= 6 or redis.call('HGET', KEYS[3], f) ~= 'empty\0')
end
local function parent_of(record)
  local head, pos = items(record, 1, 1)
  local rest = items(record, pos, tonumber(head[1]) + 5)
  return rest[#rest]
end
local waiting, left = {}, 0
for i = 3, #ARGV do waiting[ARGV[i]] = true; left = left + 1 end
local record = id ~= '' and redis.call('HGET', KEYS[2], ns .. '\0' .. id)
local ancestors, seeds, descs = {}, {}, {}
local parent = record and parent_of(record) or ''
while parent ~= '' and left > 0 do
  local m = ns .. '\0' .. parent
  record = redis.call('HGET', KEYS[2], m)
  if not record then break end
  local writes, found = writes_with_items(m)
  ancestors[#ancestors + 1] = {parent, writes, found}
  for _, f in ipairs(blob_fields(record)) do
    local channel = string.match(f, '^%Z*%z(%Z*)%z')
    if waiting[channel] and has_value(f) then
      waiting[channel] = nil
      left = left - 1
      seeds[#seeds + 1] = channel; seeds[#seeds + 1] = #ancestors; seeds[#seeds + 1] = f
      local d = descriptor(f)
      if d then descs[#descs + 1] = f; descs[#descs + 1] = d end
    end
  end
  parent = parent_of(record)
end
return {ancestors, seeds, descs}
"""
)

# name -> source; the saver registers each once per client
SCRIPTS: dict[str, str] = {
    "load": LOAD,
    "put": PUT,
    "put_writes": PUT_WRITES,
    "put_writes_packed": PUT_WRITES_PACKED,
    "drop": DROP,
    "delta_history": DELTA_HISTORY,
}
