package testserver

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestShardIDsSettled reads nodes.conf as valkey-server 8.0 writes it: a
// replica whose shard id differs from its primary's would make the node
// fail to start again, so WaitOK waits until there is none.
func TestShardIDsSettled(t *testing.T) {
	const (
		primary = "aaaa 127.0.0.1:7000@17000,,tls-port=0,shard-id=s1 myself,master - 0 0 1 connected 0-16383\n"
		same    = "bbbb 127.0.0.1:7001@17001,,tls-port=0,shard-id=s1 slave,nofailover aaaa 0 1 1 connected\n"
		other   = "bbbb 127.0.0.1:7001@17001,,tls-port=0,shard-id=s2 slave,nofailover aaaa 0 1 1 connected\n"
		noIDs   = "aaaa 127.0.0.1:7000@17000 myself,master - 0 0 1 connected 0-16383\nbbbb 127.0.0.1:7001@17001 slave aaaa 0 1 1 connected\n"
		vars    = "vars currentEpoch 7 lastVoteEpoch 0\n"
	)
	for i, tt := range []struct {
		conf string
		want string // "" for settled, else a part of the error
	}{
		{primary + same + vars, ""},
		{same + primary, ""},
		{noIDs + vars, ""},
		{primary + other + vars, `replica bbbb shard id "s2" and its primary aaaa "s1"`},
	} {
		s := &Server{Addr: "127.0.0.1:7000", dir: t.TempDir()}
		if err := os.WriteFile(filepath.Join(s.dir, "nodes.conf"), []byte(tt.conf), 0o644); err != nil {
			t.Fatal(err)
		}
		err := s.shardIDsSettled()
		if (tt.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tt.want)) {
			t.Errorf("step %d: shardIDsSettled() = %v, want %q", i, err, tt.want)
		}
	}
}
