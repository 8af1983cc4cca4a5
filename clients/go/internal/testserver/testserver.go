// Package testserver starts the real leasegate binary ($LEASEGATE_BIN) for the Go tests: on a
// free 127.0.0.1 port, with its data in the test's temporary directory, stopped by its PID when
// the test ends. Every wait is bounded.
package testserver

import (
	"bufio"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"syscall"
	"testing"
	"time"
)

var ready = regexp.MustCompile(`^leasegate: listening on (http://127\.0\.0\.1:\d+)\s*$`)

// Server is a running leasegate.
type Server struct {
	URL  string
	cmd  *exec.Cmd
	done chan struct{}
}

// Start starts `leasegate serve` with extra arguments; the test is skipped, saying why, when
// LEASEGATE_BIN is not set.
func Start(t *testing.T, args ...string) *Server {
	t.Helper()
	bin := os.Getenv("LEASEGATE_BIN")
	if bin == "" {
		t.Skip("LEASEGATE_BIN is not set: point it at the leasegate binary (LEASEGATE_BIN=build/leasegate go test ./...)")
	}
	dir := t.TempDir()
	argv := append([]string{"serve", "--listen", "127.0.0.1:0", "--data", filepath.Join(dir, "leasegate.db")}, args...)
	cmd := exec.Command(bin, argv...)
	cmd.Dir = dir
	stderr, err := os.Create(filepath.Join(dir, "stderr.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer stderr.Close()
	cmd.Stderr = stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", bin, err)
	}
	s := &Server{cmd: cmd, done: make(chan struct{})}
	urls := make(chan string, 1)
	go func() { // reads stdout for the whole life of the process, so the pipe never fills
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if m := ready.FindStringSubmatch(sc.Text()); m != nil {
				select {
				case urls <- m[1]:
				default:
				}
			}
		}
		_ = cmd.Wait()
		close(s.done)
	}()
	t.Cleanup(s.Stop)
	select {
	case s.URL = <-urls:
	case <-s.done:
		log, _ := os.ReadFile(filepath.Join(dir, "stderr.log"))
		t.Fatalf("leasegate exited before listening:\n%s", log)
	case <-time.After(20 * time.Second):
		t.Fatal("leasegate did not print its listening line in 20 s")
	}
	return s
}

// Pause stops the server (SIGSTOP); Resume continues it.
func (s *Server) Pause()  { _ = s.cmd.Process.Signal(syscall.SIGSTOP) }
func (s *Server) Resume() { _ = s.cmd.Process.Signal(syscall.SIGCONT) }

// Stop ends the server: SIGTERM, then SIGKILL after 10 s.
func (s *Server) Stop() {
	select {
	case <-s.done:
		return
	default:
	}
	s.Resume()
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(10 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.done
	}
}

// ClosedURL is the URL of a loopback port where nothing listens (connections are refused).
func ClosedURL(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return "http://" + addr
}
