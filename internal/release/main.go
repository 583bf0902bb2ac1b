// Release releases every module of spigot's repository at one version, and
// rehearses that release as a new user meets it. .ci/release runs it:
//
//	.ci/release vX.Y.Z
//	.ci/release -rehearse [-version vX.Y.Z-rehearsal] [-keep]
//
// # The release
//
// The modules are those of the repository's go.work, in dependency order:
// each after every module of the workspace it requires, and otherwise in
// go.work's order (the root; the stores, grpclimit and otelspigot; …;
// cmd/spigot and internal/tests last). In a tree with no change and no
// untracked file, .ci/release vX.Y.Z makes one commit in which
//
//   - every module requires each module of the workspace that it requires
//     at vX.Y.Z, and go.work maps vX.Y.Z of each to its directory, so that
//     the workspace still builds from the tree;
//   - every module, in dependency order, is tidied and built on its own
//     (GOWORK=off) against a module proxy in a temporary directory that
//     serves every module before it at vX.Y.Z, zipped from the release's
//     tree as the go command zips a tag (golang.org/x/mod/zip), so that its
//     go.sum holds the other modules' lines at vX.Y.Z: a module's hash
//     covers its whole zip, its go.sum included, and no public proxy has
//     the tags before they are pushed.
//
// It then tags the commit, in dependency order: vX.Y.Z for the root,
// DIR/vX.Y.Z for the module in DIR, for every module a user can get (its
// path has no internal element and it has a package) and every module that
// another requires; and prints the git push of the commit and the tags.
//
// It refuses a version that is not vMAJOR.MINOR.PATCH[-PRERELEASE] or is
// v2 or more (the module paths have no major version suffix), a version
// without a pre-release that CHANGELOG.md has no "## vX.Y.Z" section for,
// a tree with changes or untracked files, a tree without a LICENSE at its
// root, a tag that exists, and a module that does not tidy or build on its
// own; it then leaves HEAD, the tree and the tags as it found them.
//
// # The rehearsal
//
// -rehearse clones HEAD into a temporary directory and, there:
//
//   - builds and runs the README's programs (the quickstart, the gRPC
//     guide's program, the Redis guide's) as the README says to against a
//     clone: each in a directory of the clone with a go.mod of its own,
//     added to the clone's workspace by go work use .;
//   - checks the release's refusals of a version that is not semantic, of
//     a version the changelog lacks and of an untracked file;
//   - releases at the test version (default: the next patch of the latest
//     release as the pre-release -rehearsal, v0.1.0-rehearsal before the
//     first), checks that a second release at it is refused, and runs
//     .ci/tidy -check at the release commit;
//   - serves the tags from a file:// module proxy (@v/list, .info, .mod,
//     .zip, made with golang.org/x/mod/zip from the tags), and checks that
//     each tagged module requires the others at exactly the version and
//     that every go.sum line of a spigot module is the hash of its tag's zip
//     or go.mod;
//   - builds and vets every module on its own (GOWORK=off, -mod=readonly)
//     at the release commit, from that proxy;
//   - acts as a new user: a new module, GOWORK=off, GOFLAGS=-mod=mod, no
//     replace anywhere, that proxy first in GOPROXY (then the machine's
//     module cache and GOPROXY), and the checksum database off for
//     github.com/spigot-go/spigot alone (GONOSUMDB; GOPRIVATE would also
//     bypass the proxy): it runs the README's go get lines at the version,
//     builds and runs the gRPC and Redis programs, the latter against a
//     redis-server that the rehearsal starts on a free loopback port, and
//     the quickstart, as a service, in a module of its own whose go list -m
//     all holds nothing but the modules whose packages it builds;
//   - runs the README's go install line at the version, into a GOBIN of its
//     own, then spigot version, which must print the version, and spigot
//     simulate;
//   - releases the next patch, raises the new user's store/redis to it,
//     which raises the core and leaves the others behind, then every
//     module with the README's go get github.com/spigot-go/spigot/...@VERSION,
//     and builds the user's programs again.
//
// Its builds use a module cache of its own, filled from the machine's
// module cache (read as a proxy) and GOPROXY, and the build cache with
// -trimpath. It removes everything it made, unless -keep.
//
// It is a module of its own, which no other requires, so that what it
// needs (golang.org/x/mod) stays out of the module graph of spigot's
// users.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
)

func main() {
	rehearsal := flag.Bool("rehearse", false, "rehearse a release in a temporary clone, then act as a new user")
	version := flag.String("version", "", "with -rehearse, the version of the rehearsal (default the next patch of the latest release, -rehearsal)")
	keep := flag.Bool("keep", false, "with -rehearse, keep the temporary directory and say where it is")
	root := flag.String("C", ".", "the repository's root")
	flag.Usage = func() {
		fmt.Fprintf(os.Stderr, "usage: .ci/release vX.Y.Z\n       .ci/release -rehearse [-version vX.Y.Z-rehearsal] [-keep]\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	var err error
	switch {
	case *rehearsal && flag.NArg() == 0:
		err = rehearse(ctx, *root, *version, *keep, os.Stdout)
	case !*rehearsal && flag.NArg() == 1 && *version == "" && !*keep:
		var rel *released
		if rel, err = release(ctx, *root, flag.Arg(0), os.Stdout); err == nil {
			fmt.Printf("release %s: to publish it, push the commit and the tags at once:\n\n\tgit push --atomic origin HEAD %s\n", flag.Arg(0), joinTags(rel.tags))
		}
	default:
		flag.Usage()
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "release: %v\n", err)
		stop()
		os.Exit(1)
	}
}
