package leasegate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"
)

// Elections (docs/locks.md, "Elections"): an election is a first-come first-served lease in a
// namespace of its own (election "x" and lock "x" are unrelated). Its one holder leads; its
// fencing token is the leader's term; the candidates wait in the order they campaigned. A
// Leadership is that lease, renewed in the background like a lock's, with the leader's own
// calls: Proclaim (a new value) and Resign (the next candidate leads at once). Observe follows
// who leads, vacancies included (observe.go).

// A Leadership is the leadership of an election won by Campaign: a *Lease (its Lost, Context,
// Err, Header and Renew work as a lock's; Release is Resign) whose token is the term. Value is
// the leader's value, as campaigned and then as proclaimed.
//
// Fence the leader's writes with the term (Client.Fence, or the guard with Header on a route
// bound to the election): a deposed leader that has not noticed yet is refused.
type Leadership struct {
	*Lease
}

// Term is the leader's term: its fencing token, from the one counter every lock and election
// draws from, so a later leader always has a higher one.
func (l *Leadership) Term() uint64 { return l.token }

// Campaign campaigns to lead the election name with value (marshalled to JSON; nil is null):
// what Election and observers show of the leader, such as its address. It leads at once when
// nobody does and nobody waits; with Wait it waits in line behind the candidates before it, and
// leads when they have led (or left) and the leader is gone. The options are a lock's TTL, Wait,
// Owner, Metadata and RequestID (Shared, LockDelay and Permits are refused).
//
// Not elected in time: an error that errors.Is ErrNotLeader (and ErrLockHeld), whose Body says
// who leads. Cancelling ctx leaves the line at once. A campaign is never answered a leadership
// it did not get: one whose answer cannot be delivered is given up by the server.
func (c *Client) Campaign(ctx context.Context, name string, value interface{}, opts ...AcquireOption) (*Leadership, error) {
	data, err := json.Marshal(value)
	if err != nil {
		return nil, fmt.Errorf("leasegate: value: %w", err)
	}
	l, err := c.take(ctx, name, kindElection, 0, json.RawMessage(data), opts)
	if err != nil {
		return nil, err
	}
	return &Leadership{l}, nil
}

// WithLeadership campaigns (as Campaign), runs fn as the leader while the lease is renewed in
// the background, and resigns when fn returns, also when it panics or fails: Curator's
// LeaderSelector.takeLeadership. fn's context is cancelled when the leadership is lost (and when
// ctx is): stop leading then. Errors as WithLock's: a *LostError (errors.Is ErrLeaseLost) when
// the leadership was lost meanwhile, with fn's own error in its Work.
func (c *Client) WithLeadership(ctx context.Context, name string, value interface{},
	fn func(ctx context.Context, l *Leadership) error, opts ...AcquireOption) error {
	l, err := c.Campaign(ctx, name, value, opts...)
	if err != nil {
		return err
	}
	return l.hold(ctx, func(ctx context.Context, _ *Lease) error { return fn(ctx, l) })
}

// Proclaim replaces the leader's value (v marshalled to JSON; nil is null); observers get a
// leader event with it. Only the leader can, now: a leadership that ended fails with an error
// that errors.Is ErrNotLeader (a resigned one's Reason is "released"); one that ended without
// resigning is lost from then on (Lost is closed; the error is then the *LostError, errors.Is
// ErrLeaseLost and ErrNotLeader). A proclamation whose answer was lost is sent again, so
// observers may see the same value twice.
func (l *Leadership) Proclaim(ctx context.Context, v interface{}) error {
	data, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("leasegate: value: %w", err)
	}
	// Sent even when the lease is known to have ended: the server says not_leader, as to any
	// lease that does not lead now, and nothing changes.
	_, err = l.c.call(ctx, spec{method: http.MethodPost, path: lockPath(l.name, "proclaim", kindElection),
		body:  map[string]interface{}{"lease": l.id, "value": json.RawMessage(data)},
		until: time.Now().Add(l.c.retryFor)}, nil)
	var answered *Error
	switch {
	case err == nil:
		l.mu.Lock()
		l.value = json.RawMessage(data)
		l.mu.Unlock()
		return nil
	case errors.As(err, &answered) && answered.Code == "not_leader" && answered.Reason != "released":
		l.lose(fmt.Sprintf("the server says it no longer leads (%s)", answered.Reason), err, false)
		if lost := l.Err(); errors.Is(lost, ErrLeaseLost) && errors.Is(lost, ErrNotLeader) {
			return lost // the *LostError whose cause is this answer
		}
	}
	return err
}

// Resign steps down: the next candidate leads at once, and observers see a vacancy (resigned)
// before its leader event. It is Release, with Release's answers: nil for a leadership already
// resigned, the *LostError when the server says it had ended before (expired, revoked).
func (l *Leadership) Resign(ctx context.Context) error { return l.Release(ctx) }

func (l *Leadership) String() string {
	state := "leading"
	if err := l.Err(); err != nil {
		state = err.Error()
	}
	return fmt.Sprintf("leasegate.Leadership{%s term=%d %s}", l.name, l.token, state)
}

// Leader is who leads an election, as anyone may see it (never its lease).
type Leader struct {
	Owner   string          `json:"owner"`
	Term    uint64          `json:"term"`
	Value   json.RawMessage `json:"value"`    // as the leader sent it
	SinceMs int64           `json:"since_ms"` // when it began to lead (Unix ms)
}

// Candidate is one candidate waiting to lead.
type Candidate struct {
	Owner   string `json:"owner"`
	SinceMs int64  `json:"since_ms"` // when it campaigned (Unix ms)
}

// ElectionState is an election's state (GET /v1/elections/{name}).
type ElectionState struct {
	Name   string  `json:"name"`
	Leader *Leader `json:"leader"` // nil: nobody leads
	// VacantSinceMs is since when nobody leads; nil while led, or when the server does not know
	// (an election it never saw).
	VacantSinceMs *int64 `json:"vacant_since_ms"`
	// Candidates are the first 100 candidates, the next to lead first; CandidatesTotal counts all.
	Candidates      []Candidate `json:"candidates"`
	CandidatesTotal int         `json:"candidates_total"`
	LastToken       uint64      `json:"last_token"` // the last term granted; 0 if never
	Index           uint64      `json:"index"`      // moves with every change a reader can see
}

// Election is the election's state. Any name is valid: one nobody campaigned for has no leader.
func (c *Client) Election(ctx context.Context, name string) (*ElectionState, error) {
	var s ElectionState
	_, err := c.call(ctx, spec{method: http.MethodGet, path: "/v1/elections/" + quoteName(name),
		until: time.Now().Add(c.retryFor)}, &s)
	if err != nil {
		return nil, err
	}
	return &s, nil
}
