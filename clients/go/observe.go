package leasegate

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Following an election: GET /v1/elections/{name}/observe, Server-Sent Events. Each message
// is an event with an id, the seq of the server's event. A stream that ends (the server stops,
// the connection is cut, nothing came for observeSilence though the server sends a comment
// every 15 s) is opened again, on the same server or the next, with Last-Event-ID: the id of
// the last event returned, so the server sends exactly the ones after it. When the server no
// longer has them (410, or a too_old message: its ring dropped them, or it restarted, or
// another gateway leads now), the stream opens again without an id and starts with the
// election's state. That state is compared with the last event returned: the same leader (or
// the same vacancy) is not returned again; anything else is returned with Gap set, since events
// between the two may be lost.

const (
	observeSilence  = 45 * time.Second // no byte for this long (the server's keep-alive is 15 s): the stream is dead
	observeMaxLine  = 1 << 20          // a line of the stream; an event's data is far smaller
	observeMaxError = 64 << 10         // an error answer's body, read at most
)

// ElectionEventType says what an ElectionEvent reports.
type ElectionEventType string

const (
	// EventLeader: a new leader, or the leader proclaimed a new value (Owner, Term, Value).
	EventLeader ElectionEventType = "leader"
	// EventVacant: nobody leads (Reason, PreviousTerm). Sent whenever a term ends, also when
	// the next candidate leads at once (its EventLeader follows).
	EventVacant ElectionEventType = "vacant"
)

// ElectionEvent is one change of an election, or its state when observing began (an Observe
// without LastEventID returns the state first: a leader, or a vacancy whose Reason may be "").
type ElectionEvent struct {
	Type ElectionEventType
	// ID is the server's id of the event: Observe with LastEventID(ID) resumes after it.
	ID uint64
	// A leader's: who leads, its term and its value (as sent).
	Owner string
	Term  uint64
	Value json.RawMessage
	// A vacancy's: why the term ended, "resigned", "expired" or "revoked" ("" when not known:
	// the state of an election whose end the server has not seen, as after its restart), and
	// the term that ended (0 when not known).
	Reason       string
	PreviousTerm uint64
	// Gap: the server no longer had the events after the last one returned (or after
	// LastEventID): its ring dropped them, it restarted, or another gateway leads the lock
	// space now. This is the election's state when the stream opened again, and changes in
	// between may be lost. (A state that says what the last event said is not returned again.)
	Gap bool
}

// ObserveOption changes an Observe.
type ObserveOption func(*observeOptions)

type observeOptions struct {
	after    string
	retryFor time.Duration
}

// LastEventID resumes after the event of that id (an earlier Observer's last ElectionEvent.ID):
// the first events returned are the ones after it, none twice. Without it the first event is
// the election's state.
func LastEventID(id uint64) ObserveOption {
	return func(o *observeOptions) { o.after = strconv.FormatUint(id, 10) }
}

// ObserveRetryFor is how long the Observer keeps trying while no server answers (default the
// client's RetryFor); then Next returns false and Err an error that errors.Is ErrUnavailable.
func ObserveRetryFor(d time.Duration) ObserveOption {
	return func(o *observeOptions) { o.retryFor = d }
}

// An Observer follows an election, one event at a time, like a bufio.Scanner:
//
//	obs := client.Observe(ctx, "scheduler")
//	defer obs.Close()
//	for obs.Next() {
//		ev := obs.Event()
//		...
//	}
//	if err := obs.Err(); err != nil { ... }
//
// Next blocks until the next event; across cut connections, server restarts and failovers it
// returns every event once, in order (see Gap for what a server that lost them can give). It
// stops for good when ctx ends or Close is called (Err: nil after Close, ctx's error after
// ctx), when no server answered for the retry time (ErrUnavailable), or on an error answer
// (ErrNotFound when the server keeps no events; ErrUnauthorized, ErrForbidden). Next is for one
// goroutine; Close may be called from any.
type Observer struct {
	c        *Client
	name     string
	path     string
	retryFor time.Duration
	ctx      context.Context
	cancel   context.CancelFunc
	closed   chan struct{}
	close    sync.Once

	event ElectionEvent
	done  bool  // Next returns false from now on
	err   error // why, for Err

	// The resume point and what the caller has seen.
	lastID  string         // the id to send as Last-Event-ID; "" to start from the state
	last    *ElectionEvent // the last event returned
	gap     bool           // the events after lastID are gone: the next stream starts from the state
	fresh   bool           // the open stream started from the state after such a gap
	restart bool           // the stream said too_old: open it again from the state

	// The open stream, if any.
	body    io.ReadCloser
	reader  *bufio.Reader
	silence *time.Timer
	msg     sseMessage

	// Failures since the last stream opened.
	failingSince time.Time
	tried        int
	failures     []string
}

// sseMessage is the message being read: its fields so far.
type sseMessage struct {
	event, id string
	data      []byte
	hasData   bool
}

// Observe follows the election name (see Observer). It sends nothing until the first Next.
func (c *Client) Observe(ctx context.Context, name string, opts ...ObserveOption) *Observer {
	o := observeOptions{retryFor: c.retryFor}
	for _, opt := range opts {
		opt(&o)
	}
	octx, cancel := context.WithCancel(ctx)
	return &Observer{c: c, name: name, path: "/v1/elections/" + quoteName(name) + "/observe", retryFor: o.retryFor,
		ctx: octx, cancel: cancel, closed: make(chan struct{}), lastID: o.after}
}

// Event is the event the last successful Next read.
func (o *Observer) Event() ElectionEvent { return o.event }

// Err is why Next returned false: nil after Close, the context's error when it ended.
func (o *Observer) Err() error { return o.err }

// Close ends the stream; a Next in progress returns false. It returns nil.
func (o *Observer) Close() error {
	o.close.Do(func() { close(o.closed) })
	o.cancel()
	return nil
}

// Next waits for the next event; false when the Observer has stopped (see Err).
func (o *Observer) Next() bool {
	for !o.done {
		if o.ctx.Err() != nil {
			o.stop(nil)
			break
		}
		if o.body == nil {
			o.pause(o.open())
			continue
		}
		ev, err := o.read()
		switch {
		case err != nil:
			o.closeStream()
			o.ended()
		case ev != nil:
			o.event = *ev
			return true
		}
	}
	o.closeStream()
	return false
}

// stop records that, and why, the Observer stopped: nil after Close, the context's error once
// it ended, else err.
func (o *Observer) stop(err error) {
	if o.done {
		return
	}
	o.done = true
	select {
	case <-o.closed:
		err = nil
	default:
		if o.ctx.Err() != nil {
			err = o.ctx.Err()
		}
	}
	o.err = err
}

// open opens the stream on the current server; when it cannot, the time to wait before the
// next try (0: at once), after it recorded the failure or stopped the Observer.
func (o *Observer) open() time.Duration {
	index := o.c.currentServer() % len(o.c.servers)
	server := o.c.servers[index]
	sctx, cancel := context.WithCancel(o.ctx)
	req, err := http.NewRequestWithContext(sctx, http.MethodGet, server+o.path, nil)
	if err != nil {
		cancel()
		o.stop(err)
		return 0
	}
	req.Header.Set("Accept", "text/event-stream")
	if o.lastID != "" {
		req.Header.Set("Last-Event-ID", o.lastID)
	}
	o.c.authorize(req.Header)
	// The answer's head within the client's timeout; then a byte at least every observeSilence.
	timer := time.AfterFunc(o.c.timeout, cancel)
	resp, err := o.c.http.Do(req)
	if err != nil {
		timedOut := !timer.Stop()
		cancel()
		if timedOut {
			err = fmt.Errorf("no answer within %v", o.c.timeout)
		}
		return o.failed(server, err)
	}
	if resp.StatusCode != http.StatusOK {
		timer.Stop()
		data, _ := io.ReadAll(io.LimitReader(resp.Body, observeMaxError))
		resp.Body.Close()
		cancel()
		answer := errorFromAnswer(resp.StatusCode, data)
		switch resp.StatusCode {
		case http.StatusGone:
			o.fromState()
		case http.StatusServiceUnavailable:
			return o.failed(server, answer)
		default:
			o.stop(answer)
		}
		return 0
	}
	timer.Reset(observeSilence)
	o.body = &streamBody{ReadCloser: resp.Body, cancel: cancel}
	o.reader = bufio.NewReaderSize(o.body, 64<<10)
	o.silence = timer
	o.msg = sseMessage{}
	o.fresh, o.gap = o.gap, false
	o.failingSince, o.tried, o.failures = time.Time{}, 0, nil
	o.c.setCurrent(index)
	return 0
}

// streamBody is an open stream's body; closing it also ends its request's context.
type streamBody struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (b *streamBody) Close() error {
	b.cancel()
	return b.ReadCloser.Close()
}

// failed is a try on server that got no answer, or 503: the next server, after a pause once
// every server failed in a row (50 ms doubling to 1 s, jittered); the Observer stops once none
// answered for the retry time.
func (o *Observer) failed(server string, err error) time.Duration {
	if o.ctx.Err() != nil {
		o.stop(nil)
		return 0
	}
	now := time.Now()
	if o.failingSince.IsZero() {
		o.failingSince = now
	}
	o.failures = append(o.failures, describe(server, err))
	o.c.setCurrent(o.c.currentServer() + 1)
	o.tried++
	count := len(o.c.servers)
	if o.tried%count != 0 {
		return 0
	}
	if now.Sub(o.failingSince) >= o.retryFor {
		var answer *Error
		if errors.As(err, &answer) {
			o.stop(answer) // the last round ended with a 503: say what it said
		} else {
			o.stop(&UnavailableError{Failures: lastN(o.failures, count)})
		}
		return 0
	}
	backoff := backoffFirst << uint(o.tried/count-1)
	if backoff > backoffMax || backoff <= 0 {
		backoff = backoffMax
	}
	return time.Duration(float64(backoff) * (0.5 + rand.Float64()/2))
}

// ended: the open stream ended (err says how). It is opened again: from the state after a
// too_old, at once; else after a short pause, so a server that ends streams at once is not
// asked in a tight loop.
func (o *Observer) ended() {
	switch {
	case o.done:
	case o.ctx.Err() != nil:
		o.stop(nil)
	case o.restart:
		o.restart = false
		o.fromState()
	default:
		o.pause(backoffFirst)
	}
}

// fromState makes the next stream start from the election's state: the events after the last
// one returned (or the LastEventID given) are no longer kept.
func (o *Observer) fromState() { o.lastID, o.gap = "", true }

func (o *Observer) pause(d time.Duration) {
	if sleep(o.ctx, d) != nil {
		o.stop(nil)
	}
}

func (o *Observer) closeStream() {
	if o.body == nil {
		return
	}
	o.silence.Stop()
	o.body.Close()
	o.body, o.reader, o.silence = nil, nil, nil
}

// read reads the stream up to the next event to return, or the error that ends the stream (a
// too_old, or a message that stops the Observer, end it as io.EOF).
func (o *Observer) read() (*ElectionEvent, error) {
	for {
		line, err := o.line()
		if err != nil {
			return nil, err
		}
		o.silence.Reset(observeSilence)
		if len(line) > 0 {
			o.field(line)
			continue
		}
		msg := o.msg
		o.msg = sseMessage{}
		if msg.event == "" && !msg.hasData {
			continue
		}
		if ev := o.message(msg); ev != nil {
			return ev, nil
		}
		if o.done || o.restart {
			return nil, io.EOF
		}
	}
}

// line is the stream's next line, without its end.
func (o *Observer) line() ([]byte, error) {
	var long []byte
	for {
		part, err := o.reader.ReadSlice('\n')
		if err == bufio.ErrBufferFull {
			if len(long)+len(part) > observeMaxLine {
				o.stop(fmt.Errorf("leasegate: a line of the observe stream is longer than %d bytes", observeMaxLine))
				return nil, io.EOF
			}
			long = append(long, part...)
			continue
		}
		if err != nil {
			return nil, err // a line cut short is no line
		}
		if long != nil {
			part = append(long, part...)
		}
		return bytes.TrimSuffix(bytes.TrimSuffix(part, []byte("\n")), []byte("\r")), nil
	}
}

// field reads one "field: value" line into the message being read.
func (o *Observer) field(line []byte) {
	if line[0] == ':' {
		return // a comment: the keep-alive
	}
	name, value := line, []byte(nil)
	if i := bytes.IndexByte(line, ':'); i >= 0 {
		name, value = line[:i], bytes.TrimPrefix(line[i+1:], []byte(" "))
	}
	switch string(name) {
	case "event":
		o.msg.event = string(value)
	case "id":
		o.msg.id = string(value)
	case "data":
		if o.msg.hasData {
			o.msg.data = append(o.msg.data, '\n')
		}
		o.msg.data = append(o.msg.data, value...)
		o.msg.hasData = true
	}
}

// message is what a whole message means: an event to return, or nil (a message to skip, a
// too_old, which sets restart, or one that stopped the Observer).
func (o *Observer) message(msg sseMessage) *ElectionEvent {
	switch msg.event {
	case "too_old":
		o.restart = true
		return nil
	case "unauthorized": // the key was removed or narrowed while the stream was open
		answer := errorFromAnswer(http.StatusUnauthorized, msg.data)
		if answer.Code == "forbidden" {
			answer.Status = http.StatusForbidden
		}
		o.stop(answer)
		return nil
	case string(EventLeader), string(EventVacant):
	default:
		return nil // a kind of message this client does not know
	}
	var fields struct {
		Owner        string          `json:"owner"`
		Term         uint64          `json:"term"`
		Value        json.RawMessage `json:"value"`
		Reason       *string         `json:"reason"`
		PreviousTerm *uint64         `json:"previous_term"`
	}
	if err := json.Unmarshal(msg.data, &fields); err != nil {
		o.stop(fmt.Errorf("leasegate: an observe message that is not the expected JSON: %v", err))
		return nil
	}
	ev := &ElectionEvent{Type: ElectionEventType(msg.event), Owner: fields.Owner, Term: fields.Term, Value: fields.Value}
	if fields.Reason != nil {
		ev.Reason = *fields.Reason
	}
	if fields.PreviousTerm != nil {
		ev.PreviousTerm = *fields.PreviousTerm
	}
	if msg.id != "" {
		id, err := strconv.ParseUint(strings.TrimSpace(msg.id), 10, 64)
		if err != nil {
			o.stop(fmt.Errorf("leasegate: an observe message's id %q is not a number", msg.id))
			return nil
		}
		ev.ID = id
		o.lastID = msg.id
	}
	fresh := o.fresh
	o.fresh = false
	if fresh {
		if sameState(o.last, ev) {
			o.last.ID = ev.ID
			return nil
		}
		ev.Gap = true
	}
	o.last = ev
	returned := *ev
	return &returned
}

// sameState: the state a stream opened with (now) says what the last event returned said: the
// same leader with the same value, or a vacancy that is not known to be another.
func sameState(last, now *ElectionEvent) bool {
	if last == nil || last.Type != now.Type {
		return false
	}
	if now.Type == EventLeader {
		return last.Owner == now.Owner && last.Term == now.Term && bytes.Equal(jsonOrNull(last.Value), jsonOrNull(now.Value))
	}
	return now.PreviousTerm == 0 || (now.PreviousTerm == last.PreviousTerm && now.Reason == last.Reason)
}

func jsonOrNull(v json.RawMessage) json.RawMessage {
	if len(v) == 0 {
		return json.RawMessage("null")
	}
	return v
}
