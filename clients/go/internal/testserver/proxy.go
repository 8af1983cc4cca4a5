package testserver

import (
	"io"
	"net"
	"sync"
	"testing"
)

// Proxy is a TCP proxy on a free loopback port in front of a server, for the tests of clients
// that must survive cut connections: Cut closes every connection through it; while Paused, new
// connections are accepted but wait (nothing is sent to the server) until Resume.
type Proxy struct {
	URL      string
	listener net.Listener
	target   string

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	paused chan struct{} // closed when not paused
	count  int
}

// StartProxy proxies to target (host:port); it is stopped when the test ends.
func StartProxy(t *testing.T, target string) *Proxy {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	running := make(chan struct{})
	close(running)
	p := &Proxy{URL: "http://" + l.Addr().String(), listener: l, target: target,
		conns: map[net.Conn]struct{}{}, paused: running}
	go p.serve()
	t.Cleanup(p.stop)
	return p
}

// Connections is how many connections the proxy accepted.
func (p *Proxy) Connections() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.count
}

// Pause holds new connections until Resume.
func (p *Proxy) Pause() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.paused:
		p.paused = make(chan struct{})
	default:
	}
}

// Resume lets held and new connections through.
func (p *Proxy) Resume() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.paused:
	default:
		close(p.paused)
	}
}

// Cut closes every open connection, on both sides.
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		c.Close()
		delete(p.conns, c)
	}
}

func (p *Proxy) stop() {
	p.listener.Close()
	p.Resume()
	p.Cut()
}

func (p *Proxy) track(c net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.conns[c] = struct{}{}
}

func (p *Proxy) serve() {
	for {
		client, err := p.listener.Accept()
		if err != nil {
			return // the listener was closed
		}
		p.mu.Lock()
		p.count++
		paused := p.paused
		p.mu.Unlock()
		p.track(client)
		go p.relay(client, paused)
	}
}

// relay connects client to the target once the proxy is not paused, and copies both ways
// until either side closes.
func (p *Proxy) relay(client net.Conn, paused <-chan struct{}) {
	<-paused
	server, err := net.Dial("tcp", p.target)
	if err != nil {
		client.Close()
		return
	}
	p.track(server)
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		dst.Close()
		src.Close()
		done <- struct{}{}
	}
	go pipe(server, client)
	go pipe(client, server)
	<-done
	<-done
}
