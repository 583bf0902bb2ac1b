module github.com/spigot-go/spigot/store/valkey

go 1.26.0

require (
	github.com/spigot-go/spigot v0.0.0-00010101000000-000000000000
	github.com/valkey-io/valkey-go v1.0.79
)

require golang.org/x/sys v0.50.0 // indirect
