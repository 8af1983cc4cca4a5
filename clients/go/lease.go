package leasegate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"
)

// A Lease is one grant of a lock, or one permit of a semaphore: its token, its background
// renewal, its loss and its release.
//
// The client cannot read the server's clock, so it bounds the lease with its own monotonic
// clock: the lease is trusted until its TTL, less a margin of 0.1% of it for clocks that run
// at different rates, after the moment the last successful renewal (or the acquire) was sent.
// The server started counting later than that, so the client gives up first, never after the
// server, and no other holder can have been granted the lock while the lease is trusted.
//
// The lease is lost when a renewal is answered not_holder (it expired, or was force-released),
// or when no renewal succeeded before that bound (the servers were unreachable, or this process
// was paused). Then, once: Lost() is closed, Context() is cancelled, and Err() returns the
// *LostError. Err() reads the clock itself, so it says so from the moment the bound passes,
// also right after this process was stopped past it, before the renewal goroutine runs.
//
// Work done after a loss may overlap the next holder's: send writes through the guard with
// Header() (a lost lease's are refused), or check them with Client.Fence.
type Lease struct {
	c        *Client
	server   string
	name     string
	owner    string
	id       string
	token    uint64
	mode     Mode
	kind     leaseKind
	limit    int
	permits  int
	metadata json.RawMessage

	lostCh chan struct{}
	ctx    context.Context
	cancel context.CancelFunc // ends ctx: at the loss or the last release

	mu           sync.Mutex // guards what follows; the renewal goroutine and the callers share it
	value        json.RawMessage
	valueVersion uint64
	ttl          time.Duration
	deadline     time.Time // after it the lease is not trusted (monotonic)
	levels       int       // reentry levels held through this Lease; 0 once released
	ending       bool      // the last level's release began: a renewal failing now is no loss
	lost         *LostError
	timer        *time.Timer // fires at the deadline, to signal a loss nothing else noticed
}

func newLease(c *Client, server string, g *grant, sent time.Time, kind leaseKind) *Lease {
	l := &Lease{c: c, server: server, name: g.Name, owner: g.Owner, id: g.Lease, token: g.Token,
		mode: g.Mode, kind: kind, metadata: g.Metadata, lostCh: make(chan struct{}), levels: 1}
	switch kind {
	case kindSemaphore:
		l.mode, l.limit, l.permits = "", g.Limit, g.Permits
		if l.permits == 0 {
			l.permits = 1 // a server older than permits
		}
	case kindElection:
		l.mode, l.value = "", g.Value
	default:
		if l.mode == "" {
			l.mode = Write
		}
		l.value, l.valueVersion = g.Value, g.ValueVersion
	}
	l.ctx, l.cancel = context.WithCancel(context.Background())
	l.ttl = time.Duration(g.TTLMs) * time.Millisecond
	l.deadline = trustedUntil(sent, l.ttl)
	l.mu.Lock() // expire, which may run at once, reads l.timer under mu
	l.timer = time.AfterFunc(time.Until(l.deadline), l.expire)
	l.mu.Unlock()
	go l.renewLoop()
	return l
}

// trustedUntil is the bound of a lease whose grant or renewal was sent at sent: its TTL less
// 0.1% (clock rates), counted from the send.
func trustedUntil(sent time.Time, ttl time.Duration) time.Time {
	return sent.Add(ttl - ttl/1000 + plantedLossDelay(ttl))
}

// Name is the lock's (or the semaphore's) name.
func (l *Lease) Name() string { return l.name }

// Owner is the label the lease was granted under.
func (l *Lease) Owner() string { return l.owner }

// ID is the lease id: the secret that renews, releases and writes through the guard.
func (l *Lease) ID() string { return l.id }

// Token is the fencing token: it only grows from grant to grant, across restarts and
// failovers; reentry and renewal keep it; it is never 0.
func (l *Lease) Token() uint64 { return l.token }

// Mode is Write or Read for a lock, "" for a permit of a semaphore or a leadership.
func (l *Lease) Mode() Mode { return l.mode }

// Semaphore is true for a permit of a semaphore (Limit is then its number of permits).
func (l *Lease) Semaphore() bool { return l.kind == kindSemaphore }

// Limit is the semaphore's number of permits, 0 for a lock.
func (l *Lease) Limit() int { return l.limit }

// Permits is how many of the semaphore's permits the lease holds, 0 for a lock.
func (l *Lease) Permits() int { return l.permits }

// Value is a lock's value when it was granted (what the last writer left; nil or null when
// none), then as SetValue wrote it; a leadership's value as campaigned, then as proclaimed; nil
// for a permit.
func (l *Lease) Value() json.RawMessage {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.value
}

// ValueVersion is the version of Value (0: never written): the version for SetValueIf.
func (l *Lease) ValueVersion() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.valueVersion
}

// SetValue writes the lock's value (v is marshalled to JSON; nil writes null, which clears
// it), which only the lock's writer can, now; it returns the new version. A lease that does not
// hold the lock as its writer now fails with an *Error that errors.Is ErrStaleToken (its Reason
// says why), and nothing changes. A write whose answer was lost is sent again with the same
// request_id (one per call): the server answers it with the first write's version and writes
// nothing again, even across its restart or a failover.
func (l *Lease) SetValue(ctx context.Context, v interface{}) (uint64, error) {
	return l.setValue(ctx, v, nil)
}

// SetValueIf is SetValue only if the value is at version now (a read-modify-write: ValueVersion
// after the grant); another version fails with ErrVersionMismatch.
func (l *Lease) SetValueIf(ctx context.Context, v interface{}, version uint64) (uint64, error) {
	return l.setValue(ctx, v, &version)
}

func (l *Lease) setValue(ctx context.Context, v interface{}, version *uint64) (uint64, error) {
	switch l.kind {
	case kindSemaphore:
		return 0, errors.New("leasegate: SetValue: a lock's value; this is a semaphore's lease")
	case kindElection:
		return 0, errors.New("leasegate: SetValue: a lock's value; a leader sets its own with Proclaim")
	}
	data, err := json.Marshal(v)
	if err != nil {
		return 0, fmt.Errorf("leasegate: value: %w", err)
	}
	// One request_id for every attempt: a retry whose first answer was lost is answered with
	// that write's version, not written again.
	body := map[string]interface{}{"lease": l.id, "value": json.RawMessage(data), "request_id": newRequestID()}
	if version != nil {
		body["if_version"] = *version
	}
	var answer struct {
		ValueVersion uint64 `json:"value_version"`
	}
	if _, err := l.c.call(ctx, spec{method: http.MethodPut, path: lockPath(l.name, "value", kindLock), body: body,
		until: time.Now().Add(l.c.retryFor)}, &answer); err != nil {
		return 0, err
	}
	l.mu.Lock()
	l.value, l.valueVersion = json.RawMessage(data), answer.ValueVersion
	l.mu.Unlock()
	return answer.ValueVersion, nil
}

// Metadata is the lock's metadata as granted.
func (l *Lease) Metadata() json.RawMessage { return l.metadata }

// Server is the URL of the server that granted the lease (Request goes there).
func (l *Lease) Server() string { return l.server }

// TTL is the lease's time-to-live as the server last confirmed it.
func (l *Lease) TTL() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.ttl
}

// Lost is closed when the lease is lost (not when it is released): the etcd Session.Done()
// and Consul lostCh idiom.
func (l *Lease) Lost() <-chan struct{} { return l.lostCh }

// Context is cancelled when the lease is lost or released: run the work under the lock with it.
func (l *Lease) Context() context.Context { return l.ctx }

// Err is nil while the client can vouch that the server still holds the lease; a *LostError
// (errors.Is ErrLeaseLost) once it was lost, or ErrReleased once it was released. Call it
// before a step that must not run without the lock.
func (l *Lease) Err() error {
	l.mu.Lock()
	err := l.errLocked()
	expired := err == nil && !time.Now().Before(l.deadline)
	l.mu.Unlock()
	if expired {
		l.loseByDeadline()
		return l.Err()
	}
	return err
}

func (l *Lease) errLocked() error {
	switch {
	case l.lost != nil:
		return l.lost
	case l.levels == 0 || l.ending:
		return ErrReleased
	}
	return nil
}

// Header proves the lease to the guard: add it to a write under a guarded prefix (the guard
// drops it before forwarding, and forwards the token as Fencing-Token).
func (l *Lease) Header() http.Header {
	return http.Header{"Fencing-Lease": {l.id}}
}

// Request sends a request carrying the lease (and the client's key) to the server that
// granted it: a write through the guard, l.Request(ctx, "PUT", "/store/orders/42", body).
// The answer is returned for every status (409 stale_token once the lease is gone); the
// caller closes its body. Not retried: a write is the caller's call.
func (l *Lease) Request(ctx context.Context, method, path string, body io.Reader) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, l.server+path, body)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Fencing-Lease", l.id)
	l.c.authorize(req.Header)
	return l.c.http.Do(req)
}

// Renew extends the lease now by its TTL, or by ttl (then its new TTL) when ttl > 0; the
// background renewal does this at a third of the TTL anyway. Connection failures and 503 are
// retried on every server until the lease would expire. A renewal answered not_holder, or not
// done in time, loses the lease: the *LostError is returned.
func (l *Lease) Renew(ctx context.Context, ttl time.Duration) error {
	body := map[string]interface{}{"lease": l.id}
	if ttl != 0 {
		ms, err := millis("ttl", ttl)
		if err != nil {
			return err
		}
		body["ttl_ms"] = ms
	}
	l.mu.Lock()
	if err := l.errLocked(); err != nil {
		l.mu.Unlock()
		return err
	}
	deadline := l.deadline
	l.mu.Unlock()
	var answer struct {
		TTLMs int64 `json:"ttl_ms"`
	}
	res, err := l.c.call(ctx, spec{method: http.MethodPost, path: lockPath(l.name, "renew", l.kind), body: body,
		until: deadline, hard: true}, &answer)
	var answered *Error
	switch {
	case err == nil:
		l.mu.Lock()
		renewed := l.lost == nil && time.Now().Before(l.deadline)
		if renewed {
			l.ttl = time.Duration(answer.TTLMs) * time.Millisecond
			l.deadline = trustedUntil(res.sent, l.ttl)
		}
		l.mu.Unlock()
		if renewed {
			return nil
		}
		l.loseByDeadline()
	case ctx.Err() != nil:
		return err // the caller gave up; that says nothing of the lease
	case errors.As(err, &answered) && answered.Code == "not_holder":
		l.lose(fmt.Sprintf("the server says the lease no longer holds it (%s)", answered.Reason), err, false)
	case errors.Is(err, ErrUnavailable) || (answered != nil && answered.Status == http.StatusServiceUnavailable):
		l.lose("no renewal succeeded within its TTL ("+err.Error()+")", err, false)
	default:
		return err
	}
	return l.Err()
}

// Reenter takes the lock again with this lease (one more level, the same token; it extends
// the lease by its TTL): for code that takes a lock it may already hold. Each level is given
// back by one Release. Fails with ErrNotHolder when the lease no longer holds the lock.
func (l *Lease) Reenter(ctx context.Context) error {
	switch l.kind {
	case kindSemaphore:
		return errors.New("leasegate: a permit of a semaphore cannot be re-entered")
	case kindElection:
		return errors.New("leasegate: a leadership cannot be re-entered")
	}
	if err := l.Err(); err != nil {
		return err
	}
	o := acquireOptions{ttl: l.TTL(), mode: l.mode, owner: l.owner, reenter: l}
	body, err := l.c.acquireBody(&o, kindLock, 0)
	if err != nil {
		return err
	}
	var g grant
	res, err := l.c.call(ctx, spec{method: http.MethodPost, path: lockPath(l.name, "acquire", kindLock), body: body,
		until: time.Now().Add(l.c.retryFor)}, &g)
	if err != nil {
		var answered *Error
		if errors.As(err, &answered) && answered.Code == "not_holder" {
			l.lose(fmt.Sprintf("the server says the lease no longer holds it (%s)", answered.Reason), err, false)
			return l.Err()
		}
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.lost != nil {
		return l.lost
	}
	l.levels++
	l.ttl = time.Duration(g.TTLMs) * time.Millisecond
	if d := trustedUntil(res.sent, l.ttl); d.After(l.deadline) && time.Now().Before(l.deadline) {
		l.deadline = d
	}
	return nil
}

// Release gives one level of the lease back (the lock, unless it was re-entered) and, with the
// last one, stops the renewal and cancels Context(). Releasing a released lease does nothing
// and returns nil. A lease already lost gets one short try per server, errors ignored (the
// server frees the lock at its TTL anyway; an exit must not hang on a dead server), and nil.
// Returns the *LostError when the server says the lease had ended before (expired,
// force-released), and ErrUnavailable when no server answered in time.
func (l *Lease) Release(ctx context.Context) error {
	l.mu.Lock()
	if l.levels == 0 || l.ending {
		l.mu.Unlock()
		return nil
	}
	last := l.levels == 1
	if last {
		l.ending = true
	}
	trusted := l.lost == nil && time.Now().Before(l.deadline)
	l.mu.Unlock()
	if last {
		l.stopRenewal()
	}
	if !trusted {
		if last {
			l.c.courtesyRelease(l.name, l.id, l.kind)
			l.finish()
		}
		return nil
	}
	_, err := l.c.call(ctx, spec{method: http.MethodPost, path: lockPath(l.name, "release", l.kind),
		body: map[string]interface{}{"lease": l.id}, until: time.Now().Add(l.c.retryFor)}, nil)
	var answered *Error
	// The lease no longer holds it (a resignation says so as not_leader, in the election's words).
	ended := errors.As(err, &answered) &&
		(answered.Code == "not_holder" || (l.kind == kindElection && answered.Code == "not_leader"))
	switch {
	case err == nil, ended && answered.Reason == "released":
		// (released: a retry after a release whose answer was lost)
		l.mu.Lock()
		if l.levels > 0 {
			l.levels--
		}
		l.mu.Unlock()
		if last {
			l.finish()
		}
		return nil
	case ended:
		l.lose(fmt.Sprintf("the lease had ended before its release (%s)", answered.Reason), err, true)
		l.finish()
		return l.lost
	default:
		// Not released, and no longer renewed: the server frees the lock at its TTL.
		return err
	}
}

// hold runs fn under the lease, then releases it (WithLock, WithPermit).
func (l *Lease) hold(ctx context.Context, fn func(ctx context.Context, l *Lease) error) (err error) {
	work, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		select {
		case <-l.Lost():
			cancel()
		case <-done:
		}
	}()
	defer func() {
		close(done)
		cancel()
		_ = l.Err() // records a loss the renewal has not noticed yet
		_ = l.Release(context.Background())
		l.mu.Lock()
		lost := l.lost
		l.mu.Unlock()
		if lost != nil {
			err = &LostError{Name: lost.Name, Reason: lost.Reason, Cause: lost.Cause, Work: err}
		}
	}()
	return fn(work, l)
}

// renewLoop renews at a third of the TTL until the last release or the loss.
func (l *Lease) renewLoop() {
	for {
		l.mu.Lock()
		due := time.Until(l.deadline.Add(-l.ttl * 2 / 3))
		l.mu.Unlock()
		if sleep(l.ctx, due) != nil {
			return
		}
		err := l.Renew(l.ctx, 0)
		switch {
		case l.ctx.Err() != nil:
			return
		case errors.Is(err, ErrLeaseLost):
			return
		case err != nil:
			l.lose("it cannot be renewed: "+err.Error(), err, false)
			return
		}
	}
}

// expire runs at the deadline: the loss, unless a renewal moved the deadline meanwhile.
func (l *Lease) expire() {
	l.mu.Lock()
	left := time.Until(l.deadline)
	done := l.lost != nil || l.levels == 0 || l.ending
	if !done && left > 0 {
		l.timer = time.AfterFunc(left, l.expire)
	}
	l.mu.Unlock()
	if !done && left <= 0 {
		l.loseByDeadline()
	}
}

func (l *Lease) loseByDeadline() {
	l.lose("no renewal succeeded within its TTL", nil, false)
}

// lose records the loss and signals it, once. Ignored once the last release began (unless
// that release found it): a renewal racing a release is no loss.
func (l *Lease) lose(reason string, cause error, ending bool) {
	l.mu.Lock()
	if l.lost != nil || l.levels == 0 || (l.ending && !ending) {
		l.mu.Unlock()
		return
	}
	l.lost = &LostError{Name: l.name, Reason: reason, Cause: cause}
	l.timer.Stop()
	l.mu.Unlock()
	close(l.lostCh)
	l.cancel()
}

// stopRenewal ends the renewal loop (through the context: an attempt in flight is abandoned).
func (l *Lease) stopRenewal() {
	l.mu.Lock()
	l.timer.Stop()
	l.mu.Unlock()
	l.cancel()
}

// finish marks the lease released.
func (l *Lease) finish() {
	l.mu.Lock()
	l.levels = 0
	l.mu.Unlock()
	l.cancel()
}

func (l *Lease) String() string {
	state := "valid"
	if err := l.Err(); err != nil {
		state = err.Error()
	}
	return fmt.Sprintf("leasegate.Lease{%s token=%d %s}", l.name, l.token, state)
}
