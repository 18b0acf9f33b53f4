--[[
mailguard schedule, forget: a run of the mail finished (sent, dropped or failed): remove its
entry wherever it waits (parked, promoting or watched), so the watchdog never publishes it.

KEYS[1]   "<ns>:{schedule:<queue>}:due": sorted set, member the mail id
KEYS[2]   "<ns>:{schedule:<queue>}:promoting": set of the mail ids being promoted
KEYS[3]   "<ns>:{schedule:<queue>}:payloads": hash, mail id -> the mail's payload (opaque bytes)
KEYS[4]   "<ns>:{schedule:<queue>}:watched": set of the mail ids whose entry is a watch
ARGV[1]   mail id

Reply: 1 when an entry was removed, else 0.
]]

redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('SREM', KEYS[2], ARGV[1])
redis.call('SREM', KEYS[4], ARGV[1])
return redis.call('HDEL', KEYS[3], ARGV[1])
