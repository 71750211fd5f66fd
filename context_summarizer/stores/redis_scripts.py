"""The Lua scripts ``RedisStore`` runs: each is one atomic step on the server.

Redis runs a script alone (nothing else interleaves), so a checkpoint with its indexes, a lease
grant with its fencing token, and a calibration fold are each written whole or not at all. Some
scripts touch keys they compute from the store's prefix (an old index entry, an evicted
session's keys): fine on a standalone Redis (with or without replicas), not on Redis Cluster.
"""

from __future__ import annotations

PUT = """
-- KEYS: fence, checkpoint, session set, generation, sequence
-- ARGV: fence ('' for none), id, body, session set key, index key ('' when not applicable),
--       basis count, created_at
if ARGV[1] ~= '' then
  local current = tonumber(redis.call('GET', KEYS[1]) or '0')
  if current > tonumber(ARGV[1]) then return {0, current} end
end
local old = redis.call('HMGET', KEYS[2], 'seq', 'index', 'sessions')
local seq = old[1]
if not seq then seq = redis.call('INCR', KEYS[5]) end
if old[2] and old[2] ~= '' then redis.call('HDEL', old[2], ARGV[2]) end
if old[3] and old[3] ~= KEYS[3] then redis.call('SREM', old[3], ARGV[2]) end
redis.call('HSET', KEYS[2], 'body', ARGV[3], 'sessions', KEYS[3], 'index', ARGV[5],
           'count', ARGV[6], 'created', ARGV[7], 'seq', seq)
if ARGV[5] ~= '' then
  redis.call('HSET', ARGV[5], ARGV[2], ARGV[6] .. ' ' .. ARGV[7] .. ' ' .. seq)
end
redis.call('SADD', KEYS[3], ARGV[2])
redis.call('INCR', KEYS[4])
return {1, tonumber(seq)}
"""

UPDATE_BODY = """
-- KEYS: checkpoint, generation; ARGV: the body read before, the new body
if redis.call('HGET', KEYS[1], 'body') ~= ARGV[1] then return 0 end
redis.call('HSET', KEYS[1], 'body', ARGV[2])
redis.call('INCR', KEYS[2])
return 1
"""

TRY_LEASE = """
-- KEYS: lease, fence; ARGV: owner, ttl in ms. The lease key expires on the server's clock.
local holder = redis.call('GET', KEYS[1])
if holder then
  if holder ~= ARGV[1] then return false end
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return tonumber(redis.call('GET', KEYS[2]) or '0')
end
local token = redis.call('INCR', KEYS[2])
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return token
"""

RELEASE_LEASE = """
-- KEYS: lease; ARGV: owner
if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('DEL', KEYS[1]) end
return 0
"""

FOLD_CALIBRATION = """
-- KEYS: calibration; ARGV: reported, estimated, alpha, ttl in seconds
local keep = 1 - tonumber(ARGV[3])
local sums = redis.call('HMGET', KEYS[1], 'reported', 'estimated')
local reported = keep * tonumber(sums[1] or '0') + tonumber(ARGV[1])
local estimated = keep * tonumber(sums[2] or '0') + tonumber(ARGV[2])
local r = string.format('%.17g', reported)
local e = string.format('%.17g', estimated)
redis.call('HSET', KEYS[1], 'reported', r, 'estimated', e)
redis.call('EXPIRE', KEYS[1], ARGV[4])
return {r, e}
"""

LOG_REQUEST = """
-- KEYS: records, roll-up, active sessions, the namespace's active sessions
-- ARGV: body, namespace, session, at, model, tokens_sent, window, reported, cached,
--       compacted (0/1), records kept per session, sessions kept, member, prefix
local roll = KEYS[2]
redis.call('RPUSH', KEYS[1], ARGV[1])
redis.call('LTRIM', KEYS[1], -tonumber(ARGV[11]), -1)
if redis.call('EXISTS', roll) == 0 then
  redis.call('HSET', roll, 'namespace', ARGV[2], 'session', ARGV[3], 'requests', 0,
             'compactions', 0, 'tokens_peak', ARGV[6], 'reported', 0, 'cached', 0,
             'first', ARGV[4], 'last', ARGV[4])
end
redis.call('HSET', roll, 'model', ARGV[5], 'tokens_now', ARGV[6], 'window', ARGV[7])
redis.call('HINCRBY', roll, 'requests', 1)
redis.call('HINCRBY', roll, 'compactions', ARGV[10])
redis.call('HINCRBY', roll, 'reported', ARGV[8])
redis.call('HINCRBY', roll, 'cached', ARGV[9])
local at = tonumber(ARGV[4])
if tonumber(ARGV[6]) > tonumber(redis.call('HGET', roll, 'tokens_peak')) then
  redis.call('HSET', roll, 'tokens_peak', ARGV[6])
end
if at < tonumber(redis.call('HGET', roll, 'first')) then
  redis.call('HSET', roll, 'first', ARGV[4])
end
local last = redis.call('HGET', roll, 'last')
if at > tonumber(last) then
  redis.call('HSET', roll, 'last', ARGV[4])
  last = ARGV[4]
end
redis.call('ZADD', KEYS[3], last, ARGV[13])
redis.call('ZADD', KEYS[4], last, ARGV[13])
local prefix = ARGV[14]
while redis.call('ZCARD', KEYS[3]) > tonumber(ARGV[12]) do
  local gone = redis.call('ZPOPMIN', KEYS[3])[1]
  local ns = string.match(gone, '^([^:]*):')
  redis.call('ZREM', prefix .. 'active:' .. ns, gone)
  redis.call('DEL', prefix .. 'req:' .. gone, prefix .. 'roll:' .. gone)
end
return 1
"""

RECORD_CONVERSATION = """
-- KEYS: recording, recordings, the namespace's recordings
-- ARGV: body, at, member, recordings kept, prefix
redis.call('SET', KEYS[1], ARGV[1])
redis.call('ZADD', KEYS[2], ARGV[2], ARGV[3])
redis.call('ZADD', KEYS[3], ARGV[2], ARGV[3])
while redis.call('ZCARD', KEYS[2]) > tonumber(ARGV[4]) do
  local gone = redis.call('ZPOPMIN', KEYS[2])[1]
  local ns = string.match(gone, '^([^:]*):')
  redis.call('ZREM', ARGV[5] .. 'recs:' .. ns, gone)
  redis.call('DEL', ARGV[5] .. 'rec:' .. gone)
end
return 1
"""

RECORD_SUMMARIES = """
-- KEYS: the session's summary records, summary sessions, the namespace's summary sessions
-- ARGV: records kept per session, sessions kept, member, prefix, newest at, body...
for i = 6, #ARGV do redis.call('RPUSH', KEYS[1], ARGV[i]) end
redis.call('LTRIM', KEYS[1], -tonumber(ARGV[1]), -1)
local old = redis.call('ZSCORE', KEYS[2], ARGV[3])
if not old or tonumber(ARGV[5]) > tonumber(old) then
  redis.call('ZADD', KEYS[2], ARGV[5], ARGV[3])
  redis.call('ZADD', KEYS[3], ARGV[5], ARGV[3])
end
while redis.call('ZCARD', KEYS[2]) > tonumber(ARGV[2]) do
  local gone = redis.call('ZPOPMIN', KEYS[2])[1]
  local ns = string.match(gone, '^([^:]*):')
  redis.call('ZREM', ARGV[4] .. 'sums:' .. ns, gone)
  redis.call('DEL', ARGV[4] .. 'sum:' .. gone)
end
return 1
"""
