"""The Lua scripts of the Redis record store (:mod:`threadline.runs.records_redis`), each with
its KEYS, ARGV and reply.

Every key a script touches is one thread's (keys in :mod:`threadline.redis_keys`): they share
the thread's ``{thread_id}`` hash tag, so a script changes a thread's records atomically, also
on Redis Cluster. The one key outside that tag, the global active-run index, is passed as the
last KEYS only off a Cluster (on one, the store writes it in a command of its own). The run
scripts embed the turn lease's own Lua (:class:`threadline.lease.RedisTurnLease`): one
definition of a token.
"""

from __future__ import annotations

from threadline.lease import RedisTurnLease
from threadline.quotas import RedisQuotas

# KEYS[1] thread; ARGV[1] ttl, ARGV[2..] field/value pairs. Returns 1 if created, 0 if the
# thread exists.
CREATE_THREAD = """
    if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
    redis.call('HSET', KEYS[1], unpack(ARGV, 2))
    redis.call('EXPIRE', KEYS[1], ARGV[1])
    return 1
    """
# KEYS[1] thread; ARGV[1] ttl, ARGV[2..] field/value pairs. Only an existing record: an
# update racing a delete must not revive the thread. Returns 1 if updated.
UPDATE_THREAD = """
    if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
    redis.call('HSET', KEYS[1], unpack(ARGV, 2))
    redis.call('EXPIRE', KEYS[1], ARGV[1])
    return 1
    """
# KEYS[1] thread, KEYS[2] runs index, KEYS[3] run queue, KEYS[4] run, KEYS[5] heartbeat,
# KEYS[6] events, KEYS[7] lease, KEYS[8] fence counter, KEYS[9] (not on Redis Cluster) the
# active-run index; ARGV[1] 'reject' (multitask_strategy=reject) or the most active runs the
# thread may have before this one (0: no cap), ARGV[2] run id, ARGV[3] created µs, ARGV[4]
# ttl, ARGV[5] now, ARGV[6] heartbeat ms (0: none), ARGV[7] executor (the heartbeat's value,
# as in BEAT), ARGV[8] lease ms (0: do not take the lease), ARGV[9] first event's name,
# ARGV[10] its data, ARGV[11] the run's active-index member, ARGV[12] the lease token's suffix
# (RedisTurnLease.token_suffix), ARGV[13] '0' or the run's bytes toward the thread's quota (a
# RunCharge: KEYS[10] the thread's bytes, KEYS[11] the principal's threads, ARGV[14..18] the
# charge's limit .. ttl ms; never on Redis Cluster), ARGV[19] the run's owner, ARGV[20] '' or
# the thread's created_at as the caller last read it, ARGV[21..] run fields. Returns -1 no
# such thread: none, another owner's, or (ARGV[20]) one made again since (a caller that did
# not read the thread relies on it: Threads.known), -4 the bytes would pass QUOTA_THREAD_BYTES
# (nothing written but the thread's activity mark, as quotas.py's charge), -3 the run exists
# (nothing written), 0 rejected (thread has an active run), -2 the queue is full
# (QUOTA_QUEUED_RUNS_PER_THREAD), 1 queued behind another run, 2 queued at the head (its turn
# now); or, when it heads the queue, ARGV[8] is not 0 and the thread's lease is free: the
# lease's new token, the lease taken (as RedisTurnLease would) and the run "running" with its
# first event — one round trip for what took three. The heartbeat is set with the run, naming
# its executor: nobody may take it for an orphan before its executor starts. The active-run
# index is written before the run is queued (same step here; before it, on Cluster, where it
# is another slot).
CREATE_RUN = (
    RedisTurnLease.ACQUIRE_FUNCTION
    + RedisQuotas.CHARGE_FUNCTION
    + """
    local owner, made_at = unpack(redis.call('HMGET', KEYS[1], 'owner', 'created_at'))
    if owner ~= ARGV[19] or (ARGV[20] ~= '' and made_at ~= ARGV[20]) then return -1 end
    if ARGV[13] ~= '0' and charge(KEYS[10], KEYS[11], ARGV[13], unpack(ARGV, 14, 18)) < 0 then
      return -4
    end
    if redis.call('EXISTS', KEYS[4]) == 1 then return -3 end
    if ARGV[1] == 'reject' then
      if redis.call('ZCARD', KEYS[3]) > 0 then return 0 end
    elseif tonumber(ARGV[1]) > 0 and redis.call('ZCARD', KEYS[3]) >= tonumber(ARGV[1]) then
      return -2
    end
    if KEYS[9] then redis.call('ZADD', KEYS[9], ARGV[3], ARGV[11]) end
    local seq = redis.call('HINCRBY', KEYS[1], 'seq', 1)
    redis.call('HSET', KEYS[4], unpack(ARGV, 21))
    redis.call('ZADD', KEYS[2], ARGV[3], ARGV[2])
    redis.call('ZADD', KEYS[3], seq, ARGV[2])
    redis.call('HSET', KEYS[1], 'status', 'busy', 'updated_at', ARGV[5])
    for i = 1, 4 do redis.call('EXPIRE', KEYS[i], ARGV[4]) end
    if ARGV[6] ~= '0' then redis.call('SET', KEYS[5], ARGV[7], 'PX', ARGV[6]) end
    if redis.call('ZCARD', KEYS[3]) ~= 1 then return 1 end
    if ARGV[8] == '0' then return 2 end
    local token = acquire_lease(KEYS[7], KEYS[8], ARGV[8], ARGV[4], ARGV[12])
    if not token then return 2 end
    redis.call('HSET', KEYS[4], 'status', 'running')
    redis.call('XADD', KEYS[6], '*', 'e', ARGV[9], 'd', ARGV[10])
    redis.call('EXPIRE', KEYS[6], ARGV[4])
    return token
    """
)
# KEYS[1] thread, KEYS[2] run queue, KEYS[3] run, KEYS[4] events, KEYS[5] end,
# KEYS[6] heartbeat, KEYS[7] cancel requests, KEYS[8] lease, KEYS[9] the run's watch key,
# KEYS[10] the thread's, KEYS[11] the run's join key, KEYS[12] (not on Redis Cluster) the
# active-run index; ARGV[1] run id, ARGV[2] run status, ARGV[3] thread status, ARGV[4] now,
# ARGV[5] ttl, ARGV[6] result, ARGV[7] end event name, ARGV[8] TTL of kept events and of a
# result left for a joiner, ARGV[9] executor ('' : any), ARGV[10] '1': not if a cancel was
# requested, ARGV[11] the executor's lease token ('': none), ARGV[12] the run's active-index
# member, ARGV[13] '1': keep the events (a client can ask for them), ARGV[14] '1': the run
# failed (its result stays with its record), ARGV[15] '1': withheld — the caller knows of no
# client that asks for the events or the result, so it sent no events and the result only if
# the run failed; ARGV[16..] events the executor has not appended yet (name, data, …).
# First the lease is released if it is still the token's (what the executor did in a round
# trip of its own just before: a refused end changes nothing about it). A deleted or ended
# run is left as it is, and so is a run another executor took over (returns 0; their
# events are dropped). With ARGV[15], a client on another replica that streams the run or
# its thread, or waits for its result, means nothing is done and -1 is returned: the caller
# sends it all (the events and results of runs nobody asks for, whole states each, are most
# of what a run sends; issue 24). Else the events are appended if they are kept (ARGV[13],
# or such a client), then, with ARGV[10], a run a cancel was requested for is left running
# (returns the cancel's action). Else the status is written before the end event: a client
# that sees the end and then reads the run sees it finished; events not kept are deleted, the
# result is left on the end stream only for a joiner that waits (KEYS[11]); and the run
# leaves the active-run index (on Cluster the caller does that).
FINISH_RUN = (
    RedisTurnLease.RELEASE_FUNCTION
    + """
    if ARGV[11] ~= '' then release_lease(KEYS[8], ARGV[11]) end
    local st = redis.call('HGET', KEYS[3], 'status')
    if not st then
      redis.call('ZREM', KEYS[2], ARGV[1])
      if KEYS[12] then redis.call('ZREM', KEYS[12], ARGV[12]) end
      return 0
    end
    if st ~= 'pending' and st ~= 'running' then return 0 end
    local hb = redis.call('GET', KEYS[6])
    if ARGV[9] ~= '' and hb and hb ~= ARGV[9] then return 0 end
    local keep = ARGV[13] == '1' or redis.call('EXISTS', KEYS[9], KEYS[10]) > 0
    if ARGV[15] == '1' and (keep or redis.call('EXISTS', KEYS[11]) == 1) then return -1 end
    if keep and #ARGV > 15 then
      for i = 16, #ARGV, 2 do redis.call('XADD', KEYS[4], '*', 'e', ARGV[i], 'd', ARGV[i + 1]) end
      redis.call('EXPIRE', KEYS[4], ARGV[5])
    end
    if ARGV[10] == '1' then
      local action = redis.call('LINDEX', KEYS[7], 0)
      if action then return action end
    end
    redis.call('ZREM', KEYS[2], ARGV[1])
    redis.call('HSET', KEYS[3], 'status', ARGV[2], 'updated_at', ARGV[4])
    if ARGV[14] == '1' then redis.call('HSET', KEYS[3], 'result', ARGV[6]) end
    if redis.call('EXISTS', KEYS[1]) == 1 then
      if redis.call('ZCARD', KEYS[2]) == 0 then redis.call('HSET', KEYS[1], 'status', ARGV[3]) end
      redis.call('HSET', KEYS[1], 'updated_at', ARGV[4])
    end
    if keep then
      redis.call('XADD', KEYS[4], '*', 'e', ARGV[7], 'd', '')
      redis.call('EXPIRE', KEYS[4], ARGV[8])
    else
      redis.call('DEL', KEYS[4])
    end
    if redis.call('EXISTS', KEYS[11]) == 1 then
      redis.call('XADD', KEYS[5], '*', 'd', ARGV[6])
      redis.call('EXPIRE', KEYS[5], ARGV[8])
    end
    for i = 1, 3 do redis.call('EXPIRE', KEYS[i], ARGV[5]) end
    if KEYS[12] then redis.call('ZREM', KEYS[12], ARGV[12]) end
    return 1
    """
)

# KEYS[1] run, KEYS[2] cancel requests; ARGV[1] action, ARGV[2] ttl. Only while the run is
# active: a cancel either comes before the run's end (which FINISH_RUN then refuses) or is
# refused itself (returns 0). The run's 'cancel' field (its first action) shows it
# cancelled to readers at once. Returns 1 if requested.
REQUEST_CANCEL = """
    local st = redis.call('HGET', KEYS[1], 'status')
    if st ~= 'pending' and st ~= 'running' then return 0 end
    redis.call('HSETNX', KEYS[1], 'cancel', ARGV[1])
    redis.call('RPUSH', KEYS[2], ARGV[1])
    redis.call('EXPIRE', KEYS[2], ARGV[2])
    return 1
    """
# KEYS[1] run, KEYS[2] events; ARGV[1] status, ARGV[2] now, ARGV[3] ttl, ARGV[4] event name
# ('' for none), ARGV[5] event data. Only an existing run (a run deleted with its thread
# must not come back). Returns the event's id, '' without an event, false if no such run.
SET_RUN_STATUS = """
    if redis.call('EXISTS', KEYS[1]) == 0 then return false end
    redis.call('HSET', KEYS[1], 'status', ARGV[1], 'updated_at', ARGV[2])
    redis.call('EXPIRE', KEYS[1], ARGV[3])
    if ARGV[4] == '' then return '' end
    local id = redis.call('XADD', KEYS[2], '*', 'e', ARGV[4], 'd', ARGV[5])
    redis.call('EXPIRE', KEYS[2], ARGV[3])
    return id
    """

# KEYS[1] heartbeat; ARGV[1] executor, ARGV[2] ttl ms. Renews (or sets, if it lapsed) the
# heartbeat unless another executor holds it. Returns 1 if it is this executor's.
BEAT = """
    local hb = redis.call('GET', KEYS[1])
    if hb and hb ~= ARGV[1] then return 0 end
    redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
    return 1
    """
# KEYS[1] heartbeat, KEYS[2] run; ARGV[1] executor, ARGV[2] ttl ms. Takes over a run whose
# heartbeat lapsed. Returns its attempt number (>= 2), 0 if alive or no longer active.
CLAIM = """
    local st = redis.call('HGET', KEYS[2], 'status')
    if st ~= 'pending' and st ~= 'running' then return 0 end
    if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return 0 end
    return redis.call('HINCRBY', KEYS[2], 'attempt', 1) + 1
    """

# By the names the store calls them.
# KEYS[1] the thread expiry index; ARGV[1] now (ms), ARGV[2] retry (ms), ARGV[3] limit. Returns
# the thread ids due by now, each indexed again at now + retry (claimed by this caller).
CLAIM_EXPIRED = """
    local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, ARGV[3])
    for _, id in ipairs(due) do redis.call('ZADD', KEYS[1], ARGV[1] + ARGV[2], id) end
    return due
    """

SCRIPTS: dict[str, str] = {
    "claim_expired": CLAIM_EXPIRED,
    "create_thread": CREATE_THREAD,
    "update_thread": UPDATE_THREAD,
    "create_run": CREATE_RUN,
    "finish_run": FINISH_RUN,
    "request_cancel": REQUEST_CANCEL,
    "set_run_status": SET_RUN_STATUS,
    "beat": BEAT,
    "claim": CLAIM,
}
