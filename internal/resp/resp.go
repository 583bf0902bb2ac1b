// Package resp speaks just enough of the Redis protocol to set up and
// read a server outside the client libraries: one command on a new
// connection (Do), INFO (Info) and PING (Ping). It is for tests,
// benchmarks and spigot bench, never for traffic.
package resp

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
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
