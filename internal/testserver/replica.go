package testserver

import (
	"fmt"
	"net"
	"strconv"
	"testing"
	"time"
)

// StartReplica starts a server of primary's kind that replicates primary
// (--replicaof), waits until it is in sync (its INFO replication says
// master_link_status:up), and stops it when tb ends. It sets primary's
// repl-diskless-sync-delay to 0, so that the first sync starts at once.
// The replica refuses writes, as a replica does by default
// (replica-read-only).
func StartReplica(tb testing.TB, primary *Server) *Server {
	tb.Helper()
	if _, err := primary.Do("CONFIG", "SET", "repl-diskless-sync-delay", "0"); err != nil { // sync at once
		tb.Fatalf("testserver: %v", err)
	}
	host, port, _ := net.SplitHostPort(primary.Addr)
	replica := Start(tb, primary.Kind, "--replicaof", host, port)
	waitState(tb, 10*time.Second, func() error {
		info, err := replica.Info("replication")
		if err != nil {
			return err
		}
		if info["master_link_status"] != "up" {
			return fmt.Errorf("%s replicating %s: master_link_status:%s", replica.Addr, primary.Addr, info["master_link_status"])
		}
		return nil
	})
	return replica
}

// CaughtUp waits until replica has received every write that s, its
// primary, had accepted when CaughtUp was called: until replica's
// replication offset reaches s's.
func (s *Server) CaughtUp(tb testing.TB, replica *Server) {
	tb.Helper()
	want, err := replOffset(s, "master_repl_offset")
	if err != nil {
		tb.Fatalf("testserver: %v", err)
	}
	waitState(tb, 10*time.Second, func() error {
		got, err := replOffset(replica, "slave_repl_offset")
		if err == nil && got < want {
			err = fmt.Errorf("%s is at offset %d of %s's %d", replica.Addr, got, s.Addr, want)
		}
		return err
	})
}

// replOffset returns the replication offset field of s's INFO replication.
func replOffset(s *Server, field string) (int64, error) {
	info, err := s.Info("replication")
	if err != nil {
		return 0, err
	}
	n, err := strconv.ParseInt(info[field], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%s: INFO replication %s:%q", s.Addr, field, info[field])
	}
	return n, nil
}

// waitState polls check until it returns nil, or fails tb with its last
// error after timeout.
func waitState(tb testing.TB, timeout time.Duration, check func() error) {
	tb.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := check()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			tb.Fatalf("testserver: after %v: %v", timeout, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
