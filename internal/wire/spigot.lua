-- spigot's model on the server: the twin of store.Apply, laid out as the Go
-- model is: this header (what the script takes and returns, the state of
-- each kind, what the kinds share), the buckets, the windows and the log,
-- each a local function to read beside the Go model's file of its kinds,
-- and the main loop, which reads each key's state, hands it to its kind
-- (both in decide), and writes what that leaves.
--
-- ARGV[1]  now in µs since the epoch, or "" to read the server's TIME;
--          a key written on the caller's clock lives 60000 ms
--          (wire.ClockTTLSlack) longer, since its TTL runs on the server's;
--          with several keys, a leading "b" makes the call a batch
-- then, for each key KEYS[i], five arguments from ARGV[5i-3]:
--          the limit's kind and the action, "<kind>.<action>": the kind's
--          tag (the table below), the action "take", "takeupto", "refund",
--          "reset" or "peek", as in "sw.takeupto"; three parameters of the
--          limit: a bucket's capacity in tokens, scale (units per token)
--          and refill (units per µs), or a window's limit, length in µs and
--          offset in µs (0 but for a fixed window); and N
--
-- With one key, it applies one operation. With several, all or nothing:
-- each on the state the ones before it left (a key named twice is charged
-- twice), and written only if no take or takeupto was denied. Otherwise
-- nothing changes and every n moved is 0: each take or takeupto that was
-- denied replies its decision on the state the ones before it left, and
-- every other op (a take or takeupto that was not denied, a peek, a
-- refund, a reset) replies as a peek on its key's state as the call found
-- it, so that a limit that did not deny says what it holds: a peek of its
-- N for a take or a peek, of at most 1 for a takeupto, of 0 for a refund
-- or a reset (a key named twice: each of its ops that did not deny). (All
-- the keys of a call are in one hash slot on a cluster: the store sees to
-- it.) A batch applies each key's operation on its own, as that many calls
-- with one key would, one after the other; a key that holds another type
-- or a value the script cannot read fails alone, as {-1, 1, 0, 0, 0}
-- (WRONGTYPE) or {-1, 2, 0, 0, 0} (unreadable), with a sixth 0 for a leaky
-- bucket, and the others are applied. (As few arguments as can say it:
-- each one costs the server a Lua string per call.)
--
-- Returns, for each key in order, {n moved, remaining, retry_ms (0:
-- allowed; -1: Never), reset_ms (-1: Never), refill_ms (-1: Never)}, and
-- for a leaky bucket a sixth, its delay: the µs up to 2^53, -1 for Never,
-- and past 2^53, where doubles skip integers, -2 - (delay - 2^53); as one
-- flat array (each integer costs the client a decoded message). refill_ms
-- is Decision.RefillAfter: with the remaining tokens taken at now, the
-- retry_ms of a take of one more.
--
-- The kinds of limit (spigot.Kind), by their tag, the section that runs
-- them, and the state each keeps at a key: version 1 of every kind, the
-- format of spigot v0.1.0, which every later release reads.
--
--   tag  kind           section  state
--   tb   TokenBucket    buckets  "tb/1 <fullat> <stamp> <tokens> <scale>"
--   lb   LeakyBucket    buckets  "lb/1 <fullat> <stamp> <tokens> <scale>"
--   fw   FixedWindow    windows  "fw/1 <fullat> <stamp> <start> <window> <count>"
--   sw   SlidingWindow  windows  "sw/1 <fullat> <stamp> <start> <window> <count> <prev>"
--   sl   SlidingLog     log      "sl/1 <fullat> <stamp> <base> <width> <entries>"
--
-- Every state starts with its FullAt, the µs from which it counts as
-- absent whatever the key's TTL. A sliding log keeps one entry a token,
-- each the offset of its instant from base in exactly width digits (1 to
-- 15), written together: the script reads only the entries it needs (the
-- ones that left, from the front; the one a RetryAfter counts from; the
-- last), appends and drops with string.sub and string.rep, and rewrites
-- them all only when a new entry would not fit the width (a rebase, about
-- once in ten windows' worth of entries). A state of another kind or of a
-- later version, "<tag>/<version> <fullat>" and anything after a space, is
-- read by its FullAt alone (as the bucket that is full again then, and not
-- sooner, or as a window used up until then); anything else is
-- unreadable, never a full limit. Each field is a decimal integer; the
-- FullAt of a state of the limit's own kind has at most 18 digits, and
-- every other field is at most 2^53 in magnitude, or the value is
-- unreadable. wire.ParseState is the Go statement of this reading (read
-- below), and wire.FormatState of the writing.
--
-- Lua numbers are doubles: every integer here stays within 2^53 (the
-- constructors guarantee it of a limit, and the reading above of a
-- state), where doubles are exact; divisions go through math.fmod, which
-- is exact, or, in a bucket, where every dividend is 0 to 2^53, through %,
-- which is exact there (see the buckets); numbers leave the script through
-- string.format('%d'), an integer reply, or the digits they came in (now's
-- and the scale's), never tostring, but a TTL (ms below 10^14), which goes
-- to SET as a number that the server writes exactly. A FullAt past 2^53
-- (after the year 2255) is only compared with now, or taken apart digit by
-- digit, and written digit by digit. The caller sends any N above 2^53 as
-- 2^54, which every action decides as it does N.
--
-- The server runs this for every request, so its common path, a token
-- bucket's state read and written, makes few calls and few Lua values:
-- numbers come by arithmetic on their strings rather than a call to
-- tonumber where they have no leading 0 (miniredis's Lua, gopher-lua, reads
-- one there as octal): the arguments' and TIME's, and a state's whose
-- pattern rules it out; decide reads a token bucket's state itself,
-- its scale (most often the limit's) by its digits; a bucket writes the
-- digits of now and of the scale as they came, since each number
-- formatted is a sprintf; a function costs every call a closure, so the
-- windows and the log are made only for a call that has a key of theirs,
-- and a kind's helpers in its function; constants are literals, not
-- upvalues (2^53 is 9007199254740992, and 9223372036854 the most whole ms
-- a Go Duration holds); and a state's digits are matched with [0-9] (%d
-- calls isdigit).

-- ---------------------------------------------------------------------
-- What every kind shares: a FullAt's digits, and the reading of a state.

-- at returns base + ms*1000 + us (base at least -2^53, ms ≥ 0, 0 ≤ us <
-- 1000) as a decimal string, exactly: past 2^53, where doubles skip
-- integers, digit by digit.
local function at(base, ms, us)
	local x = base + ms * 1000 + us
	if x < 9007199254740992 then
		return string.format('%d', x)
	end
	local q = (base - math.fmod(base, 1000)) / 1000 -- toward zero
	local hi, lo = q + ms, base - q * 1000 + us
	if lo >= 1000 then
		hi, lo = hi + 1, lo - 1000
	elseif lo < 0 then
		hi, lo = hi - 1, lo + 1000
	end
	return string.format('%d%03d', hi, lo)
end

-- read returns the state a key's value v holds for a limit whose kind has
-- the tag kind, as wire.ParseState states it: the state's kind sk (its
-- tag, or 'x' for another kind or a later version, read by its FullAt
-- alone), its FullAt full, of the digits fd, and its fields f1 to f5 (a
-- bucket's stamp, tokens and scale; a window's stamp, start, window, count
-- and prev; a log's stamp, base, width, where its entries start in v (after
-- f4) and their number); or nothing for a value it cannot read.
local function read(v, kind)
	-- num returns the number of the digits d (%-?%d+) when it is at most
	-- 2^53 in magnitude, and nil otherwise. (Past 2^53 tonumber rounds:
	-- 2^53+1 reads as 2^53, so the digits decide there.)
	local function num(d)
		local x = tonumber(d)
		if x < 9007199254740992 and x > -9007199254740992 then
			return x
		end
		if (x == 9007199254740992 or x == -9007199254740992) and string.match(d, '^%-?0*(%d+)$') == '9007199254740992' then
			return x
		end
		return nil
	end

	-- The fields after the FullAt start at rp: they are matched in place,
	-- and a log's entries are never copied whole.
	local tag, ver, fd, rp = string.match(v, '^(%l+)/(%d+) (%-?%d+)()')
	if not tag then
		return
	end
	local known = tag == 'tb' or tag == 'lb' or tag == 'fw' or tag == 'sw' or tag == 'sl'
	local sk, f1, f2, f3, f4, f5
	if known and ver == '1' then
		if tag == 'tb' or tag == 'lb' then
			local d1, d2, d3 = string.match(v, '^ (%-?%d+) (%-?%d+) (%-?%d+)$', rp)
			if d1 then
				f1, f2, f3 = num(d1), num(d2), num(d3)
				sk = f1 and f2 and f3 and tag
			end
		elseif tag == 'sl' then
			-- The whole value's checks are patterns and lengths (C); the
			-- entries are read one by one only where the log needs them.
			local d1, d2, d3, ep = string.match(v, '^ (%-?%d+) (%-?%d+) ([1-9]%d?) ()', rp)
			if d1 then
				local len, w = #v - ep + 1, tonumber(d3)
				f1, f2 = num(d1), num(d2)
				if f1 and f2 and w <= 15 and len > 0 and math.fmod(len, w) == 0 and len <= 1000 * w
					and f2 <= 9007199254740992 - tonumber('1' .. string.rep('0', w)) + 1 and string.find(v, '^[0-9]*$', ep) then -- anchored, a range: the fastest scan (%d calls isdigit)
					f3, f4, f5, sk = w, ep - 1, len / w, tag
				end
			end
		else
			local d1, d2, d3, d4, d5
			if tag == 'fw' then
				d1, d2, d3, d4 = string.match(v, '^ (%-?%d+) (%-?%d+) (%-?%d+) (%-?%d+)$', rp)
				d5 = d4 and '0'
			else
				d1, d2, d3, d4, d5 = string.match(v, '^ (%-?%d+) (%-?%d+) (%-?%d+) (%-?%d+) (%-?%d+)$', rp)
			end
			if d5 then
				f1, f2, f3, f4, f5 = num(d1), num(d2), num(d3), num(d4), num(d5)
				sk = f1 and f2 and f3 and f4 and f5 and tag
			end
		end
	elseif known and tonumber(ver) <= 1 then
		return -- a version before the first, or the first's written otherwise
	elseif rp > #v or string.byte(v, rp) == 32 then
		sk = 'x'
	end
	if not sk or sk ~= 'x' and #fd > 18 and not (#fd == 19 and string.byte(fd, 1) == 45) then
		return -- broken, or a FullAt of more than 18 digits
	end
	local full = tonumber(fd)
	if sk ~= kind then
		full = num(fd) -- another kind's: within 2^53
		if not full then
			return
		end
	end
	return sk, full, fd, f1, f2, f3, f4, f5
end

-- ---------------------------------------------------------------------
-- The buckets: a token bucket, and a leaky bucket (Go's Apply on a
-- bucket, with delay, carry and fullAt).

-- bucket applies the action act of N n at now, on a limit of kind kind
-- ('tb' or 'lb'), capacity tokens of scale units each, refilling refill
-- units a µs, to the state read (sk, its FullAt full, and its stamp s,
-- tokens t and scale sc; sk nil for none); nowd and scaled are the digits
-- of now and scale, written as they are. It returns the reply's n moved,
-- remaining, retry_ms, reset_ms, refill_ms and delay, then what the key
-- holds from then (false: nothing; the main loop writes nothing after a
-- Peek) and for how many ms. A missing key is a full bucket. Every quotient but a
-- carry's has a dividend from 0 to 2^53 and a divisor of 1 or more, where
-- a % b (a - floor(a/b)*b) is exact: a/b, less than 1/b short of the next
-- integer, rounds to it only past 2^53/b, so floor(a/b) is the quotient's.
local function bucket(kind, act, capacity, scale, refill, n, now, sk, full, s, t, sc, nowd, scaled)
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
		if ms > 9223372036854 then
			return -1
		end
		return ms
	end

	local max = capacity * scale
	local tokens, stamp = max, now
	if not sk then
	elseif sk == kind then
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
	else -- another kind: full again at its FullAt, not sooner
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
	local moved, retry, reset, delay = 0, 0, 0, 0
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
	if kind == 'lb' and admitted then
		-- The delay, before this request's tokens were taken: until the
		-- bucket is full again, lag + the refill of what it lacked.
		local d = max - tokens - moved * scale
		local us = (d - d % refill) / refill
		if d % refill > 0 then
			us = us + 1
		end
		if us <= 9007199254740992 - lag then
			delay = lag + us
		else
			local past = (lag - 9007199254740992) + us -- exact: lag and us are 0 to 2^53
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
	local remaining = (tokens - frac) / scale
	-- The refill: with the remaining whole tokens taken, the fraction
	-- of a token left refills to one (after a Reset, from none and
	-- without lag: no state is left).
	local refillms
	if capacity == 0 then
		refillms = -1
	elseif act == 'reset' then
		refillms = wait(0, scale, refill)
	else
		refillms = wait(lag, scale - frac, refill)
	end
	if act == 'peek' or act == 'reset' then
		return moved, remaining, retry, reset, refillms, delay, false, 0
	end
	-- FullAt: full again, and the clock caught up with the stamp (a full
	-- bucket on a clock that stepped back keeps its stamp until then).
	-- Until then the key holds its state for ms; from then, nothing.
	local ms, us = reset, 0 -- us: µs past ms
	if ms < 0 then -- Never: keep it as long as a Duration holds
		ms, us = 9223372036854, 775
	end
	local fullat, fulld = now + ms * 1000 + us, nil -- rounded past 2^53
	if fullat < stamp then
		fullat = stamp
		ms = (stamp - now - (stamp - now) % 1000) / 1000
		if (stamp - now) % 1000 > 0 then
			ms = ms + 1
		end
	elseif fullat >= 9007199254740992 then
		fulld = at(now, ms, us) -- its digits, exactly
	end
	if not fulld and fullat <= now then
		return moved, remaining, retry, reset, refillms, delay, false, ms
	end
	-- Each number formatted costs a sprintf, and the stamp is most often
	-- now: the digits of the stamp and of the scale go into the format.
	if stamp ~= now then
		nowd = string.format('%d', stamp)
	end
	local f = 'tb/1 %'
	if kind == 'lb' then
		f = 'lb/1 %'
	end
	if fulld then
		return moved, remaining, retry, reset, refillms, delay, string.format(f .. 's ' .. nowd .. ' %d ' .. scaled, fulld, tokens), ms
	end
	return moved, remaining, retry, reset, refillms, delay, string.format(f .. 'd ' .. nowd .. ' %d ' .. scaled, fullat, tokens), ms
end

-- ---------------------------------------------------------------------
-- The windows and the log, and what they share (msafter and blocked),
-- are made by windowed for a call that has a key of theirs: a function
-- costs every call a closure, and the token bucket's path is the common
-- one. It returns window and log.
local function windowed()
	-- msafter returns us µs (at most 2^53 in magnitude) plus ms whole ms,
	-- rounded up to the ms, or -1 (Never) past what a Go Duration holds.
	local function msafter(us, ms)
		local q = (us - math.fmod(us, 1000)) / 1000 -- toward zero
		if q * 1000 < us then
			q = q + 1
		end
		q = q + ms
		if q > 9223372036854 then
			return -1
		end
		return q
	end

	-- blocked is a window's or a log's decision, at now, on a state of
	-- another kind, or of other windows, whose FullAt full (of the digits fd,
	-- at most 18 of them) is after now (Go's blocked): the limit of limit
	-- tokens is used up until then; only a Reset changes it, to the limit
	-- without state, whose refill_ms is fresh. It returns what the kinds do.
	local function blocked(act, limit, n, now, full, fd, fresh)
		if act == 'reset' then
			return limit, limit, 0, 0, fresh, 0, false, 0
		end
		-- The whole ms, rounded up, until full; past 2^53, from its digits.
		local left
		if full < 9007199254740992 then
			left = msafter(full - now, 0)
		else
			local q = (now - math.fmod(now, 1000)) / 1000 -- toward zero
			left = tonumber(string.sub(fd, 1, -4)) - q
			local d = tonumber(string.sub(fd, -3)) - (now - q * 1000) -- -1000 < d < 2000
			if d > 1000 then
				left = left + 2
			elseif d > 0 then
				left = left + 1
			end
			if left > 9223372036854 then
				left = -1
			end
		end
		local retry = 0
		if act ~= 'refund' and n > 0 then
			if n > limit and act ~= 'takeupto' then
				retry = -1
			else
				retry = left
			end
		end
		return 0, 0, retry, left, left, 0, nil, 0
	end

	-- ---------------------------------------------------------------------
	-- The windows: a fixed window, and a sliding window (Go's applyWindow,
	-- with windowRetry and fresh).

	-- window applies the action act of N n at now, on a limit of kind kind
	-- ('fw' or 'sw') of limit tokens in windows of w µs from the offset off,
	-- to the state read (sk, its FullAt full of the digits fd, and its stamp
	-- f1, start f2, window f3, count f4 and prev f5; sk nil for none), and
	-- returns what bucket does.
	local function window(kind, act, limit, w, off, n, now, sk, full, fd, f1, f2, f3, f4, f5)
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

		local wms = w / 1000
		local fixed = kind == 'fw'
		local rr = math.fmod(now, w) - off -- (now - off) mod w
		while rr < 0 do
			rr = rr + w
		end
		local start, stamp, cur, prev = now - rr, now, 0, 0
		local startT = start -- the window of now
		local fresh -- a Reset's refill: that of the limit without state
		if act == 'reset' then -- the limit taken whole in the window of now
			if fixed then
				fresh = msafter(startT - now, wms)
			else
				fresh = msafter(startT - now, wms + wms - quo((limit - 1) * wms, limit))
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
		else -- another kind or window: used up until its FullAt
			return blocked(act, limit, n, now, full, fd, fresh)
		end

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

		local moved, retry = 0, 0
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
			return math.min(used, limit), limit, 0, 0, fresh, 0, false, 0
		end
		local remaining = limit - cur - ceildiv(prev * (wms - e), wms)
		if remaining < 0 then
			remaining = 0
		end
		local k = 0 -- the windows from start until the counts no longer matter
		if cur > 0 and not fixed then
			k = 2
		elseif cur > 0 or (prev > 0 and e < wms) then
			k = 1
		end
		-- The refill: one more after the remaining tokens, in the window of
		-- the state left behind (none: the window of now).
		local refillms
		if k == 0 and act ~= 'peek' then
			refillms = wretry(startT, cur + remaining, 1)
		else
			refillms = wretry(start, cur + remaining, 1)
		end
		local reset, sv, ms = 0, false, 0
		if k > 0 then
			reset = msafter(start - now, k * wms)
			if act ~= 'peek' then
				ms = reset
				if ms < 0 then
					ms = 9223372036854
				end
				if fixed then
					sv = string.format('fw/1 %s %d %d %d %d', at(start, k * wms, 0), stamp, start, w, cur)
				else
					sv = string.format('sw/1 %s %d %d %d %d %d', at(start, k * wms, 0), stamp, start, w, cur, prev)
				end
			end
		end
		return moved, remaining, retry, reset, refillms, 0, sv, ms
	end

	-- ---------------------------------------------------------------------
	-- The log: a sliding log (Go's applyLog).

	-- log applies the action act of N n at now, on a sliding log of limit
	-- tokens in any window of w µs, to the state read (sk, its FullAt full of
	-- the digits fd, and its stamp f1, and its entries in le: base lb, width
	-- lw, from after lp, lk of them; sk nil for none), and returns what bucket
	-- does. Entry i (0 the first) is lb + the lw digits at lp + i × lw.
	local function log(act, limit, w, n, now, sk, full, fd, f1, le, lb, lw, lp, lk)
		local wms = w / 1000
		local function entry(i)
			return lb + tonumber(string.sub(le, lp + i * lw + 1, lp + i * lw + lw))
		end

		if sk == 'sl' then -- a log of this window only if its FullAt is its last entry plus w
			local last = entry(lk - 1)
			local x = last + w
			if full < 9007199254740992 and x < 9007199254740992 then
				if full ~= x then
					sk = 'x'
				end
			elseif at(last, wms, 0) ~= string.match(fd, '^0*(%d+)$') then
				sk = 'x'
			end
		end
		local stamp, first, count = now, 0, 0 -- first: the entries that left
		if not sk then
			le = nil
		elseif sk == 'sl' then
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
		else -- another kind or window: used up until its FullAt
			return blocked(act, limit, n, now, full, fd, wms)
		end

		-- lretry returns the ms from now until k ≤ limit more tokens fit:
		-- until the entry that must leave for them is a window old.
		local function lretry(k)
			return msafter(entry(first + count + k - limit - 1) - now, wms)
		end
		local moved, retry, added = 0, 0, 0 -- added: the tokens appended at stamp
		if act == 'take' or act == 'peek' then
			if n > limit then
				retry = -1
			elseif n == 0 or count + n <= limit then -- a Take of 0 is allowed, even over the limit
				if act == 'take' then
					added, moved = n, n
				end
			else
				retry = lretry(n)
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
				added, moved = k, k
			else
				retry = lretry(1)
			end
		elseif act == 'refund' then -- the most recent first: dropped from the end
			local k = n
			if count < k then
				k = count
			end
			moved, count = k, count - k
		else -- reset
			return math.min(count, limit), limit, 0, 0, wms, 0, false, 0
		end
		count = count + added
		local remaining = limit - count
		if remaining < 0 then
			remaining = 0
		end
		-- The refill: with the remaining tokens taken, the log holds the limit
		-- (or more), and one more fits when its oldest entry past the excess
		-- leaves; an empty log's is the first taken, at the stamp of the state
		-- left behind (none: now).
		local refillms
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
		elseif act ~= 'peek' then
			refillms = wms
		else
			refillms = msafter(stamp - now, wms)
		end
		local reset, sv, ms = 0, false, 0
		if count > 0 then
			local old = count - added -- the entries kept, from first
			local last = stamp
			if added == 0 then
				last = entry(first + old - 1)
			end
			reset = msafter(last - now, wms)
			if act ~= 'peek' then
				ms = reset
				if ms < 0 then
					ms = 9223372036854
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
					local top = 9007199254740992 - tonumber('1' .. string.rep('0', lw)) + 1
					if lb > top then
						lb = top
					end
					local f = '%0' .. lw .. 'd'
					for i = 1, old do
						xs[i] = string.format(f, xs[i] - lb)
					end
					body = table.concat(xs) .. string.rep(string.format(f, stamp - lb), added)
				end
				sv = string.format('sl/1 %s %d %d %d ', at(last, wms, 0), stamp, lb, lw) .. body
			end
		end
		return moved, remaining, retry, reset, refillms, 0, sv, ms
	end

	return window, log
end

-- ---------------------------------------------------------------------
-- The main loop: each key's op, its state read and handed to its kind
-- (decide), and what that leaves written; then, for a call all or nothing
-- that was denied, each op that did not deny decided again as a Peek on
-- the state its key was found in.

local KEYS, ARGV = KEYS, ARGV -- a global is a table lookup at each use
local nkeys = #KEYS
if nkeys < 1 or #ARGV ~= 1 + 5 * nkeys then
	return redis.error_reply('ERR spigot: want 1 or more keys and 5 arguments each after the time, got ' .. nkeys .. ' keys and ' .. #ARGV .. ' arguments')
end
local clock, batch = ARGV[1], false
if nkeys > 1 and string.byte(clock, 1) == 98 then -- "b": a batch
	clock, batch = string.sub(clock, 2), true
end
local now, nowd, slack -- nowd: the digits of now
if clock == '' then
	if redis.replicate_commands and not redis.REDIS_VERSION then
		redis.replicate_commands() -- TIME before a write, on Redis < 5 (7 has REDIS_VERSION)
	end
	local t = redis.call('TIME')
	now, nowd, slack = t[1] * 1000000 + t[2], t[1] .. string.sub('00000' .. t[2], -6), 0
else
	now, nowd, slack = clock + 0, clock, 60000
end
local window, log -- made by windowed

-- decide applies the action act of N n at now, on a limit of kind kind
-- whose parameters are p1, p2 (of the digits scaled) and p3, to v, the
-- value at its key (false: none), and returns what bucket does; for a
-- value it cannot read, moved -1 and remaining 2 (the reply of a key of a
-- batch that fails alone), and nothing to write. The main loop and the
-- second pass of a denied call both decide through it.
local function decide(kind, act, p1, p2, p3, n, scaled, v)
	-- The state: its kind sk, FullAt full (of the digits fd) and fields;
	-- sk nil for none, or once its FullAt has come (full again: as if
	-- never seen). A token bucket's as the script writes it is read here,
	-- the common path: its fields without a leading 0 but the tokens'
	-- (which may be 0), so that arithmetic reads them, and its scale most
	-- often the limit's; any other value by read.
	local sk, full, fd, f1, f2, f3, f4, f5
	if v then
		local sd, td, cd
		if kind == 'tb' then
			fd, sd, td, cd = string.match(v, '^tb/1 (%-?[1-9][0-9]*) (%-?[1-9][0-9]*) (%-?[0-9]+) (%-?[1-9][0-9]*)$')
		end
		if fd then
			full, f1, f2, f3 = fd + 0, sd + 0, tonumber(td), p2
			if cd ~= scaled then
				f3 = cd + 0
			end
			if f1 < 9007199254740992 and f1 > -9007199254740992 and f2 < 9007199254740992 and f2 > -9007199254740992
				and f3 < 9007199254740992 and f3 > -9007199254740992 and #fd <= 18 then
				sk = 'tb'
			end
		end
		if not sk then
			sk, full, fd, f1, f2, f3, f4, f5 = read(v, kind)
		end
		if not sk then
			return -1, 2, 0, 0, 0, 0
		elseif now >= full then
			sk = nil
		end
	end
	-- Tail calls: the kind's frame replaces this one.
	if kind == 'tb' or kind == 'lb' then
		return bucket(kind, act, p1, p2, p3, n, now, sk, full, f1, f2, f3, nowd, scaled)
	end
	if not window then
		window, log = windowed()
	end
	if kind == 'sl' then
		return log(act, p1, p2, n, now, sk, full, fd, f1, v, f2, f3, f4, f5)
	end
	return window(kind, act, p1, p2, p3, n, now, sk, full, fd, f1, f2, f3, f4, f5)
end

-- pending holds, all or nothing, what each key will hold if the call is
-- kept: {value, ms} or {false} for none; reply holds, with several keys,
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
	local key, a = KEYS[i], 5 * i - 3
	local action, scaled = ARGV[a], ARGV[a + 2]
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

	local v, fail -- fail: the code of a key of a batch that fails alone
	if pending and pending[key] then
		v = pending[key][1]
	elseif batch then
		v = redis.pcall('GET', key)
		if type(v) == 'table' and v.err then
			if string.sub(v.err, 1, 9) ~= 'WRONGTYPE' then
				return v -- the server's, not the key's: the call fails
			end
			fail = 1
		end
	else
		v = redis.call('GET', key)
	end

	-- The decision, and what the key holds from then (sv: nil unchanged,
	-- as after any Peek; false nothing) and for how many ms.
	local moved, remaining, retry, reset, refillms, delay, sv, ms
	if fail then
		moved, remaining, retry, reset, refillms, delay = -1, fail, 0, 0, 0, 0
	else
		moved, remaining, retry, reset, refillms, delay, sv, ms = decide(kind, act, ARGV[a + 1] + 0, scaled + 0, ARGV[a + 3] + 0, ARGV[a + 4] + 0, scaled, v)
		if moved < 0 and not batch then
			return redis.error_reply('ERR spigot: unreadable state at ' .. key)
		end
	end
	if retry ~= 0 and act ~= 'peek' then
		denied = true
	end

	if sv == nil or act == 'peek' then
	elseif pending then
		pending[key] = {sv, ms + slack}
	elseif sv then
		redis.call('SET', key, sv, 'PX', ms + slack)
	else
		redis.call('DEL', key)
	end
	if not reply then -- one key: a table built whole costs less
		if kind == 'lb' then
			return {moved, remaining, retry, reset, refillms, delay}
		end
		return {moved, remaining, retry, reset, refillms}
	end
	reply[r], reply[r + 1], reply[r + 2], reply[r + 3], reply[r + 4] = moved, remaining, retry, reset, refillms
	r = r + 5
	if kind == 'lb' then
		reply[r] = delay
		r = r + 1
	end
end

if batch then
	return reply
end
if not denied then
	for i = 1, nkeys do
		local key = KEYS[i]
		local state = pending[key]
		if state then
			if state[1] then
				redis.call('SET', key, state[1], 'PX', state[2])
			else
				redis.call('DEL', key)
			end
			pending[key] = nil -- written
		end
	end
	return reply
end

-- Denied: nothing is written, and every n moved is 0. An op that denied
-- (a take or takeupto) keeps its decision, on the state the ops before it
-- left, and its n moved is 0 already; every other op says what its limit
-- holds, not what it would have held had the call been kept (a client's
-- RateLimit fields of a limit that still holds a token must not say 0): a
-- Peek on its key's state as the call found it, which GET still reads, of
-- its N for a take or a peek, of at most 1 for a takeupto, of 0 for a
-- refund or a reset. The actions were checked by the main loop.
r = 1
for i = 1, nkeys do
	local a = 5 * i - 3
	local kind, act = string.match(ARGV[a], '^(%l%l)%.(%l+)$')
	if reply[r + 2] == 0 or (act ~= 'take' and act ~= 'takeupto') then
		local n = 0
		if act == 'take' or act == 'peek' then
			n = ARGV[a + 4] + 0
		elseif act == 'takeupto' then
			n = math.min(ARGV[a + 4] + 0, 1)
		end
		local moved, remaining, retry, reset, refillms, delay = decide(kind, 'peek', ARGV[a + 1] + 0, ARGV[a + 2] + 0, ARGV[a + 3] + 0, n, ARGV[a + 2], redis.call('GET', KEYS[i]))
		reply[r], reply[r + 1], reply[r + 2], reply[r + 3], reply[r + 4] = moved, remaining, retry, reset, refillms
		if kind == 'lb' then
			reply[r + 5] = delay
		end
	end
	if kind == 'lb' then
		r = r + 6
	else
		r = r + 5
	end
end
return reply
