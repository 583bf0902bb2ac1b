-- spigot's model on the server: the line-by-line twin of Op.Apply (op.go).
--
-- ARGV[1]  now in µs since the epoch, or "" to read the server's TIME;
--          a key written on the caller's clock lives 60000 ms
--          (wire.ClockTTLSlack) longer, since its TTL runs on the server's;
--          with several keys, a leading "b" makes the call a batch
-- then, for each key KEYS[i], five arguments from ARGV[5i-3]:
--          the limit's kind and the action, "<kind>.<action>": the kind
--          "tb" (token bucket), "lb" (leaky bucket), "fw" (fixed window),
--          "sw" (sliding window) or "sl" (sliding log), the action "take",
--          "takeupto", "refund", "reset" or "peek", as in "sw.takeupto";
--          three parameters of the limit: a bucket's capacity in tokens,
--          scale (units per token) and refill (units per µs), or a
--          window's limit, length in µs and offset in µs (0 but for a
--          fixed window); and N
--
-- With one key, it applies one operation. With several, all or nothing:
-- each on the state the ones before it left (a key named twice is charged
-- twice), and written only if no take or upto was denied; otherwise
-- nothing changes and every n moved is 0. (All the keys of a call are in
-- one hash slot on a cluster: the store sees to it.) A batch applies each
-- key's operation on its own, as that many calls with one key would, one
-- after the other; a key that holds another type or a value the script
-- cannot read fails alone, as {-1, 1, 0, 0, 0} (WRONGTYPE) or {-1, 2, 0, 0,
-- 0} (unreadable), with a sixth 0 for a leaky bucket, and the others are
-- applied. (As few arguments as can say it: each one costs the server a
-- Lua string per call, and two more cost 4% of its throughput.)
--
-- Returns, for each key in order, {n moved, remaining, retry_ms (0:
-- allowed; -1: Never), reset_ms (-1: Never), refill_ms (-1: Never)}, and
-- for a leaky bucket a sixth, its delay: the µs up to 2^53, -1 for Never,
-- and past 2^53, where doubles skip integers, -2 - (delay - 2^53); as one
-- flat array (each integer costs the client a decoded message). refill_ms
-- is Decision.RefillAfter: with the remaining tokens taken at now, the
-- retry_ms of a take of one more.
--
-- A key holds "<kind>/<version> <fullat> <fields>": every kind and
-- version starts with FullAt, the µs from which the state counts as
-- absent whatever the key's TTL. wire.ParseState is the Go statement of
-- the formats and of their reading, and wire.FormatState of their writing:
--   "tb/2 <fullat> <stamp> <tokens> <scale>"           a token bucket
--   "lb/1 <fullat> <stamp> <tokens> <scale>"           a leaky bucket
--   "fw/1 <fullat> <stamp> <start> <window> <count>"   a fixed window
--   "sw/1 <fullat> <stamp> <start> <window> <count> <prev>"
--   "sl/2 <fullat> <stamp> <base> <width> <entries>"   a sliding log: one
--      entry a token, each the offset of its instant from base in exactly
--      width digits (1 to 15), written together: the script reads only
--      the entries it needs (the ones that left, from the front; the one a
--      RetryAfter counts from; the last), appends and drops with string.sub
--      and string.rep, and rewrites them all only when a new entry would not
--      fit the width (a rebase, about once in ten windows' worth of entries).
-- The format before versions, "<tokens> <stamp> <scale> [<fullat>]", is a
-- token bucket's; a state of another kind or of a later version is read
-- by its FullAt alone (as the bucket that is full again then, and not
-- sooner, or as a window used up until then); anything else is an error,
-- never a full limit. Each field is a decimal integer; the FullAt of a
-- state of the limit's own kind has at most 18 digits, and every other
-- field is at most 2^53 in magnitude, or the value is unreadable.
--
-- Lua numbers are doubles: every integer here stays within 2^53 (the
-- constructors guarantee it of a limit, and the reading above of a
-- state), where doubles are exact; divisions go through math.fmod, which
-- is exact, or, in a bucket's path, where every dividend is 0 to 2^53,
-- through %, which is exact there (see the bucket's path); numbers leave
-- the script through string.format('%d') or an integer reply, never
-- tostring. A FullAt past 2^53 (after the year 2255) is only compared with
-- now, or taken apart digit by digit, and written digit by digit. The
-- caller sends any N above 2^53 as 2^54, which every action decides as it
-- does N.
--
-- The server runs this for every request, so its common path, a token
-- bucket's state read and written, makes few calls and few Lua values:
-- numbers come by arithmetic on their strings rather than a call to
-- tonumber where they have no leading 0 (miniredis's Lua, gopher-lua, reads
-- one there as octal): the arguments' and TIME's, and a state's whose
-- pattern rules it out; helpers are made only on the paths that need them
-- (a function defined at the top costs every call a closure); and a
-- state's digits are matched with [0-9] (%d calls isdigit).

local nkeys = #KEYS
if nkeys < 1 or #ARGV ~= 1 + 5 * nkeys then
	return redis.error_reply('ERR spigot: want 1 or more keys and 5 arguments each after the time, got ' .. nkeys .. ' keys and ' .. #ARGV .. ' arguments')
end
local clock, batch = ARGV[1], false
if nkeys > 1 and string.byte(clock, 1) == 98 then -- "b": a batch
	clock, batch = string.sub(clock, 2), true
end
local now, slack
if clock == '' then
	if redis.replicate_commands and not redis.REDIS_VERSION then
		redis.replicate_commands() -- TIME before a write, on Redis < 5 (7 has REDIS_VERSION)
	end
	local t = redis.call('TIME')
	now, slack = t[1] * 1000000 + t[2], 0
else
	now, slack = tonumber(clock), 60000
end

local NEVER = 9223372036854 -- the most whole ms a Go Duration holds

local EXACT = 9007199254740992 -- 2^53: doubles hold every integer up to it

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
local r = 1 -- where the next key's reply starts

for i = 1, nkeys do
	repeat -- once: a key of a batch that fails breaks out, to the next key
	local key, a = KEYS[i], 5 * i - 3
	local action = ARGV[a]
	local kind, act = 'tb', nil
	if action == 'tb.take' then
		act = 'take'
	elseif action == 'tb.peek' then
		act = 'peek'
	elseif action == 'tb.takeupto' then
		act = 'takeupto'
	elseif action == 'tb.refund' then
		act = 'refund'
	elseif action == 'tb.reset' then
		act = 'reset'
	else
		kind, act = string.match(action, '^(%l%l)%.(%l+)$')
		if (kind ~= 'lb' and kind ~= 'fw' and kind ~= 'sw' and kind ~= 'sl') or (act ~= 'take' and act ~= 'peek' and act ~= 'takeupto' and act ~= 'refund' and act ~= 'reset') then
			return redis.error_reply('ERR spigot: unsupported kind or action ' .. tostring(action))
		end
	end
	local leaky, width = false, 5
	if kind == 'lb' then
		leaky, width = true, 6
	end
	local p1, p2, p3, n = ARGV[a + 1] + 0, ARGV[a + 2] + 0, ARGV[a + 3] + 0, ARGV[a + 4] + 0

	local v
	if pending and pending[key] then
		v = pending[key][1]
	elseif batch then
		v = redis.pcall('GET', key)
		if type(v) == 'table' and v.err then
			if string.sub(v.err, 1, 9) ~= 'WRONGTYPE' then
				return v -- the server's, not the key's: the call fails
			end
			reply[r], reply[r + 1], reply[r + 2], reply[r + 3], reply[r + 4] = -1, 1, 0, 0, 0
			if leaky then
				reply[r + 5] = 0
			end
			r = r + width
			break
		end
	else
		v = redis.call('GET', key)
	end

	-- The state: its kind sk ('old' before versions, 'x' another, read by
	-- its FullAt alone), FullAt (full, of the digits fd), and fields.
	local sk, full, fd
	local s, t, sc -- a bucket's stamp, tokens and scale
	local f1, f2, f3, f4, f5 -- a window's stamp, start, window, count, prev; a log's stamp
	local lb, lw, le, lp, lk -- a log's base, width, value, the place of its entries in it (after lp), their number
	if v then
		local sd, td, cd
		-- A token bucket's state as the script writes it, its fields without
		-- a leading 0 but the tokens', which may be 0, so that arithmetic
		-- reads them (see above).
		fd, sd, td, cd = string.match(v, '^tb/2 (%-?[1-9][0-9]*) (%-?[1-9][0-9]*) (%-?[0-9]+) (%-?[1-9][0-9]*)$')
		if fd then
			s, t, sc, full = sd + 0, tonumber(td), cd + 0, fd + 0
		end
		if fd and s < EXACT and s > -EXACT and t < EXACT and t > -EXACT and sc < EXACT and sc > -EXACT
			and #fd <= 18 and (kind == 'tb' or full < EXACT and full > -EXACT) then
			sk = 'tb' -- a token bucket's, every field within 2^53: read as it is
		else
			-- Any other value, read as the rules above say.
			full = nil

			-- exact returns x, the tonumber of the digits d (%-?%d+), when d is
			-- at most 2^53 in magnitude, and nil otherwise. (Past 2^53 tonumber
			-- rounds: 2^53+1 reads as 2^53, so the digits decide there.)
			local function exact(d, x)
				if x < EXACT and x > -EXACT then
					return x
				end
				if (x == EXACT or x == -EXACT) and string.match(d, '^%-?0*(%d+)$') == '9007199254740992' then
					return x
				end
				return nil
			end

			if not fd then
				fd, sd, td, cd = string.match(v, '^tb/2 (%-?%d+) (%-?%d+) (%-?%d+) (%-?%d+)$')
			end
			if fd then
				sk = 'tb'
			else
				-- num returns the number of the digits d if it is at most 2^53 in
				-- magnitude, and nil otherwise.
				local function num(d)
					return exact(d, tonumber(d))
				end

				-- version returns the version of the format this script writes for
				-- the kind tag, and nil for a kind it does not know.
				local function version(tag)
					if tag == 'tb' or tag == 'sl' then
						return 2
					elseif tag == 'lb' or tag == 'fw' or tag == 'sw' then
						return 1
					end
					return nil
				end

				-- (The fields after the FullAt start at rp: a log's entries are
				-- read in place, never copied whole.)
				local tag, ver, rest, rp
				tag, ver, fd, rp = string.match(v, '^(%l+)/(%d+) (%-?%d+)()')
				if not tag then -- before versions: "tokens stamp scale [fullat]"
					td, sd, cd, fd = string.match(v, '^(%-?%d+) (%-?%d+) (%-?%d+) (%-?%d+)$')
					if not td then
						td, sd, cd = string.match(v, '^(%-?%d+) (%-?%d+) (%-?%d+)$')
						fd = td and '0' -- stored before FullAt: unknown
					end
					sk = td and 'old'
				elseif tag ~= 'tb' and version(tag) and ver == string.format('%d', version(tag)) then
					if tag ~= 'sl' then
						rest = string.sub(v, rp)
					end
					if tag == 'lb' then
						sd, td, cd = string.match(rest, '^ (%-?%d+) (%-?%d+) (%-?%d+)$')
						sk = sd and tag
					elseif tag == 'sl' then
						-- The whole value's checks are patterns and lengths (C); the
						-- entries are read one by one only where the log needs them.
						local d1, d2, d3, ep = string.match(v, '^ (%-?%d+) (%-?%d+) ([1-9]%d?) ()', rp)
						if d1 then
							local len = #v - ep + 1
							f1, lb, lw = num(d1), num(d2), tonumber(d3)
							if f1 and lb and lw <= 15 and len > 0 and math.fmod(len, lw) == 0 and len <= 1000 * lw
								and lb <= EXACT - tonumber('1' .. string.rep('0', lw)) + 1 and string.find(v, '^[0-9]*$', ep) then -- anchored, a range: the fastest scan (%d calls isdigit)
								le, lp, lk = v, ep - 1, len / lw
								sk = tag
							end
						end
					else
						local d1, d2, d3, d4, d5
						if tag == 'fw' then
							d1, d2, d3, d4 = string.match(rest, '^ (%-?%d+) (%-?%d+) (%-?%d+) (%-?%d+)$')
							d5 = d4 and '0'
						else
							d1, d2, d3, d4, d5 = string.match(rest, '^ (%-?%d+) (%-?%d+) (%-?%d+) (%-?%d+) (%-?%d+)$')
						end
						if d5 then
							f1, f2, f3, f4, f5 = num(d1), num(d2), num(d3), num(d4), num(d5)
							sk = f1 and f2 and f3 and f4 and f5 and tag
						end
					end
				elseif (rp > #v or string.byte(v, rp) == 32) and not (version(tag) and tonumber(ver) <= version(tag)) then
					sk = 'x' -- (a known kind at this version or before: a format this script reads, broken)
				end
			end
			if sd then -- a bucket's
				s, t, sc = tonumber(sd), tonumber(td), tonumber(cd)
				if not (s < EXACT and s > -EXACT and t < EXACT and t > -EXACT and sc < EXACT and sc > -EXACT) then
					s, t, sc = exact(sd, s), exact(td, t), exact(cd, sc) -- at 2^53 or past it
					if not (s and t and sc) then
						sk = nil
					end
				end
			end
			if sk then
				full = tonumber(fd)
				if #fd > 18 and sk ~= 'x' and not (#fd == 19 and string.byte(fd, 1) == 45) then -- more than 18 digits
					full = nil
				elseif sk ~= kind and not (sk == 'old' and kind == 'tb') then -- another kind's: within 2^53
					full = exact(fd, full)
				end
			end
		end
		if not full then
			if batch then
				reply[r], reply[r + 1], reply[r + 2], reply[r + 3], reply[r + 4] = -1, 2, 0, 0, 0
				if leaky then
					reply[r + 5] = 0
				end
				r = r + width
				break
			end
			return redis.error_reply('ERR spigot: unreadable state at ' .. key)
		end
		if full ~= 0 and now >= full then
			sk = nil -- full again: as if never seen
		end
	end

	local moved, remaining, retry, reset, refillms, delay = 0, 0, 0, 0, 0, 0
	local write = act ~= 'peek' -- whether the key's state changes
	local sv, ms = false, 0 -- what the key holds then, and for how long
	local limit -- a window's or a log's
	local blocked = false

	if kind == 'tb' or leaky then
		-- A bucket: capacity, scale, refill. A missing key is a full bucket.
		-- Every quotient but a carry's has a dividend from 0 to 2^53 and a
		-- divisor of 1 or more, where a % b (a - floor(a/b)*b) is exact:
		-- a/b, less than 1/b short of the next integer, rounds to it only
		-- past 2^53/b, so floor(a/b) is the quotient's.
		local capacity, scale, refill = p1, p2, p3

		-- wait returns lag + ⌈a/b⌉ µs rounded up to the ms, or -1 (Never)
		-- past what a Go Duration holds; lag and a are 0 to 2^53, so their
		-- sum is taken in ms.
		local function wait(lag, a, b)
			local r = a % b
			local us = (a - r) / b
			if r > 0 then
				us = us + 1
			end
			local x, y = lag % 1000, us % 1000
			local ms = (lag - x) / 1000 + (us - y) / 1000
			if x + y > 1000 then
				ms = ms + 2
			elseif x + y > 0 then
				ms = ms + 1
			end
			if ms > NEVER then
				return -1
			end
			return ms
		end

		local max = capacity * scale
		local tokens, stamp = max, now
		if not sk then
		elseif sk == kind or (sk == 'old' and kind == 'tb') then
			if sc > 0 then
				if sc ~= scale then -- stored under another rate: whole tokens carry
					local whole = (t - math.fmod(t, sc)) / sc -- toward zero, as Go's
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
		elseif full > now and full ~= 0 then -- another kind: full again at its FullAt, not sooner (0 is none)
			local r = max % refill
			if full - now > (max - r) / refill then -- empty until the refill time before it
				tokens, stamp = 0, full - (max - r) / refill
				if r > 0 then
					stamp = stamp - 1
				end
			else
				tokens = max - (full - now) * refill
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
		local admitted = false

		if act == 'take' or act == 'peek' then
			if n > capacity then
				retry = -1
			elseif tokens >= n * scale then
				admitted = true
				if act == 'take' then
					tokens = tokens - n * scale
					moved = n
				end
			else
				retry = wait(lag, n * scale - tokens, refill)
			end
			if retry ~= 0 and act == 'take' then
				denied = true
			end
		elseif act == 'takeupto' then
			local k = (tokens - tokens % scale) / scale
			if n < k then
				k = n
			end
			if k > 0 or n == 0 then
				admitted = true
				tokens = tokens - k * scale
				moved = k
			elseif capacity == 0 then
				retry = -1
			else
				retry = wait(lag, scale - tokens, refill)
			end
			if retry ~= 0 then
				denied = true
			end
		elseif act == 'refund' then
			local add = max - tokens
			if n < capacity and n * scale < add then
				add = n * scale
			end
			tokens = tokens + add
			moved = (add - add % scale) / scale
			if add % scale > 0 then
				moved = moved + 1
			end
		end
		if leaky and admitted then
			-- The delay, before this request's tokens were taken: until the
			-- bucket is full again, lag + the refill of what it lacked.
			local d = max - tokens - moved * scale
			local us = (d - d % refill) / refill
			if d % refill > 0 then
				us = us + 1
			end
			if us <= EXACT - lag then
				delay = lag + us
			else
				local past = (lag - EXACT) + us -- exact: lag and us are 0 to 2^53
				if past > 216172782113783 then -- lag + us past what a Duration holds
					delay = -1
				else
					delay = -2 - past
				end
			end
		end

		if act == 'reset' then
			local d = max - tokens
			moved, tokens = (d - d % scale) / scale, max
			if d % scale > 0 then
				moved = moved + 1
			end
		elseif tokens < max then
			reset = wait(lag, max - tokens, refill)
		end
		local frac = tokens % scale
		remaining = (tokens - frac) / scale
		-- The refill: with the remaining whole tokens taken, the fraction
		-- of a token left refills to one (after a Reset, from none and
		-- without lag: no state is left).
		if capacity == 0 then
			refillms = -1
		elseif act == 'reset' then
			refillms = wait(0, scale, refill)
		else
			refillms = wait(lag, scale - frac, refill)
		end
		if write and act ~= 'reset' then
			-- FullAt: full again, and the clock caught up with the stamp (a
			-- full bucket on a clock that stepped back keeps its stamp until
			-- then). Until then the key holds sv for ms; from then, nothing.
			ms = reset
			local us = 0 -- µs past ms
			if ms < 0 then -- Never: keep it as long as a Duration holds
				ms, us = NEVER, 775
			end
			local fullat, digits = now + ms * 1000 + us, nil -- rounded past 2^53
			if fullat < stamp then
				fullat = stamp
				ms = (stamp - now - (stamp - now) % 1000) / 1000
				if (stamp - now) % 1000 > 0 then
					ms = ms + 1
				end
			elseif fullat >= EXACT then -- its digits, exactly, as sum's below
				local q = (now - math.fmod(now, 1000)) / 1000 -- toward zero
				local hi, lo = q + ms, now - q * 1000 + us
				if lo >= 1000 then
					hi, lo = hi + 1, lo - 1000
				elseif lo < 0 then
					hi, lo = hi - 1, lo + 1000
				end
				digits = string.format('%d%03d', hi, lo)
			end
			if leaky then
				if digits then
					sv = string.format('lb/1 %s %d %d %d', digits, stamp, tokens, scale)
				elseif fullat > now then
					sv = string.format('lb/1 %d %d %d %d', fullat, stamp, tokens, scale)
				end
			elseif digits then
				sv = string.format('tb/2 %s %d %d %d', digits, stamp, tokens, scale)
			elseif fullat > now then
				sv = string.format('tb/2 %d %d %d %d', fullat, stamp, tokens, scale)
			end
		end
	else
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

		-- sum returns now + ms*1000 + us as a decimal string, exactly, when
		-- it is past 2^53, where doubles skip integers (now >= -2^53,
		-- 0 <= us < 1000).
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

		-- msafter returns us µs (at most 2^53 in magnitude) plus ms whole ms,
		-- rounded up to the ms, or -1 (Never) past what a Go Duration holds.
		local function msafter(us, ms)
			local r = ceildiv(us, 1000) + ms
			if r > NEVER then
				return -1
			end
			return r
		end

		-- at returns base + ms*1000 (base at most 2^53 in magnitude, ms ≥ 0) as
		-- a decimal string, exactly.
		local function at(base, ms)
			local x = base + ms * 1000
			if x < EXACT then
				return string.format('%d', x)
			end
			return sum(base, ms, 0)
		end

		-- equals reports whether full, of the digits fd (at most 18 of them), is
		-- base + ms*1000 (base at most 2^53 in magnitude, ms ≥ 0), exactly.
		local function equals(fd, full, base, ms)
			local x = base + ms * 1000
			if full < EXACT and x < EXACT then
				return full == x
			end
			return at(base, ms) == string.match(fd, '^0*(%d+)$')
		end

		-- untilms returns the whole ms, rounded up, from now until full (whose
		-- digits are fd, at most 18 of them), or -1 (Never) past what a Go
		-- Duration holds.
		local function untilms(fd, full)
			if full < EXACT then
				return msafter(full - now, 0)
			end
			local q = quo(now, 1000)
			local ms = tonumber(string.sub(fd, 1, -4)) - q + ceildiv(tonumber(string.sub(fd, -3)) - (now - q * 1000), 1000)
			if ms > NEVER then
				return -1
			end
			return ms
		end

		local freshms -- a Reset's refill: that of the limit without state
		if kind ~= 'sl' then
			-- A fixed or sliding window: limit, window, offset.
			local w, off = p2, p3
			local wms = w / 1000
			local fixed = kind == 'fw'
			limit = p1
			local rr = math.fmod(now, w) - off -- (now - off) mod w
			while rr < 0 do
				rr = rr + w
			end
			local start, stamp, cur, prev = now - rr, now, 0, 0
			local startT = start -- the window of now
			if act == 'reset' then -- the limit taken whole in the window of now
				if fixed then
					freshms = msafter(startT - now, wms)
				else
					freshms = msafter(startT - now, wms + wms - quo((limit - 1) * wms, limit))
				end
			end
			if not sk then
			elseif sk == kind and f3 == w and (math.fmod(f2, w) == off or math.fmod(f2, w) + w == off) then
				if f1 > now then
					stamp = f1
				end
				local d = f2 - start
				if d == 0 then
					cur, prev = f4, f5
				elseif d == -w then -- the previous window
					prev = f4
				elseif f2 > start then -- the clock stepped back: still its window
					start, cur, prev = f2, f4, f5
				end
				if cur < 0 then cur = 0 elseif cur > limit then cur = limit end
				if prev < 0 then prev = 0 elseif prev > limit then prev = limit end
				if fixed then
					prev = 0
				end
			elseif full > now and full ~= 0 then -- another kind or window: used up until its FullAt
				blocked = true
			end
			if not blocked then
				-- The weighted count, in tokens × ms: cur×wms + prev×(wms−e) ≤
				-- limit×wms. e is the whole ms since start (0 if the clock is
				-- behind it).
				local e = now - start
				if e < 0 then
					e = 0
				end
				e = quo(e, 1000)
				if e > wms then
					e = wms
				end
				local used = cur + ceildiv(prev * (wms - e), wms)
				-- wretry returns the ms from now until k ≤ limit more tokens fit
				-- in the window from st that counts c, after prev.
				local function wretry(st, c, k)
					local free = limit - c - k
					if free >= 0 then -- prev's weight falls enough in this window
						return msafter(st - now, wms - quo(free * wms, prev))
					elseif fixed then
						return msafter(st - now, wms)
					end
					return msafter(st - now, wms + wms - quo((limit - k) * wms, c))
				end

				if act == 'take' or act == 'peek' then
					local free = limit - cur - n
					if n > limit then
						retry = -1
					elseif n == 0 or (free >= 0 and (prev == 0 or prev * (wms - e) <= free * wms)) then -- a Take of 0 is allowed, even over the limit
						if act == 'take' then
							cur = cur + n
							moved = n
						end
					else
						retry = wretry(start, cur, n)
					end
					if retry ~= 0 and act == 'take' then
						denied = true
					end
				elseif act == 'takeupto' then
					local k = limit - used
					if k < 0 then
						k = 0
					end
					if n < k then
						k = n
					end
					if k > 0 or n == 0 then
						cur = cur + k
						moved = k
					else
						retry = wretry(start, cur, 1)
						denied = true
					end
				elseif act == 'refund' then
					local k = n
					if cur < k then
						k = cur
					end
					cur = cur - k
					local j = n - k
					if prev < j then
						j = prev
					end
					prev = prev - j
					moved = k + j
				else -- reset
					moved, remaining, refillms = used, limit, freshms
					if limit < used then
						moved = limit
					end
				end
				if act ~= 'reset' then
					remaining = limit - cur - ceildiv(prev * (wms - e), wms)
					if remaining < 0 then
						remaining = 0
					end
					local k = 0 -- the windows from start until the counts no longer matter
					if cur > 0 and not fixed then
						k = 2
					elseif cur > 0 or (prev > 0 and e < wms) then
						k = 1
					end
					-- The refill: one more after the remaining tokens, in the
					-- window of the state left behind (none: the window of now).
					if k == 0 and write then
						refillms = wretry(startT, cur + remaining, 1)
					else
						refillms = wretry(start, cur + remaining, 1)
					end
					if k > 0 then
						reset = msafter(start - now, k * wms)
						if write then
							ms = reset
							if ms < 0 then
								ms = NEVER
							end
							if fixed then
								sv = string.format('fw/1 %s %d %d %d %d', at(start, k * wms), stamp, start, w, cur)
							else
								sv = string.format('sw/1 %s %d %d %d %d %d', at(start, k * wms), stamp, start, w, cur, prev)
							end
						end
					end
				end
			end
		else
			-- A sliding log: limit, window. Its entries le are read where needed:
			-- entry i (0 the first) is lb + the width lw digits at i × lw.
			local w = p2
			local wms = w / 1000
			limit = p1
			freshms = wms
			local function entry(i)
				return lb + tonumber(string.sub(le, lp + i * lw + 1, lp + i * lw + lw))
			end
			local stamp, first, count = now, 0, 0 -- first: the entries that left
			if not sk then
				le = nil
			elseif sk == 'sl' and equals(fd, full, entry(lk - 1), wms) then -- a log of this window
				if f1 > now then
					stamp = f1
				end
				-- The tokens older than a window have left it: the first entries,
				-- at or before now − w (read up to the first one after it).
				local cut = now - w
				while first < lk and entry(first) <= cut do
					first = first + 1
				end
				count = lk - first
			elseif full > now and full ~= 0 then -- another kind or window: used up until its FullAt
				blocked = true
			else
				le = nil
			end
			if not blocked then
				-- retry returns the ms from now until k ≤ limit more tokens fit:
				-- until the entry that must leave for them is a window old.
				local function lretry(k)
					return msafter(entry(first + count + k - limit - 1) - now, wms)
				end
				local added = 0 -- the tokens appended at stamp
				local function add(k)
					added, count = added + k, count + k
				end

				if act == 'take' or act == 'peek' then
					if n > limit then
						retry = -1
					elseif n == 0 or count + n <= limit then -- a Take of 0 is allowed, even over the limit
						if act == 'take' then
							add(n)
							moved = n
						end
					else
						retry = lretry(n)
					end
					if retry ~= 0 and act == 'take' then
						denied = true
					end
				elseif act == 'takeupto' then
					local k = limit - count
					if k < 0 then
						k = 0
					end
					if n < k then
						k = n
					end
					if k > 0 or n == 0 then
						add(k)
						moved = k
					else
						retry = lretry(1)
						denied = true
					end
				elseif act == 'refund' then -- the most recent first: dropped from the end
					local k = n
					if count < k then
						k = count
					end
					moved, count = k, count - k
				else -- reset
					moved, remaining, refillms = count, limit, wms
					if limit < count then
						moved = limit
					end
				end
				if act ~= 'reset' then
					remaining = limit - count
					if remaining < 0 then
						remaining = 0
					end
					-- The refill: with the remaining tokens taken, the log holds
					-- the limit (or more), and one more fits when its oldest entry
					-- past the excess leaves; an empty log's is the first taken,
					-- at the stamp of the state left behind (none: now).
					if count > 0 then
						local i = count - limit
						if i < 0 then
							i = 0
						end
						if i < count - added then
							refillms = msafter(entry(first + i) - now, wms)
						else
							refillms = msafter(stamp - now, wms)
						end
					elseif write then
						refillms = wms
					else
						refillms = msafter(stamp - now, wms)
					end
					if count > 0 then
						local old = count - added -- the entries kept, from first
						local last = stamp
						if added == 0 then
							last = entry(first + old - 1)
						end
						reset = msafter(last - now, wms)
						if write then
							ms = reset
							if ms < 0 then
								ms = NEVER
							end
							local body
							local off = stamp - (lb or 0)
							if added == 0 or (le and off >= 0 and off < tonumber('1' .. string.rep('0', lw))) then
								-- The entries kept, copied, and the new ones in the same width.
								body = ''
								if le then
									body = string.sub(le, lp + first * lw + 1, lp + (first + old) * lw)
								end
								if added > 0 then
									body = body .. string.rep(string.format('%0' .. lw .. 'd', off), added)
								end
							else
								-- A rebase: from the least instant, one digit more than the
								-- span needs (wire.FormatState's logBase).
								local xs, lo, hi = {}, stamp, stamp
								for i = 1, old do
									local x = entry(first + i - 1)
									xs[i] = x
									if x < lo then
										lo = x
									end
									if x > hi then
										hi = x
									end
								end
								lw = #string.format('%d', hi - lo)
								if lw < 15 then
									lw = lw + 1
								end
								lb = lo
								local top = EXACT - tonumber('1' .. string.rep('0', lw)) + 1
								if lb > top then
									lb = top
								end
								local f = '%0' .. lw .. 'd'
								for i = 1, old do
									xs[i] = string.format(f, xs[i] - lb)
								end
								body = table.concat(xs) .. string.rep(string.format(f, stamp - lb), added)
							end
							sv = string.format('sl/2 %s %d %d %d ', at(last, wms), stamp, lb, lw) .. body
						end
					end
				end
			end
		end

		if blocked then
			-- A state of another kind, or of other windows, before its FullAt:
			-- the limit is used up until then. Only a Reset changes it.
			local until_ = untilms(fd, full)
			reset, refillms, write = until_, until_, false
			if act == 'take' or act == 'peek' or act == 'takeupto' then
				if n == 0 then
				elseif n > limit and act ~= 'takeupto' then
					retry = -1
				else
					retry = until_
				end
				if retry ~= 0 and act ~= 'peek' then
					denied = true
				end
			elseif act == 'reset' then
				moved, remaining, reset, refillms, write = limit, limit, 0, freshms, true
			end
		end
	end

	if write then
		if pending then
			pending[key] = {sv, ms + slack}
		elseif sv then
			redis.call('SET', key, sv, 'PX', ms + slack)
		else
			redis.call('DEL', key)
		end
	end
	if not reply then -- one key: a table built whole costs less
		if leaky then
			return {moved, remaining, retry, reset, refillms, delay}
		end
		return {moved, remaining, retry, reset, refillms}
	end
	reply[r], reply[r + 1], reply[r + 2], reply[r + 3], reply[r + 4] = moved, remaining, retry, reset, refillms
	if leaky then
		reply[r + 5] = delay
	end
	r = r + width
	until true
end

if batch then
	return reply
end
r = 1
for i = 1, nkeys do
	local key = KEYS[i]
	local state = pending[key]
	if denied then
		reply[r] = 0
	elseif state then
		if state[1] then
			redis.call('SET', key, state[1], 'PX', state[2])
		else
			redis.call('DEL', key)
		end
		pending[key] = nil -- written
	end
	if string.sub(ARGV[5 * i - 3], 1, 2) == 'lb' then
		r = r + 6
	else
		r = r + 5
	end
end
return reply
