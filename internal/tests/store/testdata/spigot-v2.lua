-- spigot's model on the server: the line-by-line twin of Op.Apply (op.go).
--
-- ARGV[1]  now in µs since the epoch, or "" to read the server's TIME;
--          a key written on the caller's clock lives 60000 ms
--          (wire.ClockTTLSlack) longer, since its TTL runs on the server's;
--          with several keys, a leading "b" makes the call a batch
-- then, for each key KEYS[i], five arguments from ARGV[5i-3]:
--          the limit's kind and the action, as "tb.take", "tb.takeupto",
--          "tb.refund", "tb.reset" or "tb.peek" ("tb": a token bucket);
--          the bucket's capacity in tokens, scale (units per token) and
--          refill (units per µs); and N
--
-- With one key, it applies one operation. With several, all or nothing:
-- each on the state the ones before it left (a key named twice is charged
-- twice), and written only if no take or upto was denied; otherwise
-- nothing changes and every n moved is 0. (All the keys of a call are in
-- one hash slot on a cluster: the store sees to it.) A batch applies each
-- key's operation on its own, as that many calls with one key would, one
-- after the other; a key that holds another type or a value the script
-- cannot read fails alone, as {-1, 1, 0, 0} (WRONGTYPE) or {-1, 2, 0, 0}
-- (unreadable), and the others are applied.
-- (As few arguments as can say it: each one costs the server a Lua
-- string per call, and two more cost 4% of its throughput.)
--
-- Returns, for each key in order, {n moved, remaining, retry_ms (0:
-- allowed; -1: Never), reset_ms (-1: Never)}, as one flat array: four
-- integers a key, no more (each costs the client a decoded message).
--
-- A key holds "<kind>/<version> <fullat> <fields>": every kind and
-- version starts with FullAt, the µs from which the state counts as
-- absent whatever the key's TTL. A token bucket's is
-- "tb/2 <fullat> <stamp> <tokens> <scale>". The format before versions,
-- "<tokens> <stamp> <scale> [<fullat>]", is read as a token bucket; a state
-- of another kind or of a later version is read by its FullAt alone, as
-- the bucket that is full again then, and not sooner; anything else is an
-- error, never a full bucket. Each field is a decimal integer; a token
-- bucket's FullAt has at most 18 digits, and every other field is at most
-- 2^53 in magnitude, or the value is unreadable (wire.ParseState is the
-- Go statement of this reading).
--
-- Lua numbers are doubles: every integer here stays within 2^53 (NewBucket
-- guarantees it of a limit, and the reading above of a state), where
-- doubles are exact; divisions go through math.fmod, which is exact, and
-- numbers leave the script through string.format('%d') or an integer
-- reply, never tostring. The one quantity that may pass 2^53, a FullAt
-- after the year 2255, is only compared with now, and written digit by
-- digit. The caller sends any N above 2^53 as 2^54, which every action
-- decides as it does N.

local nkeys = #KEYS
if nkeys < 1 or #ARGV ~= 1 + 5 * nkeys then
	return redis.error_reply('ERR spigot: want 1 or more keys and 5 arguments each after the time, got ' .. nkeys .. ' keys and ' .. #ARGV .. ' arguments')
end
local clock, batch = ARGV[1], false
if nkeys > 1 and string.byte(clock, 1) == 98 then -- "b": a batch
	clock, batch = string.sub(clock, 2), true
end
local now, slack = tonumber(clock), 60000
if not now then
	if redis.replicate_commands then
		redis.replicate_commands() -- TIME before a write, on Redis < 5
	end
	local t = redis.call('TIME')
	now, slack = tonumber(t[1]) * 1000000 + tonumber(t[2]), 0
end

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
-- Go Duration holds; lag and us are 0 to 2^53, so lag+us is summed in ms.
local function ceilms(lag, us)
	if lag == 0 then
		return ceildiv(us, 1000)
	end
	local a, b = quo(lag, 1000), quo(us, 1000)
	local ms = a + b + ceildiv((lag - a * 1000) + (us - b * 1000), 1000)
	if ms > 9223372036854 then
		return -1
	end
	return ms
end

local EXACT = 9007199254740992 -- 2^53: doubles hold every integer up to it

-- exact returns x, the tonumber of the digits d (%-?%d+), when d is at most
-- 2^53 in magnitude, and nil otherwise. (Past 2^53 tonumber rounds: 2^53+1
-- reads as 2^53, so the digits decide there.)
local function exact(d, x)
	if x < EXACT and x > -EXACT then
		return x
	end
	if (x == EXACT or x == -EXACT) and string.match(d, '^%-?0*(%d+)$') == '9007199254740992' then
		return x
	end
	return nil
end

-- sum returns now + ms*1000 + us as a decimal string, exactly, when it is
-- past 2^53, where doubles skip integers (now >= -2^53, 0 <= us < 1000).
local function sum(now, ms, us)
	local q = quo(now, 1000)
	local hi, lo = q + ms, now - q * 1000 + us
	if lo >= 1000 then
		hi, lo = hi + 1, lo - 1000
	elseif lo < 0 then
		hi, lo = hi - 1, lo + 1000
	end
	return string.format('%d%03d', hi, lo)
end

-- pending holds, all or nothing, what each key will hold if the call is
-- kept: {state, ms} or {false} for none; reply holds, with several keys,
-- the decisions so far. With one key both stay nil, and in a batch
-- pending does: each key is written at once.
local pending, reply
if nkeys > 1 then
	reply = {}
	if not batch then
		pending = {}
	end
end
local denied = false

for i = 1, nkeys do
	repeat -- once: a key of a batch that fails breaks out, to the next key
	local key, a = KEYS[i], 5 * i - 3
	local action = ARGV[a]
	if action ~= 'tb.take' and action ~= 'tb.peek' and action ~= 'tb.takeupto' and action ~= 'tb.refund' and action ~= 'tb.reset' then
		return redis.error_reply('ERR spigot: unsupported kind or action ' .. tostring(action))
	end
	local capacity = tonumber(ARGV[a + 1])
	local scale = tonumber(ARGV[a + 2])
	local refill = tonumber(ARGV[a + 3])
	local n = tonumber(ARGV[a + 4])
	local max = capacity * scale

	-- The state now: a missing key is a full bucket.
	local tokens, stamp = max, now
	local v
	if pending and pending[key] then
		v = pending[key][1]
	elseif batch then
		v = redis.pcall('GET', key)
		if type(v) == 'table' and v.err then
			if string.sub(v.err, 1, 9) ~= 'WRONGTYPE' then
				return v -- the server's, not the key's: the call fails
			end
			reply[4 * i - 3], reply[4 * i - 2], reply[4 * i - 1], reply[4 * i] = -1, 1, 0, 0
			break
		end
	else
		v = redis.call('GET', key)
	end
	if v then
		local fd, sd, td, cd = string.match(v, '^tb/2 (%-?%d+) (%-?%d+) (%-?%d+) (%-?%d+)$')
		if not fd then -- before versions: "tokens stamp scale [fullat]"
			td, sd, cd, fd = string.match(v, '^(%-?%d+) (%-?%d+) (%-?%d+) (%-?%d+)$')
			if not td then
				td, sd, cd = string.match(v, '^(%-?%d+) (%-?%d+) (%-?%d+)$')
				fd = td and '0' -- stored before FullAt: unknown
			end
		end
		local full, s, t, sc, other
		if fd then -- a token bucket's
			full, s, t, sc = tonumber(fd), tonumber(sd), tonumber(td), tonumber(cd)
			if not (s < EXACT and s > -EXACT and t < EXACT and t > -EXACT and sc < EXACT and sc > -EXACT) then
				s, t, sc = exact(sd, s), exact(td, t), exact(cd, sc) -- at 2^53 or past it
				if not (s and t and sc) then
					full = nil
				end
			end
			if #fd > 18 and not (#fd == 19 and string.byte(fd, 1) == 45) then -- more than 18 digits
				full = nil
			end
		else -- another kind, or a later version: "kind/version fullat[ fields]"
			local kind, version, rest
			kind, version, fd, rest = string.match(v, '^(%l+)/(%d+) (%-?%d+)(.*)$')
			if fd and (rest == '' or string.byte(rest, 1) == 32) and not (kind == 'tb' and tonumber(version) <= 2) then
				full, other = exact(fd, tonumber(fd)), true -- (tb/2 and before: a format this script reads, broken)
			end
		end
		if not full then
			if batch then
				reply[4 * i - 3], reply[4 * i - 2], reply[4 * i - 1], reply[4 * i] = -1, 2, 0, 0
				break
			end
			return redis.error_reply('ERR spigot: unreadable state at ' .. key)
		end
		if full ~= 0 and now >= full then
			-- full again: as if never seen
		elseif not other then
			if sc > 0 then
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
		elseif full > now then -- another kind: full again at its FullAt, not sooner
			if full - now > quo(max, refill) then -- empty until the refill time before it
				tokens, stamp = 0, full - ceildiv(max, refill)
			else
				tokens = max - (full - now) * refill
			end
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

	local moved, retry, reset = 0, 0, 0
	local write = true -- whether the key's state changes
	if action == 'tb.take' or action == 'tb.peek' then
		if n > capacity then
			retry = -1
		elseif tokens >= n * scale then
			if action == 'tb.take' then
				tokens = tokens - n * scale
				moved = n
			end
		else
			retry = ceilms(lag, ceildiv(n * scale - tokens, refill))
		end
		if retry ~= 0 and action == 'tb.take' then
			denied = true
		end
		write = action == 'tb.take'
	elseif action == 'tb.takeupto' then
		local k = quo(tokens, scale)
		if n < k then
			k = n
		end
		if k > 0 or n == 0 then
			tokens = tokens - k * scale
			moved = k
		elseif capacity == 0 then
			retry = -1
		else
			retry = ceilms(lag, ceildiv(scale - tokens, refill))
		end
		if retry ~= 0 then
			denied = true
		end
	elseif action == 'tb.refund' then
		local add = max - tokens
		if n < capacity and n * scale < add then
			add = n * scale
		end
		tokens = tokens + add
		moved = ceildiv(add, scale)
	end

	if action == 'tb.reset' then
		moved, tokens = ceildiv(max - tokens, scale), max
	elseif tokens < max then
		reset = ceilms(lag, ceildiv(max - tokens, refill))
	end
	if write then
		-- FullAt: full again, and the clock caught up with the stamp (a
		-- full bucket on a clock that stepped back keeps its stamp until
		-- then). Until then the key holds sv for ms; from then, nothing.
		local sv, ms = false, reset
		if action ~= 'tb.reset' then
			local us = 0 -- µs past ms
			if ms < 0 then -- Never: keep it as long as a Duration holds
				ms, us = 9223372036854, 775
			end
			local fullat, digits = now + ms * 1000 + us, nil -- rounded past 2^53
			if fullat < stamp then
				fullat = stamp
				ms = ceildiv(stamp - now, 1000)
			elseif fullat >= EXACT then
				digits = sum(now, ms, us)
			end
			if digits then
				sv = string.format('tb/2 %s %d %d %d', digits, stamp, tokens, scale)
			elseif fullat > now then
				sv = string.format('tb/2 %d %d %d %d', fullat, stamp, tokens, scale)
			end
		end
		if pending then
			pending[key] = {sv, ms + slack}
		elseif sv then
			redis.call('SET', key, sv, 'PX', ms + slack)
		else
			redis.call('DEL', key)
		end
	end
	if not reply then -- one key: a table built whole costs less
		return {moved, quo(tokens, scale), retry, reset}
	end
	local r = 4 * i - 3
	reply[r], reply[r + 1], reply[r + 2], reply[r + 3] = moved, quo(tokens, scale), retry, reset
	until true
end

if batch then
	return reply
end
for i = 1, nkeys do
	local key = KEYS[i]
	local state = pending[key]
	if denied then
		reply[4 * i - 3] = 0
	elseif state then
		if state[1] then
			redis.call('SET', key, state[1], 'PX', state[2])
		else
			redis.call('DEL', key)
		end
		pending[key] = nil -- written
	end
end
return reply
