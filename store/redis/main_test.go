package redis_test

import (
	"testing"

	goredis "github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/logging"

	"github.com/spigot-go/spigot/internal/testserver"
)

// redisAddr is the address of the redis-server the examples use.
var redisAddr string

// TestMain turns off go-redis's logging, which would print every dial it
// retried in vain while a test has its server down, starts the examples'
// server, and says how many tests were skipped for want of a server
// binary.
func TestMain(m *testing.M) {
	goredis.SetLogger(&logging.VoidLogger{})
	testserver.MainWithServer(m, testserver.Redis, func(addr string) { redisAddr = addr })
}
