package leasegate_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"leasegate"
	"leasegate/internal/testserver"
)

// bound is how long a test waits for anything that must happen; never an assertion on time.
const bound = 20 * time.Second

func newClient(t *testing.T, servers ...string) *leasegate.Client {
	t.Helper()
	c, err := leasegate.NewClient(leasegate.Config{Servers: servers, Owner: "go-test", Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func acquire(t *testing.T, c *leasegate.Client, name string, opts ...leasegate.AcquireOption) *leasegate.Lease {
	t.Helper()
	l, err := c.Acquire(context.Background(), name, opts...)
	if err != nil {
		t.Fatalf("acquire %s: %v", name, err)
	}
	return l
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(bound)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s did not happen within %v", what, bound)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

func TestAcquireRenewRelease(t *testing.T) {
	srv := testserver.Start(t)
	c := newClient(t, srv.URL)
	ctx := context.Background()
	l := acquire(t, c, "go/basic", leasegate.TTL(5*time.Second), leasegate.Metadata(map[string]string{"why": "test"}))
	if l.Token() == 0 || l.Name() != "go/basic" || l.Owner() != "go-test" || l.Mode() != leasegate.Write || l.ID() == "" {
		t.Fatalf("unexpected lease %v (token %d, mode %q)", l, l.Token(), l.Mode())
	}
	if got := l.Header().Get("Fencing-Lease"); got != l.ID() {
		t.Fatalf("Header() = %q, want the lease id", got)
	}
	st, err := c.Status(ctx, "go/basic")
	if err != nil || !st.Held || st.Holder.Token != l.Token() || string(st.Holder.Metadata) != `{"why":"test"}` {
		t.Fatalf("status %+v, %v", st, err)
	}
	if err := l.Renew(ctx, 8*time.Second); err != nil {
		t.Fatal(err)
	}
	if l.TTL() != 8*time.Second || l.Err() != nil {
		t.Fatalf("after renewal: TTL %v, Err %v", l.TTL(), l.Err())
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatalf("a second release: %v", err)
	}
	if !errors.Is(l.Err(), leasegate.ErrReleased) || l.Context().Err() == nil || closed(l.Lost()) {
		t.Fatalf("released: Err %v, Context %v, Lost closed %v", l.Err(), l.Context().Err(), closed(l.Lost()))
	}
	st, err = c.Status(ctx, "go/basic")
	if err != nil || st.Held || st.LastToken != l.Token() {
		t.Fatalf("status after release %+v, %v", st, err)
	}
	next := acquire(t, c, "go/other")
	defer next.Release(ctx)
	if next.Token() <= l.Token() {
		t.Fatalf("token %d after %d", next.Token(), l.Token())
	}
}

func TestLockHeldWaitAndFIFO(t *testing.T) {
	srv := testserver.Start(t)
	c := newClient(t, srv.URL)
	ctx := context.Background()
	a := acquire(t, c, "go/fifo")
	_, err := c.Acquire(ctx, "go/fifo")
	var answered *leasegate.Error
	if !errors.Is(err, leasegate.ErrLockHeld) || !errors.As(err, &answered) || answered.Status != 409 {
		t.Fatalf("a held lock: %v", err)
	}
	results := make(chan *leasegate.Lease, 2)
	for i, owner := range []string{"first", "second"} {
		go func(owner string) {
			l, err := c.Acquire(ctx, "go/fifo", leasegate.Wait(bound), leasegate.Owner(owner))
			if err != nil {
				t.Errorf("waiter %s: %v", owner, err)
			}
			results <- l
		}(owner)
		waitFor(t, "a waiter in the queue", func() bool {
			st, err := c.Status(ctx, "go/fifo")
			return err == nil && st.Waiters == i+1
		})
	}
	if err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}
	first := <-results
	if first == nil || first.Owner() != "first" || first.Token() <= a.Token() {
		t.Fatalf("granted first: %v", first)
	}
	if err := first.Release(ctx); err != nil {
		t.Fatal(err)
	}
	second := <-results
	if second == nil || second.Owner() != "second" || second.Token() <= first.Token() {
		t.Fatalf("granted second: %v", second)
	}
	_ = second.Release(ctx)
}

func TestCancelledAcquireLeavesTheQueue(t *testing.T) {
	srv := testserver.Start(t)
	c := newClient(t, srv.URL)
	a := acquire(t, c, "go/cancel")
	defer a.Release(context.Background())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := c.Acquire(ctx, "go/cancel", leasegate.Wait(time.Minute))
		done <- err
	}()
	waitFor(t, "the waiter in the queue", func() bool {
		st, err := c.Status(context.Background(), "go/cancel")
		return err == nil && st.Waiters == 1
	})
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("a cancelled acquire returned %v", err)
		}
	case <-time.After(bound):
		t.Fatal("a cancelled acquire did not return")
	}
	waitFor(t, "the queue to empty", func() bool {
		st, err := c.Status(context.Background(), "go/cancel")
		return err == nil && st.Waiters == 0
	})
}

func TestWithLockLostToForceRelease(t *testing.T) {
	srv := testserver.Start(t)
	c := newClient(t, srv.URL)
	ctx := context.Background()
	if err := c.WithLock(ctx, "go/withlock", func(ctx context.Context, l *leasegate.Lease) error { return nil }); err != nil {
		t.Fatal(err)
	}
	workErr := errors.New("the work failed")
	if err := c.WithLock(ctx, "go/withlock", func(context.Context, *leasegate.Lease) error { return workErr }); err != workErr {
		t.Fatalf("WithLock returned %v, not the work's error", err)
	}
	err := c.WithLock(ctx, "go/withlock", func(ctx context.Context, l *leasegate.Lease) error {
		req, _ := http.NewRequest(http.MethodDelete, srv.URL+"/v1/locks/go/withlock", nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil || resp.StatusCode != 200 {
			t.Errorf("force-release: %v %v", resp, err)
		}
		select {
		case <-ctx.Done(): // the lease was lost: the work's context ends
		case <-time.After(bound):
			t.Error("the work's context was not cancelled at the loss")
		}
		if !errors.Is(l.Err(), leasegate.ErrLeaseLost) {
			t.Errorf("Err() = %v after the loss", l.Err())
		}
		return workErr
	}, leasegate.TTL(900*time.Millisecond))
	var lost *leasegate.LostError
	if !errors.Is(err, leasegate.ErrLeaseLost) || !errors.Is(err, leasegate.ErrNotHolder) || !errors.As(err, &lost) || lost.Work != workErr {
		t.Fatalf("WithLock over a force-released lease returned %v", err)
	}
	st, _ := c.Status(ctx, "go/withlock")
	if st.Held {
		t.Fatalf("the lock is held after WithLock: %+v", st)
	}
}

func TestLossWhenTheServerStops(t *testing.T) {
	srv := testserver.Start(t)
	c := newClient(t, srv.URL)
	l := acquire(t, c, "go/paused", leasegate.TTL(time.Second))
	srv.Pause()
	defer srv.Resume()
	select {
	case <-l.Lost():
	case <-time.After(bound):
		t.Fatal("no loss signalled while the server was stopped")
	}
	if l.Context().Err() == nil || !errors.Is(l.Err(), leasegate.ErrLeaseLost) {
		t.Fatalf("lost: Context %v, Err %v", l.Context().Err(), l.Err())
	}
	if err := l.Renew(context.Background(), 0); !errors.Is(err, leasegate.ErrLeaseLost) {
		t.Fatalf("renewing a lost lease: %v", err)
	}
	srv.Resume()
	if err := l.Release(context.Background()); err != nil {
		t.Fatalf("releasing a lost lease: %v", err)
	}
}

func TestReadLeasesAndSemaphores(t *testing.T) {
	srv := testserver.Start(t)
	c := newClient(t, srv.URL)
	ctx := context.Background()
	r1 := acquire(t, c, "go/rw", leasegate.Shared())
	r2 := acquire(t, c, "go/rw", leasegate.Shared())
	if r1.Mode() != leasegate.Read || r1.Token() == r2.Token() {
		t.Fatalf("read leases %v %v", r1, r2)
	}
	if _, err := c.Acquire(ctx, "go/rw"); !errors.Is(err, leasegate.ErrLockHeld) {
		t.Fatalf("a writer among readers: %v", err)
	}
	_ = r1.Release(ctx)
	_ = r2.Release(ctx)

	p1, err := c.AcquirePermit(ctx, "go/slots", 2)
	if err != nil {
		t.Fatal(err)
	}
	p2, err := c.AcquirePermit(ctx, "go/slots", 2)
	if err != nil {
		t.Fatal(err)
	}
	if !p1.Semaphore() || p1.Limit() != 2 || p1.Mode() != "" || p2.Token() <= p1.Token() {
		t.Fatalf("permits %v %v", p1, p2)
	}
	_, err = c.AcquirePermit(ctx, "go/slots", 2)
	if !errors.Is(err, leasegate.ErrSemaphoreFull) || !errors.Is(err, leasegate.ErrLockHeld) {
		t.Fatalf("a full semaphore: %v", err)
	}
	if _, err := c.AcquirePermit(ctx, "go/slots", 3); !errors.Is(err, leasegate.ErrLimitMismatch) {
		t.Fatalf("another limit: %v", err)
	}
	st, err := c.SemaphoreStatus(ctx, "go/slots")
	if err != nil || st.Limit != 2 || len(st.Holders) != 2 || st.Available != 0 {
		t.Fatalf("semaphore status %+v %v", st, err)
	}
	ran := false
	_ = p1.Release(ctx)
	if err := c.WithPermit(ctx, "go/slots", 2, func(context.Context, *leasegate.Lease) error { ran = true; return nil }); err != nil || !ran {
		t.Fatalf("WithPermit: %v (ran %v)", err, ran)
	}
	_ = p2.Release(ctx)
}

func TestPermitsAndValues(t *testing.T) {
	srv := testserver.Start(t)
	c := newClient(t, srv.URL)
	ctx := context.Background()
	// Limit 5: A takes 3; B asks 3 and waits; C asks 1 and waits behind B; A's release grants B then C.
	a, err := c.AcquirePermit(ctx, "go/gpu", 5, leasegate.Permits(3))
	if err != nil || a.Permits() != 3 {
		t.Fatalf("3 permits: %v %v", a, err)
	}
	type taken struct {
		l   *leasegate.Lease
		err error
	}
	b, cc := make(chan taken, 1), make(chan taken, 1)
	go func() {
		l, err := c.AcquirePermit(ctx, "go/gpu", 5, leasegate.Permits(3), leasegate.Wait(20*time.Second))
		b <- taken{l, err}
	}()
	waitFor(t, "b waiting", func() bool { st, err := c.SemaphoreStatus(ctx, "go/gpu"); return err == nil && st.Waiters == 1 })
	go func() {
		l, err := c.AcquirePermit(ctx, "go/gpu", 5, leasegate.Wait(20*time.Second))
		cc <- taken{l, err}
	}()
	waitFor(t, "c waiting", func() bool { st, err := c.SemaphoreStatus(ctx, "go/gpu"); return err == nil && st.Waiters == 2 })
	if st, err := c.SemaphoreStatus(ctx, "go/gpu"); err != nil || st.Available != 2 || st.PermitsUsed != 3 {
		t.Fatalf("2 free, and c still waits behind b: %+v %v", st, err)
	}
	_ = a.Release(ctx)
	tb, tc := <-b, <-cc
	if tb.err != nil || tc.err != nil || tb.l.Permits() != 3 || tc.l.Permits() != 1 || tc.l.Token() <= tb.l.Token() {
		t.Fatalf("b then c: %v %v / %v %v", tb.l, tb.err, tc.l, tc.err)
	}
	_ = tb.l.Release(ctx)
	_ = tc.l.Release(ctx)
	if _, err := c.AcquirePermit(ctx, "go/gpu", 5, leasegate.Permits(6)); err == nil {
		t.Fatal("6 permits of 5 were asked for")
	}

	// A value only the lock's writer changes, read by the next holder with its grant.
	first := acquire(t, c, "go/checkpoint")
	if v := first.ValueVersion(); v != 0 {
		t.Fatalf("a new lock's value version %d", v)
	}
	if v, err := first.SetValue(ctx, map[string]int{"offset": 41}); err != nil || v != 1 {
		t.Fatalf("SetValue: %d %v", v, err)
	}
	if _, err := first.SetValueIf(ctx, 0, 0); !errors.Is(err, leasegate.ErrVersionMismatch) {
		t.Fatalf("a stale version: %v", err)
	}
	_ = first.Release(ctx)
	var stale *leasegate.Error
	if _, err := first.SetValue(ctx, 999); !errors.Is(err, leasegate.ErrStaleToken) || !errors.As(err, &stale) ||
		stale.Reason != "released" {
		t.Fatalf("a released lease's write: %v", err)
	}
	second := acquire(t, c, "go/checkpoint")
	if string(second.Value()) != `{"offset":41}` || second.ValueVersion() != 1 {
		t.Fatalf("the next holder's grant: %s v%d", second.Value(), second.ValueVersion())
	}
	if _, err := second.SetValueIf(ctx, map[string]int{"offset": 57}, second.ValueVersion()); err != nil {
		t.Fatal(err)
	}
	_ = second.Release(ctx)
	v, err := c.Value(ctx, "go/checkpoint")
	if err != nil || string(v.Value) != `{"offset":57}` || v.ValueVersion != 2 || v.ValueToken != second.Token() {
		t.Fatalf("Value: %+v %v", v, err)
	}
}

func TestReenter(t *testing.T) {
	srv := testserver.Start(t)
	c := newClient(t, srv.URL)
	ctx := context.Background()
	l := acquire(t, c, "go/reenter")
	if err := l.Reenter(ctx); err != nil {
		t.Fatal(err)
	}
	st, _ := c.Status(ctx, "go/reenter")
	if st.Holder.Count != 2 || st.Holder.Token != l.Token() {
		t.Fatalf("after reentry %+v", st.Holder)
	}
	if err := l.Release(ctx); err != nil || l.Err() != nil {
		t.Fatalf("one level released: %v, Err %v", err, l.Err())
	}
	if st, _ = c.Status(ctx, "go/reenter"); !st.Held || st.Holder.Count != 1 {
		t.Fatalf("after one release %+v", st)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if st, _ = c.Status(ctx, "go/reenter"); st.Held {
		t.Fatalf("after the last release %+v", st)
	}
}

func TestFailoverAndUnavailable(t *testing.T) {
	srv := testserver.Start(t)
	down := testserver.ClosedURL(t)
	c := newClient(t, down, srv.URL)
	l := acquire(t, c, "go/failover")
	if l.Server() != srv.URL {
		t.Fatalf("granted by %s, not the server that runs", l.Server())
	}
	_ = l.Release(context.Background())
	only, err := leasegate.NewClient(leasegate.Config{Servers: []string{down}, RetryFor: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	_, err = only.Acquire(context.Background(), "go/failover")
	var unavailable *leasegate.UnavailableError
	if !errors.Is(err, leasegate.ErrUnavailable) || !errors.As(err, &unavailable) || !strings.Contains(err.Error(), down) {
		t.Fatalf("no server up: %v", err)
	}
}

func TestLargeTokensAndFence(t *testing.T) {
	srv := testserver.Start(t, "--min-token", "4611686018427387904")
	c := newClient(t, srv.URL)
	ctx := context.Background()
	l := acquire(t, c, "go/large")
	defer l.Release(ctx)
	if l.Token() != 4611686018427387905 {
		t.Fatalf("token %d, want 2^62+1 exactly", l.Token())
	}
	f, err := c.Fence(ctx, "go/res", l.Token())
	if err != nil || !f.Accepted || f.MaxToken != l.Token() {
		t.Fatalf("fence: %+v %v", f, err)
	}
	if _, err := c.Fence(ctx, "go/res", l.Token()-1); !errors.Is(err, leasegate.ErrStaleToken) {
		t.Fatalf("a stale token: %v", err)
	}
}

func TestRequestIDRepeatGetsTheSameGrant(t *testing.T) {
	srv := testserver.Start(t)
	c := newClient(t, srv.URL)
	a := acquire(t, c, "go/rid", leasegate.RequestID("go-test-request-1"))
	b := acquire(t, c, "go/rid", leasegate.RequestID("go-test-request-1"))
	if a.ID() != b.ID() || a.Token() != b.Token() {
		t.Fatalf("a repeated request_id got another grant: %v %v", a, b)
	}
	_ = b.Release(context.Background())
	if err := a.Release(context.Background()); err != nil {
		t.Fatalf("the repeat's twin released after it: %v", err)
	}
}

func TestGuardedWrites(t *testing.T) {
	var mu sync.Mutex
	var tokens []string
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		mu.Lock()
		tokens = append(tokens, r.Header.Get("Fencing-Token"))
		mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	defer upstream.Close()
	srv := testserver.Start(t, "--guard", "/store/="+upstream.URL+"/")
	c := newClient(t, srv.URL)
	ctx := context.Background()
	l := acquire(t, c, "go/guarded")
	resp, err := l.Request(ctx, http.MethodPut, "/store/go/guarded", strings.NewReader("data"))
	if err != nil || resp.StatusCode != http.StatusNoContent {
		t.Fatalf("a write lease's write: %v %v", resp, err)
	}
	resp.Body.Close()
	mu.Lock()
	seen := append([]string(nil), tokens...)
	mu.Unlock()
	if len(seen) != 1 || seen[0] != "1" {
		t.Fatalf("the backend saw tokens %q", seen)
	}
	r := acquire(t, c, "go/read", leasegate.Shared())
	resp, err = r.Request(ctx, http.MethodPut, "/store/go/read", strings.NewReader("data"))
	if err != nil || resp.StatusCode != http.StatusConflict {
		t.Fatalf("a read lease's write: %v %v", resp, err)
	}
	resp.Body.Close()
	_ = l.Release(ctx)
	resp, err = l.Request(ctx, http.MethodPut, "/store/go/guarded", strings.NewReader("late"))
	if err != nil || resp.StatusCode != http.StatusConflict {
		t.Fatalf("a released lease's write: %v %v", resp, err)
	}
	resp.Body.Close()
}

func TestBadOptionsAreRefusedBeforeAnyRequest(t *testing.T) {
	c := newClient(t, testserver.ClosedURL(t))
	for _, opt := range []leasegate.AcquireOption{leasegate.TTL(1500 * time.Microsecond), leasegate.Wait(-time.Second)} {
		if _, err := c.Acquire(context.Background(), "go/bad", opt); !errors.Is(err, leasegate.ErrBadDuration) {
			t.Fatalf("a bad duration: %v", err)
		}
	}
	if _, err := c.AcquirePermit(context.Background(), "go/bad", 0); err == nil || errors.Is(err, leasegate.ErrUnavailable) {
		t.Fatalf("limit 0: %v", err)
	}
	if _, err := leasegate.NewClient(leasegate.Config{Servers: []string{"ftp://x"}}); err == nil {
		t.Fatal("an ftp server URL was taken")
	}
}

// A 503 moves on to the next server; another error answer is final; a certificate that fails
// verification is not tried again and fails at once with ErrTLSVerification.
func TestWhichAnswersMoveToTheNextServer(t *testing.T) {
	srv := testserver.Start(t)
	var mu sync.Mutex
	calls := map[string]int{}
	answer := func(status int, body string) *httptest.Server {
		return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			calls[body]++
			mu.Unlock()
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(status)
			_, _ = io.WriteString(w, body)
		}))
	}
	overloaded := answer(503, `{"error":"overloaded","message":"busy"}`)
	defer overloaded.Close()
	refusing := answer(400, `{"error":"bad_request","message":"no","field":"owner"}`)
	defer refusing.Close()

	l := acquire(t, newClient(t, overloaded.URL, srv.URL), "go/next")
	if l.Server() != srv.URL {
		t.Fatalf("granted by %s after a 503 of the first server", l.Server())
	}
	_ = l.Release(context.Background())

	_, err := newClient(t, refusing.URL, srv.URL).Acquire(context.Background(), "go/next")
	var answered *leasegate.Error
	if !errors.Is(err, leasegate.ErrBadRequest) || !errors.As(err, &answered) || answered.Field != "owner" {
		t.Fatalf("a 400 of the first server: %v", err)
	}
	if st, _ := newClient(t, srv.URL).Status(context.Background(), "go/next"); st.Held {
		t.Fatal("a 400 was retried on the next server")
	}

	tlsServer := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		calls["tls"]++
		mu.Unlock()
	}))
	defer tlsServer.Close()
	c, err := leasegate.NewClient(leasegate.Config{Servers: []string{tlsServer.URL}, RetryFor: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Acquire(context.Background(), "go/next")
	if !errors.Is(err, leasegate.ErrTLSVerification) || !errors.Is(err, leasegate.ErrUnavailable) {
		t.Fatalf("an unverifiable certificate: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if calls["tls"] != 0 || calls[`{"error":"bad_request","message":"no","field":"owner"}`] != 1 {
		t.Fatalf("requests that reached the servers: %v", calls)
	}
}

// A value write whose answer is lost on the way back (the proxy forwards it, then hangs up) is
// sent again with the same request_id, and the server answers that retry with the first
// write's version: the value is written once.
func TestValueWriteWhoseAnswerWasLostIsWrittenOnce(t *testing.T) {
	srv := testserver.Start(t)
	var mu sync.Mutex
	var ids []string
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		req, err := http.NewRequest(r.Method, srv.URL+r.URL.RequestURI(), strings.NewReader(string(body)))
		if err != nil {
			t.Errorf("proxy: %v", err)
			return
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Errorf("proxy: %v", err)
			return
		}
		answer, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		mu.Lock()
		first := false
		if r.Method == http.MethodPut {
			var sent struct {
				RequestID string `json:"request_id"`
			}
			_ = json.Unmarshal(body, &sent)
			ids = append(ids, sent.RequestID)
			first = len(ids) == 1
		}
		mu.Unlock()
		if first { // applied by the server; its answer never reaches the client
			conn, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				conn.Close()
			}
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(resp.StatusCode)
		_, _ = w.Write(answer)
	}))
	defer proxy.Close()
	ctx := context.Background()
	l := acquire(t, newClient(t, proxy.URL), "go/lost-value")
	defer l.Release(ctx)
	if v, err := l.SetValueIf(ctx, map[string]int{"n": 1}, 0); err != nil || v != 1 {
		t.Fatalf("SetValueIf after a lost answer: %d %v (want version 1: written once)", v, err)
	}
	if v, err := l.SetValue(ctx, 2); err != nil || v != 2 {
		t.Fatalf("SetValue: %d %v", v, err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(ids) != 3 || ids[0] == "" || ids[0] != ids[1] || ids[2] == ids[0] {
		t.Fatalf("request_ids sent %q: want one per write, the same on its retry", ids)
	}
	got, err := newClient(t, srv.URL).Value(ctx, "go/lost-value")
	if err != nil || got.ValueVersion != 2 {
		t.Fatalf("value: %+v %v", got, err)
	}
}
