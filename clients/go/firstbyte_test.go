package leasegate_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"leasegate"
	"leasegate/internal/testserver"
)

// The first-byte watch (firstbyte.go, issue 37): a paused or unready server costs about two
// first-byte timeouts, not the request's timeout; a ready one keeps its long-polls.

// longTimeout is the request timeout of these tests' clients: a call that waited it out, rather
// than moving on after the first-byte timeout, would outlast the tests' bound.
const longTimeout = time.Minute

func watchingClient(t *testing.T, firstByte time.Duration, servers ...string) *leasegate.Client {
	t.Helper()
	c, err := leasegate.NewClient(leasegate.Config{Servers: servers, Owner: "go-test", Timeout: longTimeout,
		FirstByteTimeout: firstByte})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// metric is one sample of the server's /metrics (a line "name value").
func metric(t *testing.T, server, name string) float64 {
	t.Helper()
	resp, err := http.Get(server + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if fields := strings.Fields(sc.Text()); len(fields) == 2 && fields[0] == name {
			v, err := strconv.ParseFloat(fields[1], 64)
			if err != nil {
				t.Fatal(err)
			}
			return v
		}
	}
	t.Fatalf("no %s in %s/metrics", name, server)
	return 0
}

// within runs fn and fails the test unless it returns nil within bound (far less than
// longTimeout).
func within(t *testing.T, what string, fn func() error) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- fn() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	case <-time.After(bound):
		t.Fatalf("%s: still waiting after %v (the request's timeout is %v)", what, bound, longTimeout)
	}
}

func TestFirstByteTimeoutIsChecked(t *testing.T) {
	for _, d := range []time.Duration{50 * time.Millisecond, -time.Second} {
		_, err := leasegate.NewClient(leasegate.Config{Servers: []string{"http://127.0.0.1:1"}, FirstByteTimeout: d})
		if err == nil || !strings.Contains(err.Error(), "FirstByteTimeout") {
			t.Fatalf("FirstByteTimeout %v: %v", d, err)
		}
	}
}

// A paused server (SIGSTOP: its kernel still accepts connections) is left for the next one.
func TestAPausedServerIsLeftForTheNext(t *testing.T) {
	paused := testserver.Start(t)
	srv := testserver.Start(t)
	paused.Pause()
	defer paused.Resume()
	c := watchingClient(t, 300*time.Millisecond, paused.URL, srv.URL)
	var l *leasegate.Lease
	within(t, "an acquire with a paused first server", func() (err error) {
		l, err = c.Acquire(context.Background(), "go/fb-paused")
		return err
	})
	defer l.Release(context.Background())
	if l.Server() != srv.URL {
		t.Fatalf("granted by %s, not the running server", l.Server())
	}
	again := watchingClient(t, 300*time.Millisecond, paused.URL, srv.URL)
	within(t, "a status with the paused server first", func() error {
		st, err := again.Status(context.Background(), "go/fb-paused")
		if err == nil && !st.Held {
			err = fmt.Errorf("not held: %+v", st)
		}
		return err
	})
}

// A long-poll's answer comes only at its grant: the server says it is ready, and the wait goes
// on in the queue across many first-byte timeouts, never given up and sent again.
func TestALongPollOutlastsTheFirstByteTimeout(t *testing.T) {
	srv := testserver.Start(t)
	holder := acquire(t, newClient(t, srv.URL), "go/fb-long-poll", leasegate.TTL(time.Minute))
	before := metric(t, srv.URL, "leasegate_waiter_disconnects_total")
	c := watchingClient(t, 200*time.Millisecond, srv.URL)
	got := make(chan *leasegate.Lease, 1)
	go func() {
		l, err := c.Acquire(context.Background(), "go/fb-long-poll", leasegate.Wait(time.Minute))
		if err != nil {
			t.Errorf("the waiting acquire: %v", err)
		}
		got <- l
	}()
	status := newClient(t, srv.URL)
	waitFor(t, "the waiter in the queue", func() bool {
		st, err := status.Status(context.Background(), "go/fb-long-poll")
		return err == nil && st.Waiters == 1
	})
	time.Sleep(1500 * time.Millisecond) // seven first-byte timeouts pass while it waits
	if st, err := status.Status(context.Background(), "go/fb-long-poll"); err != nil || st.Waiters != 1 {
		t.Fatalf("after seven first-byte timeouts: %+v, %v", st, err)
	}
	_ = holder.Release(context.Background())
	var l *leasegate.Lease
	select {
	case l = <-got:
	case <-time.After(bound):
		t.Fatal("no grant after the release")
	}
	if l == nil {
		t.FailNow()
	}
	defer l.Release(context.Background())
	if after := metric(t, srv.URL, "leasegate_waiter_disconnects_total"); after != before {
		t.Fatalf("waiter disconnects %v -> %v: the long-poll was given up and sent again", before, after)
	}
}

// A renewal's bound is hard, /readyz probes included: on a paused server it ends, telling the
// loss, by the lease's bound, so before the server, continued a second after that bound (as the
// conformance runner's TOKEN-4 does), grants the next holder. With a first-byte timeout of a
// third of the TTL, the renewal's attempts probe /readyz on the way.
func TestARenewalOnAPausedServerEndsByTheLeasesBound(t *testing.T) {
	const ttl = 3 * time.Second
	srv := testserver.Start(t)
	c := watchingClient(t, time.Second, srv.URL)
	l := acquire(t, c, "go/fb-renew", leasegate.TTL(ttl))
	defer l.Release(context.Background())
	next := make(chan int64, 1) // the next holder's grant, in the server's ms
	go func() {
		var g struct {
			AcquiredAtMs int64 `json:"acquired_at_ms"`
		}
		err := waitingAcquire(srv.URL, "go/fb-renew", &g)
		if err != nil {
			t.Errorf("the next holder: %v", err)
		}
		next <- g.AcquiredAtMs
	}()
	waitFor(t, "the next holder in the queue", func() bool {
		st, err := newClient(t, srv.URL).Status(context.Background(), "go/fb-renew")
		return err == nil && st.Waiters == 1
	})
	srv.Pause()
	renewed := make(chan int64, 1)
	go func() {
		err := l.Renew(context.Background(), 0)
		renewed <- time.Now().UnixMilli()
		if !errors.Is(err, leasegate.ErrLeaseLost) {
			t.Errorf("a renewal on a paused server: %v", err)
		}
	}()
	// Every renewal the server took came before the pause: the lease ends by now + TTL.
	time.Sleep(ttl + time.Second)
	srv.Resume()
	var grantedAt, returnedAt int64
	select {
	case grantedAt = <-next:
	case <-time.After(bound):
		t.Fatal("the next holder was not granted")
	}
	select {
	case returnedAt = <-renewed:
	case <-time.After(bound):
		t.Fatal("the renewal did not return")
	}
	if grantedAt == 0 || returnedAt > grantedAt {
		t.Fatalf("the renewal returned at %d, after the next holder's grant at %d", returnedAt, grantedAt)
	}
}

// waitingAcquire takes name with a plain HTTP long-poll (not the client under test).
func waitingAcquire(server, name string, out interface{}) error {
	resp, err := http.Post(server+"/v1/locks/"+name+"/acquire", "application/json",
		strings.NewReader(`{"owner":"next","ttl_ms":10000,"wait_ms":30000}`))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		return fmt.Errorf("HTTP %d: %s", resp.StatusCode, body)
	}
	return json.Unmarshal(body, out)
}

// What /readyz says decides: 200 and 404 (a server too old to have it) keep the wait going,
// 503 gives the attempt up for the next server.
func TestReadyzDecides(t *testing.T) {
	srv := testserver.Start(t)
	for _, tc := range []struct {
		readyz int
		stays  bool
	}{{200, true}, {404, true}, {503, false}} {
		var probes atomic.Int32
		slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/readyz" {
				probes.Add(1)
				w.WriteHeader(tc.readyz)
				return
			}
			// The answer begins after three probes, or never (the client hangs up).
			for probes.Load() < 3 {
				select {
				case <-r.Context().Done():
					return
				case <-time.After(10 * time.Millisecond):
				}
			}
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, `{"name":"go/fb-readyz","held":false,"waiters":7}`) // 7: not the real server's
		}))
		c := watchingClient(t, 200*time.Millisecond, slow.URL, srv.URL)
		var st *leasegate.LockState
		within(t, fmt.Sprintf("readyz %d", tc.readyz), func() (err error) {
			st, err = c.Status(context.Background(), "go/fb-readyz")
			return err
		})
		slow.Close()
		if stayed := st.Waiters == 7; stayed != tc.stays {
			t.Fatalf("readyz %d: answered by the slow server %v, after %d probes", tc.readyz, stayed, probes.Load())
		}
		if got := probes.Load(); tc.stays && got < 3 || !tc.stays && got != 1 {
			t.Fatalf("readyz %d: %d probes", tc.readyz, got)
		}
	}
}
