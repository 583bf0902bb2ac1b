module github.com/spigot-go/spigot

go 1.26.0
