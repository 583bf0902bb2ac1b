// Package peers holds benchmarks that compare spigot with the rate limiters
// a user would pick instead, in a module of its own, so that their
// requirements stay out of the module graph of spigot's users. It has no
// API: the benchmarks are in its tests.
//
// One run measures every peer in the same cells, named
// keys=…/goroutines=…/outcome=…/peer=…, the peers of a cell one after the
// other:
//
//   - keys: hot (every request on one key) or 100000 (each goroutine walks
//     them all, a prime stride apart);
//   - goroutines: 1 (a plain loop), 64 or 256 (b.RunParallel, with
//     goroutines/GOMAXPROCS per P: on a machine whose GOMAXPROCS does not
//     divide them, the count is rounded down to a multiple of it);
//   - outcome: admitted (a billion at once and a billion a second: nothing
//     is denied, and a key is full again before it is visited again) or
//     denied (one an hour, taken on every key before the timer starts).
//
// BenchmarkMemory compares store/memory with sethvargo/go-limiter's
// memorystore, a map of golang.org/x/time/rate limiters (under a mutex, and
// in a sync.Map), ulule/limiter's memory store and throttled's GCRA on its
// memstore; BenchmarkMemoryPerKey reports the heap each holds per live key
// (B/key). BenchmarkRedis compares store/redis, store/valkey and
// store/rueidis with go-redis/redis_rate, ulule/limiter's Redis store and
// throttled's go-redis store, on a redis-server it starts (see
// internal/testserver; SPIGOT_REQUIRE_SERVERS=1 makes a missing one a
// failure). The comments on memoryPeers and redisPeers say how each peer is
// set up and where its limit's semantics differ from spigot's token bucket.
// A test checks that every peer admits and denies as the cells expect.
//
// From the repository's root, on a machine as quiet as can be:
//
//	go test -run='^$' -bench=. -benchmem -count=5 ./internal/peers/... | tee /tmp/peers.txt
//
// (-bench=Memory or -bench=Redis for one half; -benchtime=0.2s for a quick
// look). On a shared machine, whose load changes from minute to minute,
// five runs of -count=1 spread each peer's samples over the whole time,
// where -count=5 takes a cell's five in a row. To compare spigot with a peer, cell by cell, rename the peer's
// column and let benchstat put them side by side, for example:
//
//	go install golang.org/x/perf/cmd/benchstat@latest
//	benchstat -col /peer -filter '/peer:(spigot OR sethvargo)' /tmp/peers.txt
//
// and to see how a change moves spigot, run the same command before and
// after it and compare the two files: benchstat /tmp/before.txt /tmp/after.txt.
package peers
