package leasegate_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"leasegate"
	"leasegate/internal/testserver"
)

// Elections (issue 40) against the real binary: campaign, proclaim, resign, the state, and an
// Observer that sees every change once across cut connections, a failover and a resume.

// events runs an Observer in a goroutine; next returns its next event (or fails the test).
type events struct {
	t   *testing.T
	obs *leasegate.Observer
	ch  chan leasegate.ElectionEvent
	end chan error
}

func observe(t *testing.T, c *leasegate.Client, name string, opts ...leasegate.ObserveOption) *events {
	e := &events{t: t, obs: c.Observe(context.Background(), name, opts...),
		ch: make(chan leasegate.ElectionEvent, 100), end: make(chan error, 1)}
	go func() {
		for e.obs.Next() {
			e.ch <- e.obs.Event()
		}
		e.end <- e.obs.Err()
	}()
	t.Cleanup(func() { e.obs.Close() })
	return e
}

func (e *events) next() leasegate.ElectionEvent {
	e.t.Helper()
	select {
	case ev := <-e.ch:
		return ev
	case err := <-e.end:
		e.t.Fatalf("the observer stopped: %v", err)
	case <-time.After(bound):
		e.t.Fatalf("no event within %v", bound)
	}
	return leasegate.ElectionEvent{}
}

// expect checks an event's fields, not its id.
func (e *events) expect(want leasegate.ElectionEvent) leasegate.ElectionEvent {
	e.t.Helper()
	got := e.next()
	if got.ID == 0 || got.Type != want.Type || got.Owner != want.Owner || got.Term != want.Term ||
		string(got.Value) != string(want.Value) || got.Reason != want.Reason ||
		got.PreviousTerm != want.PreviousTerm || got.Gap != want.Gap {
		e.t.Fatalf("event %+v (value %s), want %+v (value %s)", got, got.Value, want, want.Value)
	}
	return got
}

func leader(owner string, term uint64, value string) leasegate.ElectionEvent {
	return leasegate.ElectionEvent{Type: leasegate.EventLeader, Owner: owner, Term: term, Value: json.RawMessage(value)}
}

func vacant(reason string, previous uint64) leasegate.ElectionEvent {
	return leasegate.ElectionEvent{Type: leasegate.EventVacant, Reason: reason, PreviousTerm: previous}
}

func hostPort(url string) string { return strings.TrimPrefix(url, "http://") }

func TestElectionHandOverAndObserveAcrossCuts(t *testing.T) {
	srv := testserver.Start(t)
	c := newClient(t, srv.URL)
	ctx := context.Background()
	proxy := testserver.StartProxy(t, hostPort(srv.URL))
	// The observer's first server is never there: it fails over to the proxy.
	watcher := newClient(t, testserver.ClosedURL(t), proxy.URL)
	obs := observe(t, watcher, "go/sched")
	obs.expect(vacant("", 0)) // never campaigned: the state is a vacancy of unknown reason

	a, err := c.Campaign(ctx, "go/sched", map[string]string{"url": "http://a"}, leasegate.Owner("a"))
	if err != nil {
		t.Fatal(err)
	}
	if a.Term() != a.Token() || a.Term() == 0 || string(a.Value()) != `{"url":"http://a"}` || a.Owner() != "a" {
		t.Fatalf("leadership %v value %s", a, a.Value())
	}
	obs.expect(leader("a", a.Term(), `{"url":"http://a"}`))

	_, err = c.Campaign(ctx, "go/sched", "b", leasegate.Owner("b"))
	var answered *leasegate.Error
	if !errors.Is(err, leasegate.ErrNotLeader) || !errors.Is(err, leasegate.ErrLockHeld) || !errors.As(err, &answered) ||
		!strings.Contains(string(answered.Body), `"owner":"a"`) {
		t.Fatalf("a campaign while a leads: %v", err)
	}
	if err := a.Proclaim(ctx, map[string]string{"url": "http://a2"}); err != nil {
		t.Fatal(err)
	}
	if string(a.Value()) != `{"url":"http://a2"}` {
		t.Fatalf("the value after Proclaim: %s", a.Value())
	}
	obs.expect(leader("a", a.Term(), `{"url":"http://a2"}`))
	st, err := c.Election(ctx, "go/sched")
	if err != nil || st.Leader == nil || st.Leader.Owner != "a" || st.Leader.Term != a.Term() ||
		string(st.Leader.Value) != `{"url":"http://a2"}` || st.VacantSinceMs != nil || st.Index == 0 {
		t.Fatalf("Election: %+v %v", st, err)
	}

	// b waits behind a; the observer's connection is cut and held while a resigns.
	got := make(chan *leasegate.Leadership, 1)
	go func() {
		b, err := c.Campaign(ctx, "go/sched", "b", leasegate.Owner("b"), leasegate.Wait(bound))
		if err != nil {
			t.Errorf("b's campaign: %v", err)
		}
		got <- b
	}()
	waitFor(t, "b a candidate", func() bool {
		st, err := c.Election(ctx, "go/sched")
		return err == nil && len(st.Candidates) == 1 && st.Candidates[0].Owner == "b"
	})
	connections := proxy.Connections()
	proxy.Pause()
	proxy.Cut()
	if err := a.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	b := <-got
	if b == nil {
		t.FailNow()
	}
	proxy.Resume()
	obs.expect(vacant("resigned", a.Term()))
	obs.expect(leader("b", b.Term(), `"b"`))
	if proxy.Connections() <= connections {
		t.Fatal("the observer did not reconnect")
	}
	if err := a.Proclaim(ctx, "again"); !errors.Is(err, leasegate.ErrNotLeader) {
		t.Fatalf("a resigned leader's Proclaim: %v", err)
	}
	if err := a.Resign(ctx); err != nil {
		t.Fatalf("a second Resign: %v", err)
	}

	// WithLeadership: c leads while fn runs, and resigns when it returns.
	if err := b.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	obs.expect(vacant("resigned", b.Term()))
	var term uint64
	err = c.WithLeadership(ctx, "go/sched", nil, func(ctx context.Context, l *leasegate.Leadership) error {
		term = l.Term()
		obs.expect(leader("c", term, "null"))
		return nil
	}, leasegate.Owner("c"))
	if err != nil || term <= b.Term() {
		t.Fatalf("WithLeadership: term %d after %d: %v", term, b.Term(), err)
	}
	obs.expect(vacant("resigned", term))
	if st, err := c.Election(ctx, "go/sched"); err != nil || st.Leader != nil || st.VacantSinceMs == nil {
		t.Fatalf("after WithLeadership: %+v %v", st, err)
	}

	// Refused before anything is sent: a lock's options.
	if _, err := c.Campaign(ctx, "go/sched", 1, leasegate.Shared()); err == nil {
		t.Fatal("a shared campaign")
	}
	if _, err := c.Campaign(ctx, "go/sched", 1, leasegate.Permits(2)); err == nil {
		t.Fatal("a campaign with permits")
	}
}

func TestLeadershipLostToExpiryAndRevocation(t *testing.T) {
	srv := testserver.Start(t)
	c := newClient(t, srv.URL)
	ctx := context.Background()
	obs := observe(t, c, "go/lead")
	obs.expect(vacant("", 0))

	// A leader whose renewals cannot reach the server expires: observers see the vacancy.
	proxy := testserver.StartProxy(t, hostPort(srv.URL))
	cut := newClient(t, proxy.URL)
	x, err := cut.Campaign(ctx, "go/lead", "x", leasegate.Owner("x"), leasegate.TTL(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	obs.expect(leader("x", x.Term(), `"x"`))
	proxy.Pause()
	proxy.Cut()
	obs.expect(vacant("expired", x.Term()))
	select {
	case <-x.Lost():
	case <-time.After(bound):
		t.Fatal("the expired leadership was not lost")
	}
	if !errors.Is(x.Err(), leasegate.ErrLeaseLost) {
		t.Fatalf("Err: %v", x.Err())
	}
	proxy.Resume()

	// An admin's revocation: the leader's renewal is answered not_holder, and it is lost.
	y, err := c.Campaign(ctx, "go/lead", "y", leasegate.Owner("y"), leasegate.TTL(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	obs.expect(leader("y", y.Term(), `"y"`))
	req, _ := http.NewRequest(http.MethodDelete, srv.URL+"/v1/elections/go/lead", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("revoking: %v %v", resp, err)
	}
	resp.Body.Close()
	obs.expect(vacant("revoked", y.Term()))
	select {
	case <-y.Lost():
	case <-time.After(bound):
		t.Fatal("the revoked leadership was not lost")
	}
	if err := y.Proclaim(ctx, "still?"); !errors.Is(err, leasegate.ErrNotLeader) {
		t.Fatalf("a revoked leader's Proclaim: %v", err)
	}
	// As a lost lock's Release: one courtesy try, nil, and the loss stays its Err.
	if err := y.Resign(ctx); err != nil || !errors.Is(y.Err(), leasegate.ErrLeaseLost) {
		t.Fatalf("a revoked leader's Resign: %v (Err %v)", err, y.Err())
	}
}

func TestObserveResumesAfterAnIDAndReportsAGap(t *testing.T) {
	srv := testserver.Start(t, "--events-keep", "4")
	c := newClient(t, srv.URL)
	ctx := context.Background()
	first := observe(t, c, "go/resume")
	first.expect(vacant("", 0))
	a, err := c.Campaign(ctx, "go/resume", 1, leasegate.Owner("a"))
	if err != nil {
		t.Fatal(err)
	}
	seen := first.expect(leader("a", a.Term(), "1"))
	first.obs.Close()
	if err := a.Proclaim(ctx, 2); err != nil {
		t.Fatal(err)
	}
	// A new Observer resumes after the last event seen: the proclamation, and nothing twice.
	second := observe(t, c, "go/resume", leasegate.LastEventID(seen.ID))
	after := second.expect(leader("a", a.Term(), "2"))
	if after.ID <= seen.ID {
		t.Fatalf("ids %d then %d", seen.ID, after.ID)
	}
	second.obs.Close()

	// More events than the server keeps (other names' too): resuming after seen.ID is 410, and
	// the Observer goes on from the state, marked as a gap.
	for i := 0; i < 6; i++ {
		l := acquire(t, c, "go/noise")
		_ = l.Release(ctx)
	}
	if err := a.Proclaim(ctx, 3); err != nil {
		t.Fatal(err)
	}
	third := observe(t, c, "go/resume", leasegate.LastEventID(seen.ID))
	gap := leader("a", a.Term(), "3")
	gap.Gap = true
	third.expect(gap)
	if err := a.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	third.expect(vacant("resigned", a.Term()))

	// A server without events: the Observer stops with ErrNotFound.
	off := testserver.Start(t, "--events-keep", "0")
	none := newClient(t, off.URL).Observe(ctx, "go/resume")
	defer none.Close()
	if none.Next() || !errors.Is(none.Err(), leasegate.ErrNotFound) {
		t.Fatalf("observe without events: %v", none.Err())
	}
}
