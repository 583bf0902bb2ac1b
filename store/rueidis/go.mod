module github.com/spigot-go/spigot/store/rueidis

go 1.26.0

require (
	github.com/redis/rueidis v1.0.79
	github.com/spigot-go/spigot v0.0.0-00010101000000-000000000000
)

require golang.org/x/sys v0.50.0 // indirect
