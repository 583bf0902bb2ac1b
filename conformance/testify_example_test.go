package conformance_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/suite"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/clock"
	"github.com/spigot-go/spigot/clock/clocktest"
	"github.com/spigot-go/spigot/conformance"
)

// MapStoreSuite shows a store author who writes tests with testify's
// suite checking their store with the conformance suite: conformance.Run
// takes the suite's s.T(), and runs each case as a subtest of the suite's
// method, so a failing case is reported as
// TestMapStoreSuite/TestConformance/<case>. The suite's own tests sit
// beside it, with testify's assertions.
type MapStoreSuite struct {
	suite.Suite
	clk   *clocktest.Clock
	store *MapStore
}

// SetupTest gives each of the suite's own tests a new store; the
// conformance suite makes a store per case itself.
func (s *MapStoreSuite) SetupTest() {
	s.clk = clocktest.New(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	s.store = &MapStore{Clock: s.clk}
}

func (s *MapStoreSuite) TestConformance() {
	conformance.Run(s.T(), func(t *testing.T, clk clock.Clock) spigot.Store {
		return &MapStore{Clock: clk}
	})
}

func (s *MapStoreSuite) TestConformanceRealTime() {
	conformance.RunRealTime(s.T(), func(t *testing.T) spigot.Store {
		return &MapStore{Clock: clock.System()}
	})
}

// TestRefill is one of the author's own tests, in testify's style.
func (s *MapStoreSuite) TestRefill() {
	login := spigot.New(s.store, spigot.MustBucket("login", 2, spigot.PerSecond(1)))
	ctx := context.Background()
	for range 2 {
		a, err := login.Allow(ctx, "u")
		s.Require().NoError(err)
		s.True(a.Allowed())
	}
	a, err := login.Allow(ctx, "u")
	s.Require().NoError(err)
	s.False(a.Allowed())
	s.Equal(time.Second, a.RetryAfter)
	s.clk.Advance(a.RetryAfter)
	a, err = login.Allow(ctx, "u")
	s.Require().NoError(err)
	s.True(a.Allowed())
}

func TestMapStoreSuite(t *testing.T) {
	suite.Run(t, new(MapStoreSuite))
}
