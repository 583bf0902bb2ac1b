package rls

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
)

// TestStats: each limited descriptor of each request is one Stat, named by
// its domain and path: within the limit, near it (past 80 %), over it, and
// over in shadow mode; an unlimited or unmatched descriptor is none.
func TestStats(t *testing.T) {
	var mu sync.Mutex
	var got []string
	svc, _, _ := setup(t, `
domain: d
descriptors:
  - key: k
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: sh
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: free
    rate_limit: {unlimited: true}
`, WithStats(func(s Stat) {
		mu.Lock()
		got = append(got, fmt.Sprintf("%s %s %d over=%v near=%v shadow=%v", s.Domain, s.Descriptor, s.Hits, s.Over, s.Near, s.Shadow))
		mu.Unlock()
	}))
	for range 6 {
		if _, err := svc.ShouldRateLimit(context.Background(), request("d", desc("k", "v"))); err != nil {
			t.Fatal(err)
		}
	}
	for range 2 {
		if _, err := svc.ShouldRateLimit(context.Background(), request("d", desc("sh", "v"), desc("free", "x"), desc("none", "y"))); err != nil {
			t.Fatal(err)
		}
	}
	want := []string{
		"d d.k 1 over=false near=false shadow=false",
		"d d.k 1 over=false near=false shadow=false",
		"d d.k 1 over=false near=false shadow=false",
		"d d.k 1 over=false near=false shadow=false",
		"d d.k 1 over=false near=true shadow=false",
		"d d.k 1 over=true near=false shadow=false",
		"d d.sh 1 over=false near=true shadow=false",
		"d d.sh 1 over=true near=false shadow=true",
	}
	if !slices.Equal(got, want) {
		t.Errorf("stats:\n%v\nwant\n%v", got, want)
	}
}
