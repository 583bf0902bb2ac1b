package rueidis

// The package is generated from store/valkey: see internal/gen.
//go:generate go run ../../internal/gen/rueidis
