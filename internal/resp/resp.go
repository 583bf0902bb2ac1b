// Package resp speaks just enough of the Redis protocol to set up and
// read a server outside the client libraries: one command on a new
// connection (Do), INFO (Info) and PING (Ping); and to play a server
// whose replies a test chooses (Fake). It is for tests, benchmarks and
// spigot bench, never for traffic.
package resp

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Ping sends PING to the server at addr and checks for PONG.
func Ping(addr string) error {
	reply, err := Do(addr, "PING")
	if err != nil {
		return err
	}
	if reply != "PONG" {
		return fmt.Errorf("PING answered %q", reply)
	}
	return nil
}

// Do sends one command to addr on a new connection and returns the first
// line of the reply without its RESP type byte ("+OK" gives "OK", ":5"
// gives "5"), or the whole text of a bulk string; an error reply is an
// error. It is for set-up (SCRIPT FLUSH, PTTL, INFO), not for traffic.
func Do(addr string, args ...string) (string, error) {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := c.Write([]byte(b.String())); err != nil {
		return "", err
	}
	r := bufio.NewReader(c)
	line, err := r.ReadString('\n')
	if err != nil {
		return "", err
	}
	line = strings.TrimSuffix(line, "\r\n")
	if line == "" {
		return "", fmt.Errorf("empty reply")
	}
	switch line[0] {
	case '-':
		return "", fmt.Errorf("%s", line[1:])
	case '$': // a bulk string: its text (a nil one gives "")
		n, err := strconv.Atoi(line[1:])
		if err != nil || n < 0 {
			return "", err
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return "", err
		}
		return string(buf[:n]), nil
	}
	return line[1:], nil
}

// Info returns the fields of INFO section from the server at addr
// ("used_cpu_user" → "0.123").
func Info(addr, section string) (map[string]string, error) {
	text, err := Do(addr, "INFO", section)
	if err != nil {
		return nil, err
	}
	m := make(map[string]string)
	for _, line := range strings.Split(text, "\r\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && !strings.HasPrefix(line, "#") {
			m[k] = v
		}
	}
	return m, nil
}

// Info returns the fields of INFO section; see the function Info.

// A Fake is a server that speaks RESP2 on a loopback port and answers
// each command with the Handler registered for its name: for tests of
// what a client does with replies a real server seldom sends (NOSCRIPT,
// a hang-up, a malformed reply). It answers PING with PONG and any other
// command with an "unknown command" error, as a server that does not know
// it would: a client that offers HELLO then speaks RESP2. It records the
// name of every command it receives. Its methods are safe for concurrent
// use.
type Fake struct {
	Addr string // 127.0.0.1:port

	l        net.Listener
	mu       sync.Mutex
	handlers map[string]Handler
	received []string
	conns    map[net.Conn]bool
	wg       sync.WaitGroup
}

// A Handler answers one command, whose name and arguments are args, on w.
type Handler func(w *Writer, args []string)

// NewFake starts a Fake on a free loopback port. Close stops it.
func NewFake() (*Fake, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	f := &Fake{Addr: l.Addr().String(), l: l, handlers: make(map[string]Handler), conns: make(map[net.Conn]bool)}
	f.wg.Add(1)
	go f.accept()
	return f, nil
}

// Handle makes h the answer to the command name (in any case).
func (f *Fake) Handle(name string, h Handler) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.handlers[strings.ToUpper(name)] = h
}

// Received returns the names of the commands received so far, in upper
// case, in the order they came.
func (f *Fake) Received() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.received...)
}

// Count returns how many commands named name (in any case) came.
func (f *Fake) Count(name string) int {
	n := 0
	for _, got := range f.Received() {
		if got == strings.ToUpper(name) {
			n++
		}
	}
	return n
}

// Close stops the server: it closes the listener and every connection,
// and waits for its goroutines.
func (f *Fake) Close() {
	f.l.Close()
	f.mu.Lock()
	for c := range f.conns {
		c.Close()
	}
	f.mu.Unlock()
	f.wg.Wait()
}

func (f *Fake) accept() {
	defer f.wg.Done()
	for {
		c, err := f.l.Accept()
		if err != nil {
			return
		}
		f.mu.Lock()
		f.conns[c] = true
		f.mu.Unlock()
		f.wg.Add(1)
		go f.serve(c)
	}
}

// serve answers the commands of one connection until it closes or a
// handler hangs up.
func (f *Fake) serve(c net.Conn) {
	defer f.wg.Done()
	defer func() {
		f.mu.Lock()
		delete(f.conns, c)
		f.mu.Unlock()
		c.Close()
	}()
	r := bufio.NewReader(c)
	w := &Writer{w: bufio.NewWriter(c)}
	for !w.hungUp {
		args, err := readCommand(r)
		if err != nil || len(args) == 0 {
			return
		}
		name := strings.ToUpper(args[0])
		f.mu.Lock()
		f.received = append(f.received, name)
		h := f.handlers[name]
		f.mu.Unlock()
		switch {
		case h != nil:
			h(w, args)
		case name == "PING":
			w.Status("PONG")
		default:
			w.Error(fmt.Sprintf("ERR unknown command '%s', with args beginning with: ", args[0]))
		}
		if w.w.Flush() != nil {
			return
		}
	}
}

// readCommand reads one command: an array of bulk strings.
func readCommand(r *bufio.Reader) ([]string, error) {
	n, err := readHeader(r, '*')
	if err != nil {
		return nil, err
	}
	args := make([]string, n)
	for i := range args {
		size, err := readHeader(r, '$')
		if err != nil {
			return nil, err
		}
		buf := make([]byte, size+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return nil, err
		}
		args[i] = string(buf[:size])
	}
	return args, nil
}

// readHeader reads a line such as "*3" or "$5" and returns its number.
func readHeader(r *bufio.Reader, kind byte) (int, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return 0, err
	}
	line = strings.TrimSuffix(line, "\r\n")
	if len(line) < 2 || line[0] != kind {
		return 0, fmt.Errorf("resp: want %c, got %q", kind, line)
	}
	n, err := strconv.Atoi(line[1:])
	if err != nil || n < 0 {
		return 0, fmt.Errorf("resp: bad length in %q", line)
	}
	return n, nil
}

// A Writer writes a Handler's reply, in RESP2.
type Writer struct {
	w      *bufio.Writer
	hungUp bool
}

// Status writes a simple string, such as OK.
func (w *Writer) Status(s string) { fmt.Fprintf(w.w, "+%s\r\n", s) }

// Error writes an error reply; msg starts with its code ("ERR …",
// "NOSCRIPT …").
func (w *Writer) Error(msg string) { fmt.Fprintf(w.w, "-%s\r\n", msg) }

// Ints writes an array of integers.
func (w *Writer) Ints(ns ...int64) {
	fmt.Fprintf(w.w, "*%d\r\n", len(ns))
	for _, n := range ns {
		fmt.Fprintf(w.w, ":%d\r\n", n)
	}
}

// Bulk writes a bulk string.
func (w *Writer) Bulk(s string) { fmt.Fprintf(w.w, "$%d\r\n%s\r\n", len(s), s) }

// Strings writes an array of bulk strings.
func (w *Writer) Strings(ss ...string) {
	fmt.Fprintf(w.w, "*%d\r\n", len(ss))
	for _, s := range ss {
		w.Bulk(s)
	}
}

// Nil writes the nil reply.
func (w *Writer) Nil() { w.w.WriteString("$-1\r\n") }

// HangUp closes the connection without a reply, once what was written
// before is sent.
func (w *Writer) HangUp() { w.hungUp = true }
