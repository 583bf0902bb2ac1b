// Package sides is what the front doors' options share: one Option type
// for the two sides of a front door (httplimit's Middleware and Transport,
// grpclimit's Server and Client), each option configuring one side or
// both, and a panic that names an option given to a side it does not
// configure.
package sides

import "fmt"

// Names names a front door and its two sides in the panics of Of.
type Names struct {
	Package   string // "httplimit"
	Server    string // "Middleware"
	NewServer string // "New"
	Client    string // "Transport"
	NewClient string // "NewTransport"
}

// Of is what an option configures: the server side S that NewServer
// makes, or the client side C that NewClient makes; the other is nil.
type Of[S, C any] struct {
	S     *S
	C     *C
	Names *Names
}

// Server returns the server side that option configures, and panics when
// the option is given to the client side's constructor.
func (o *Of[S, C]) Server(option string) *S {
	if o.S == nil {
		n := o.Names
		panic(fmt.Sprintf("spigot: %s: %s: %s configures a %s (%s), not a %s", n.Package, n.NewClient, option, n.Server, n.NewServer, n.Client))
	}
	return o.S
}

// Client returns the client side that option configures, and panics when
// the option is given to the server side's constructor.
func (o *Of[S, C]) Client(option string) *C {
	if o.C == nil {
		n := o.Names
		panic(fmt.Sprintf("spigot: %s: %s: %s configures a %s (%s), not a %s", n.Package, n.NewServer, option, n.Client, n.NewClient, n.Server))
	}
	return o.C
}
