-- spigot's token bucket: the line-by-line twin of Limit.Take (take.go).
--
-- KEYS[1]  the bucket's state: "tokens stamp scale fullat", integers:
--          spigot.State (tokens in the bucket's scaled units, stamp and
--          FullAt in µs); from FullAt on the state counts as absent
--          whatever the key's TTL
-- ARGV[1]  capacity in tokens
-- ARGV[2]  scale: units per token
-- ARGV[3]  refill: units per µs
-- ARGV[4]  cost in tokens, or "reset"
-- ARGV[5]  now in µs since the epoch, or "" to read the server's TIME
-- ARGV[6]  ms added to the key's TTL (0 with the server's clock)
--
-- Returns {allowed (0/1), remaining, retry_ms (-1: Never), reset_ms} for a
-- cost, or 1/0 (the bucket was not full) for "reset".
--
-- Lua numbers are doubles: every integer here stays below 2^53 (NewBucket
-- guarantees it), where doubles are exact; divisions go through math.fmod,
-- which is exact, and numbers leave the script through string.format('%d')
-- or an integer reply, never tostring.

local capacity = tonumber(ARGV[1])
local scale = tonumber(ARGV[2])
local refill = tonumber(ARGV[3])
local now = tonumber(ARGV[5])
if not now then
	if redis.replicate_commands then
		redis.replicate_commands() -- TIME before a write, on Redis < 5
	end
	local t = redis.call('TIME')
	now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local max = capacity * scale

-- quo returns a/b truncated toward zero, like Go's integer division.
local function quo(a, b)
	return (a - math.fmod(a, b)) / b
end

local function ceildiv(a, b)
	local q = quo(a, b)
	if q * b < a then
		q = q + 1
	end
	return q
end

-- ceilms returns lag+us µs rounded up to the ms, or -1 (Never) past what a
-- Go Duration holds.
local function ceilms(lag, us)
	if lag > 9223372036854 * 1000 - us then
		return -1
	end
	return ceildiv(lag + us, 1000)
end

-- The state now: a missing key is a full bucket.
local tokens, stamp = max, now
local v = redis.call('GET', KEYS[1])
if v then
	local t, s, sc, full = string.match(v, '^(%-?%d+) (%-?%d+) (%-?%d+) (%-?%d+)$')
	t, s, sc, full = tonumber(t), tonumber(s), tonumber(sc), tonumber(full)
	if sc and sc > 0 and now < full then
		if sc ~= scale then -- stored under another rate: whole tokens carry
			local whole = quo(t, sc)
			if whole >= capacity then
				t = max
			else
				t = whole * scale
			end
		end
		if t < 0 then
			t = 0
		elseif t > max then
			t = max
		end
		tokens, stamp = t, s
	end
end
if now > stamp then
	local e = now - stamp
	if e * refill >= max - tokens then
		tokens = max
	else
		tokens = tokens + e * refill
	end
	stamp = now
end
local lag = stamp - now -- > 0 only when the clock stepped back

if ARGV[4] == 'reset' then
	redis.call('DEL', KEYS[1])
	if tokens < max then
		return 1
	end
	return 0
end

local cost = tonumber(ARGV[4])
local allowed, retry, reset = 0, 0, 0
if cost > capacity then
	retry = -1
elseif tokens >= cost * scale then
	tokens = tokens - cost * scale
	allowed = 1
else
	retry = ceilms(lag, ceildiv(cost * scale - tokens, refill))
end
if tokens < max then
	reset = ceilms(lag, ceildiv(max - tokens, refill))
end

-- FullAt: full again, and the clock caught up with the stamp (a full
-- bucket on a clock that stepped back keeps its stamp until then).
local ms = reset
if ms < 0 then -- Never: keep it as long as a Duration holds
	ms = 9223372036854
end
local fullat = now + ms * 1000
if fullat < stamp then
	fullat = stamp
	ms = ceildiv(stamp - now, 1000)
end
if fullat <= now then
	redis.call('DEL', KEYS[1])
else
	local state = string.format('%d %d %d %d', tokens, stamp, scale, fullat)
	redis.call('SET', KEYS[1], state, 'PX', ms + tonumber(ARGV[6]))
end
return {allowed, quo(tokens, scale), retry, reset}
