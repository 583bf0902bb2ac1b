package bench

import (
	"bytes"
	"encoding/csv"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"strconv"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/internal/wire"
	"github.com/spigot-go/spigot/store"
)

// CeilingArgs returns redis-benchmark's command line for EVALSHA of the
// script named sha, as the stores send a Take of cost from limit with the
// server's clock, against addr from concurrency connections, pipeline
// requests per round trip, requests in all: on one key (keys 1, the key
// ceiling:0) or on keys chosen at random (redis-benchmark replaces
// __rand_int__ by 12 digits below -r).
func CeilingArgs(addr, sha string, limit spigot.Limit, cost int64, concurrency, pipeline, keys int, requests int64) ([]string, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("spigot: bench: address %q: %w", addr, err)
	}
	args := []string{
		"-h", host, "-p", port,
		"-c", strconv.Itoa(concurrency), "-P", strconv.Itoa(pipeline), "-n", strconv.FormatInt(max(requests, 1), 10),
		"--csv",
	}
	key := "ceiling:0"
	if keys > 1 {
		key = "ceiling:__rand_int__"
		args = append(args, "-r", strconv.Itoa(keys))
	}
	argv := wire.NewArgs(nil).Op(spigot.Op{Limit: limit, N: cost})
	args = append(args, "EVALSHA", sha, "1", store.Key(store.DefaultPrefix, limit, key))
	return append(args, argv[:]...), nil
}

// RedisBenchmark runs redis-benchmark (or valkey-benchmark) at path with
// args (which include --csv) and returns the requests per second it
// reports.
func RedisBenchmark(path string, args []string) (float64, error) {
	tool := filepath.Base(path)
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(path, args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return 0, fmt.Errorf("spigot: bench: %s: %v\n%s%s", tool, err, stdout.Bytes(), stderr.Bytes())
	}
	if stderr.Len() > 0 { // e.g. "Error from server: NOSCRIPT …"
		return 0, fmt.Errorf("spigot: bench: %s: %s", tool, stderr.Bytes())
	}
	r := csv.NewReader(&stdout)
	r.FieldsPerRecord = -1
	recs, err := r.ReadAll()
	if err != nil {
		return 0, fmt.Errorf("spigot: bench: %s: reading its CSV: %v", tool, err)
	}
	for _, rec := range recs {
		if len(rec) >= 2 && rec[0] != "test" {
			rps, err := strconv.ParseFloat(rec[1], 64)
			if err != nil {
				return 0, fmt.Errorf("spigot: bench: %s: rps %q: %v", tool, rec[1], err)
			}
			return rps, nil
		}
	}
	return 0, errors.New("spigot: bench: " + tool + ": no result in its output")
}
