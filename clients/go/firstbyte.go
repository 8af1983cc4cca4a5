package leasegate

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"sync"
	"sync/atomic"
	"time"
)

// The first-byte watch (Config.FirstByteTimeout), as in the Python and Node clients: a paused
// gateway still accepts connections (its kernel does), so silence must not cost a request its
// whole timeout. A server that has not given the attempt a connection within the first-byte
// timeout is given up; one that has not begun its answer within it after that is asked GET
// /readyz (bounded by the same timeout and by the attempt's own deadline, so a renewal's bound
// stays hard). Ready (200, or 404 from a server too old to have /readyz), it is working on the
// request (a long-poll waits for its grant; a commit is slow) and the wait goes on, to be asked
// again a first-byte timeout later; not ready (503) or silent (paused, stopped, cut off), the
// attempt is given up like one that timed out, and the call moves on to the next server (an
// acquire with its request_id, so a grant made meanwhile is given back, not doubled).

// minFirstByte is the shortest first-byte timeout a Client takes: a shorter one would give up
// on healthy servers of a busy machine.
const minFirstByte = 100 * time.Millisecond

// stalledError is an attempt the watch gave up on.
type stalledError struct{ what string }

func (e *stalledError) Error() string { return e.what }

// watch is the first-byte watch of one attempt: the httptrace events it needs and, once it gave
// up, why. The transport calls the trace functions from its own goroutines.
type watch struct {
	got, first         chan struct{} // closed at the connection and at the answer's first byte
	gotOnce, firstOnce sync.Once
	stalled            atomic.Pointer[stalledError]
}

// watched is ctx with the trace that feeds w: for the attempt's request only (a /readyz probe
// under it would be taken for the attempt's answer).
func (w *watch) watched(ctx context.Context) context.Context {
	w.got, w.first = make(chan struct{}), make(chan struct{})
	return httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		GotConn:              func(httptrace.GotConnInfo) { w.gotOnce.Do(func() { close(w.got) }) },
		GotFirstResponseByte: func() { w.firstOnce.Do(func() { close(w.first) }) },
	})
}

// run watches the attempt to server until its answer begins or actx (the attempt's context,
// without the trace) ends; when it gives up it records why and calls cancel, which ends the
// attempt.
func (w *watch) run(c *Client, actx context.Context, cancel context.CancelFunc, server string) {
	fb := c.firstByte
	if !waitFor(actx, w.got, fb) {
		w.give(actx, cancel, fmt.Sprintf("no connection within %v", fb))
		return
	}
	for {
		if waitFor(actx, w.first, fb) || actx.Err() != nil {
			return
		}
		if c.ready(actx, server) {
			continue
		}
		select {
		case <-w.first: // the answer began while /readyz was asked: it is taken
			return
		default:
		}
		w.give(actx, cancel, fmt.Sprintf("no answer within %v, and /readyz did not say it is ready", fb))
		return
	}
}

// give records why the attempt was given up and ends it, unless actx ended first (then the
// attempt's own error says what happened).
func (w *watch) give(actx context.Context, cancel context.CancelFunc, what string) {
	if actx.Err() != nil {
		return
	}
	w.stalled.Store(&stalledError{what})
	cancel()
}

// waitFor reports whether ch was closed within d; false also when ctx ended first.
func waitFor(ctx context.Context, ch <-chan struct{}, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ch:
		return true
	case <-ctx.Done():
		return false
	case <-t.C:
		return false
	}
}

// ready is whether server's GET /readyz answers other than 503 within the first-byte timeout
// and before ctx's deadline (the attempt's: a renewal must end by its lease's bound).
func (c *Client) ready(ctx context.Context, server string) bool {
	pctx, cancel := context.WithTimeout(ctx, c.firstByte)
	defer cancel()
	req, err := http.NewRequestWithContext(pctx, http.MethodGet, server+"/readyz", nil)
	if err != nil {
		return false
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10)); err != nil {
		return false
	}
	return resp.StatusCode != http.StatusServiceUnavailable
}
