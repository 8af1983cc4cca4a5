package leasegate

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"
)

// DefaultServer is the server a Client talks to when neither Config.Servers nor
// $LEASEGATE_SERVER names one.
const DefaultServer = "http://127.0.0.1:7400"

// Config says which servers a Client talks to and how. The zero Config is usable.
type Config struct {
	// Servers are the base URLs (http or https) of servers serving one lock space, tried in
	// this order. Default: $LEASEGATE_SERVER (URLs separated by commas), else DefaultServer.
	Servers []string
	// Owner is the label other clients see on locks taken here. Default: host-pid.
	Owner string
	// Timeout bounds one request, beyond its long-poll wait. Default: 5s.
	Timeout time.Duration
	// RetryFor is how long a call keeps retrying when no server answers, or one answers 503;
	// an acquire keeps retrying for its wait when that is longer. Default: 5s.
	RetryFor time.Duration
	// Key is the API key for a server run with --auth-file, sent as "Authorization: Bearer
	// KEY". Default: $LEASEGATE_KEY.
	Key string
	// TLSConfig is for https servers. Default: the system's CAs, or those of the PEM file
	// $LEASEGATE_CACERT names. Certificates and host names are always verified.
	TLSConfig *tls.Config
	// FirstByteTimeout: a server that has not accepted the connection within it is left for
	// the next one; one that has not begun its answer within it is asked GET /readyz (bounded
	// by the same timeout and by the request's own). Ready (200, or 404 from a server too old
	// to have it), it is working on the request (a long-poll waits there for its grant) and
	// the wait goes on, to be asked again a FirstByteTimeout later; silent or 503, the request
	// goes to the next server (an acquire keeps its request_id). A paused or unready gateway
	// so costs about twice this, not Timeout. At least 100ms. Default: 2s.
	FirstByteTimeout time.Duration
}

// Client talks to a leasegate lock space. It is safe for concurrent use; one per process is
// enough.
type Client struct {
	servers   []string
	owner     string
	timeout   time.Duration
	retryFor  time.Duration
	key       string
	firstByte time.Duration
	http      *http.Client

	mu      sync.Mutex
	current int // the server that answered last; calls start there
}

// NewClient makes a Client; it sends nothing yet.
func NewClient(cfg Config) (*Client, error) {
	servers := cfg.Servers
	if len(servers) == 0 {
		env := os.Getenv("LEASEGATE_SERVER")
		if env == "" {
			env = DefaultServer
		}
		servers = strings.Split(env, ",")
	}
	c := &Client{owner: cfg.Owner, timeout: cfg.Timeout, retryFor: cfg.RetryFor, key: cfg.Key,
		firstByte: cfg.FirstByteTimeout}
	for _, s := range servers {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		u, err := url.Parse(s)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("leasegate: not an http(s) server URL: %q", s)
		}
		c.servers = append(c.servers, u.Scheme+"://"+u.Host+strings.TrimRight(u.EscapedPath(), "/"))
	}
	if len(c.servers) == 0 {
		return nil, errors.New("leasegate: no server URL given")
	}
	if c.owner == "" {
		host, _ := os.Hostname()
		c.owner = fmt.Sprintf("%s-%d", host, os.Getpid())
		if len(c.owner) > 128 {
			c.owner = c.owner[:128]
		}
	}
	if c.timeout <= 0 {
		c.timeout = 5 * time.Second
	}
	if c.retryFor <= 0 {
		c.retryFor = 5 * time.Second
	}
	switch {
	case c.firstByte == 0:
		c.firstByte = 2 * time.Second
	case c.firstByte < minFirstByte:
		return nil, fmt.Errorf("leasegate: FirstByteTimeout: at least %v, not %v", minFirstByte, c.firstByte)
	}
	if c.key == "" {
		c.key = os.Getenv("LEASEGATE_KEY")
	}
	tlsConfig := cfg.TLSConfig
	if tlsConfig == nil {
		tlsConfig = &tls.Config{MinVersion: tls.VersionTLS12}
		if file := os.Getenv("LEASEGATE_CACERT"); file != "" {
			pem, err := os.ReadFile(file)
			if err != nil {
				return nil, fmt.Errorf("leasegate: $LEASEGATE_CACERT: %w", err)
			}
			tlsConfig.RootCAs = x509.NewCertPool()
			if !tlsConfig.RootCAs.AppendCertsFromPEM(pem) {
				return nil, fmt.Errorf("leasegate: $LEASEGATE_CACERT: no PEM certificate in %s", file)
			}
		}
	}
	// No proxy from the environment: traffic to a lock service must not be rerouted.
	c.http = &http.Client{Transport: &http.Transport{
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		TLSClientConfig:     tlsConfig,
		TLSHandshakeTimeout: 5 * time.Second,
		MaxIdleConnsPerHost: 16,
		IdleConnTimeout:     60 * time.Second,
	}}
	return c, nil
}

// Servers are the URLs the client talks to.
func (c *Client) Servers() []string { return append([]string(nil), c.servers...) }

// Owner is the label other clients see on locks taken here.
func (c *Client) Owner() string { return c.owner }

func (c *Client) currentServer() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.current
}

func (c *Client) setCurrent(i int) {
	c.mu.Lock()
	c.current = i % len(c.servers)
	c.mu.Unlock()
}

// Mode is a lease's mode on a lock.
type Mode string

const (
	Write Mode = "write" // exclusive: the default
	Read  Mode = "read"  // shared with the other readers; the guard refuses its writes
)

// AcquireOption changes an acquire.
type AcquireOption func(*acquireOptions)

type acquireOptions struct {
	ttl       time.Duration
	wait      time.Duration
	owner     string
	metadata  interface{}
	mode      Mode
	lockDelay time.Duration
	requestID string
	reenter   *Lease
	permits   int
}

// TTL is how long the lease lasts unless renewed (default 30s). The client renews it in the
// background at a third of it, so a short TTL (what others wait if this process dies) does not
// limit how long the work may run.
func TTL(d time.Duration) AcquireOption { return func(o *acquireOptions) { o.ttl = d } }

// Wait is how long to wait for the lock in its first-come first-served queue (default 0: try
// once). The acquire's context can end the wait sooner.
func Wait(d time.Duration) AcquireOption { return func(o *acquireOptions) { o.wait = d } }

// Owner sets this lease's owner label (default the client's).
func Owner(label string) AcquireOption { return func(o *acquireOptions) { o.owner = label } }

// Metadata is a small JSON value (an object) every reader of the lock sees: who, why, host.
func Metadata(v interface{}) AcquireOption { return func(o *acquireOptions) { o.metadata = v } }

// Shared takes a read lease: readers hold the lock together, a writer alone.
func Shared() AcquireOption { return func(o *acquireOptions) { o.mode = Read } }

// LockDelay (at most 60s): when this lease ends uncleanly (it expires, or is force-released),
// nobody is granted the lock until that long after, so work the lost holder may still be doing
// has time to stop.
func LockDelay(d time.Duration) AcquireOption { return func(o *acquireOptions) { o.lockDelay = d } }

// Permits is how many of a semaphore's permits one lease holds (AcquirePermit, WithPermit;
// 1..limit, default 1), released together. Requests are granted first come, first served: one
// for many permits at the head of the queue keeps later ones waiting, even smaller ones.
func Permits(n int) AcquireOption { return func(o *acquireOptions) { o.permits = n } }

// RequestID sets the acquire's request_id (default: a random one). Every retry of the acquire
// sends the same one, so a retry whose predecessor's answer was lost gets that grant back;
// give your own to make your own retries of a whole Acquire idempotent the same way.
func RequestID(id string) AcquireOption { return func(o *acquireOptions) { o.requestID = id } }

// Acquire takes the lock name, waiting up to Wait in its queue, and returns the *Lease, which
// the client renews in the background until Release or loss. The context bounds the acquire
// only (cancelling it leaves the queue at once), never the lease; watch l.Lost() or l.Context()
// for the loss. Fails with an error that errors.Is ErrLockHeld when not granted in time, and
// ErrUnavailable when no server answered.
func (c *Client) Acquire(ctx context.Context, name string, opts ...AcquireOption) (*Lease, error) {
	return c.take(ctx, name, kindLock, 0, nil, opts)
}

// AcquirePermit takes one of the limit permits (1..10000) of the semaphore name (Permits(n) of
// them in one lease), as Acquire takes a lock. Each is a *Lease with its own token, renewed and
// released like a lock's.
// Fails with ErrSemaphoreFull (also an ErrLockHeld) when not granted in time, ErrLimitMismatch
// when the semaphore is in use under another limit.
func (c *Client) AcquirePermit(ctx context.Context, name string, limit int, opts ...AcquireOption) (*Lease, error) {
	if limit < 1 || limit > 10000 {
		return nil, fmt.Errorf("leasegate: limit: the number of permits is 1..10000, not %d", limit)
	}
	return c.take(ctx, name, kindSemaphore, limit, nil, opts)
}

// WithLock acquires name, runs fn while the lease is renewed in the background, and releases
// it, also when fn panics or fails. fn's context is cancelled when the lease is lost (and when
// ctx is). If the lease was lost meanwhile, WithLock returns a *LostError (errors.Is
// ErrLeaseLost) with fn's own error in its Work; otherwise fn's error. A release that fails
// after the work is not reported: the server frees the lock at its TTL.
func (c *Client) WithLock(ctx context.Context, name string, fn func(ctx context.Context, l *Lease) error,
	opts ...AcquireOption) error {
	l, err := c.Acquire(ctx, name, opts...)
	if err != nil {
		return err
	}
	return l.hold(ctx, fn)
}

// WithPermit is WithLock for one of the limit permits of the semaphore name.
func (c *Client) WithPermit(ctx context.Context, name string, limit int, fn func(ctx context.Context, l *Lease) error,
	opts ...AcquireOption) error {
	l, err := c.AcquirePermit(ctx, name, limit, opts...)
	if err != nil {
		return err
	}
	return l.hold(ctx, fn)
}

// grant is the answer of an acquire.
type grant struct {
	Name     string          `json:"name"`
	Owner    string          `json:"owner"`
	Lease    string          `json:"lease"`
	Token    uint64          `json:"token"`
	TTLMs    int64           `json:"ttl_ms"`
	Count    int             `json:"count"`
	Mode     Mode            `json:"mode"`
	Limit    int             `json:"limit"`
	Permits  int             `json:"permits"`
	Metadata json.RawMessage `json:"metadata"`
	// A lock's value when granted, and its version.
	Value        json.RawMessage `json:"value"`
	ValueVersion uint64          `json:"value_version"`
}

// take is the acquire of a lock, of permits of a semaphore (limit), or the campaign of an
// election (value: the leader's value as JSON).
func (c *Client) take(ctx context.Context, name string, kind leaseKind, limit int, value json.RawMessage,
	opts []AcquireOption) (*Lease, error) {
	o := acquireOptions{ttl: 30 * time.Second, mode: Write}
	for _, opt := range opts {
		opt(&o)
	}
	body, err := c.acquireBody(&o, kind, limit)
	if err != nil {
		return nil, err
	}
	if kind == kindElection {
		body["value"] = value
	}
	path := lockPath(name, "acquire", kind)
	start := time.Now()
	waitUntil := start.Add(o.wait)
	until := start.Add(o.wait)
	if o.wait < c.retryFor {
		until = start.Add(c.retryFor)
	}
	var g grant
	var res result
	for {
		pollUntil := waitUntil
		if limit := time.Now().Add(maxPoll); limit.Before(pollUntil) {
			pollUntil = limit
		}
		res, err = c.call(ctx, spec{method: http.MethodPost, path: path, body: body, until: until, waitUntil: pollUntil}, &g)
		if err == nil {
			break
		}
		if !errors.Is(err, ErrLockHeld) || !pollUntil.Before(waitUntil) {
			return nil, err
		}
	}
	// Any attempt may have made the grant, so only the first one's send time bounds it from
	// below; a grant that came long after that (a wait in the queue, retries) is renewed at once.
	sent := start
	ttl := time.Duration(g.TTLMs) * time.Millisecond
	if time.Since(start) > ttl/3 {
		var r result
		r, err = c.call(context.Background(), spec{method: http.MethodPost, path: lockPath(name, "renew", kind),
			body: map[string]interface{}{"lease": g.Lease}, until: time.Now().Add(c.retryFor)}, nil)
		if err != nil {
			c.courtesyRelease(name, g.Lease, kind)
			return nil, err
		}
		sent = r.sent
	}
	return newLease(c, res.server, &g, sent, kind), nil
}

// acquireBody is the JSON of an acquire or a campaign, checked before anything is sent.
func (c *Client) acquireBody(o *acquireOptions, kind leaseKind, limit int) (map[string]interface{}, error) {
	ttlMs, err := millis("ttl", o.ttl)
	if err != nil {
		return nil, err
	}
	if _, err := millis("wait", o.wait); err != nil {
		return nil, err
	}
	owner := o.owner
	if owner == "" {
		owner = c.owner
	}
	id := o.requestID
	if id == "" {
		id = newRequestID()
	}
	body := map[string]interface{}{"owner": owner, "ttl_ms": ttlMs, "request_id": id}
	if o.metadata != nil {
		data, err := json.Marshal(o.metadata)
		if err != nil {
			return nil, fmt.Errorf("leasegate: metadata: %w", err)
		}
		body["metadata"] = json.RawMessage(data)
	}
	if kind == kindElection {
		switch {
		case o.permits != 0:
			return nil, errors.New("leasegate: permits: a semaphore's (AcquirePermit), not an election's")
		case o.mode != Write:
			return nil, errors.New("leasegate: Shared: a lock's, not an election's (it has one leader)")
		case o.lockDelay != 0:
			return nil, errors.New("leasegate: LockDelay: a lock's, not an election's")
		}
		return body, nil
	}
	if kind == kindSemaphore {
		body["limit"] = limit
		if o.permits < 0 || o.permits > limit {
			return nil, fmt.Errorf("leasegate: permits: 1..limit (%d), not %d", limit, o.permits)
		}
		if o.permits > 1 { // 1 is the default: a server older than permits takes this acquire too
			body["permits"] = o.permits
		}
		return body, nil
	}
	if o.permits != 0 {
		return nil, errors.New("leasegate: permits: a semaphore's (AcquirePermit), not a lock's")
	}
	switch o.mode {
	case Write:
	case Read:
		body["mode"] = string(Read)
	default:
		return nil, fmt.Errorf("leasegate: mode: %q is neither write nor read", o.mode)
	}
	if o.lockDelay != 0 {
		ms, err := millis("lock delay", o.lockDelay)
		if err != nil {
			return nil, err
		}
		body["lock_delay_ms"] = ms
	}
	if o.reenter != nil {
		body["lease"] = o.reenter.id
	}
	return body, nil
}

func newRequestID() string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		// crypto/rand does not fail on Linux; a clock-based id still never matches another client's.
		return fmt.Sprintf("t%x-%d", time.Now().UnixNano(), os.Getpid())
	}
	return hex.EncodeToString(b[:])
}

// Holder is one holder of a lock or permits, as anyone may see it (never its lease id).
type Holder struct {
	Permits      int             `json:"permits"` // a semaphore's: how many permits its lease holds
	Owner        string          `json:"owner"`
	Token        uint64          `json:"token"`
	Mode         Mode            `json:"mode"`
	TTLMs        int64           `json:"ttl_ms"`
	AcquiredAtMs int64           `json:"acquired_at_ms"`
	ExpiresAtMs  int64           `json:"expires_at_ms"`
	Count        int             `json:"count"`
	Metadata     json.RawMessage `json:"metadata"`
}

// LockState is a lock's state (GET /v1/locks/{name}).
type LockState struct {
	Name         string   `json:"name"`
	Held         bool     `json:"held"`
	Mode         Mode     `json:"mode"`
	Holder       *Holder  `json:"holder"`
	Holders      []Holder `json:"holders"`
	Waiters      int      `json:"waiters"`
	LastToken    uint64   `json:"last_token"`
	DelayUntilMs *int64   `json:"delay_until_ms"`
	// The lock's value (null when none), its version (0: never written) and its writer's token.
	Value        json.RawMessage `json:"value"`
	ValueVersion uint64          `json:"value_version"`
	ValueToken   uint64          `json:"value_token"`
}

// SemaphoreState is a semaphore's state (GET /v1/semaphores/{name}).
type SemaphoreState struct {
	Name      string   `json:"name"`
	Limit     int      `json:"limit"`
	Holders   []Holder `json:"holders"`
	Available int      `json:"available"`
	// PermitsUsed is how many permits the holders hold together.
	PermitsUsed int    `json:"permits_used"`
	Waiters     int    `json:"waiters"`
	LastToken   uint64 `json:"last_token"`
}

// Status is the lock's state. Any name is valid: one never taken is free.
func (c *Client) Status(ctx context.Context, name string) (*LockState, error) {
	var s LockState
	_, err := c.call(ctx, spec{method: http.MethodGet, path: "/v1/locks/" + quoteName(name),
		until: time.Now().Add(c.retryFor)}, &s)
	if err != nil {
		return nil, err
	}
	return &s, nil
}

// SemaphoreStatus is the semaphore's state.
func (c *Client) SemaphoreStatus(ctx context.Context, name string) (*SemaphoreState, error) {
	var s SemaphoreState
	_, err := c.call(ctx, spec{method: http.MethodGet, path: "/v1/semaphores/" + quoteName(name),
		until: time.Now().Add(c.retryFor)}, &s)
	if err != nil {
		return nil, err
	}
	return &s, nil
}

// LockValue is a lock's value (GET /v1/locks/{name}/value).
type LockValue struct {
	Name         string          `json:"name"`
	Value        json.RawMessage `json:"value"`         // as its writer sent it; null when none
	ValueVersion uint64          `json:"value_version"` // 0: never written
	ValueToken   uint64          `json:"value_token"`   // the token of the lease that wrote it; 0: never written
}

// Value reads the lock's value; no lease is needed.
func (c *Client) Value(ctx context.Context, name string) (*LockValue, error) {
	var v LockValue
	_, err := c.call(ctx, spec{method: http.MethodGet, path: lockPath(name, "value", kindLock),
		until: time.Now().Add(c.retryFor)}, &v)
	if err != nil {
		return nil, err
	}
	return &v, nil
}

// FenceResult is the answer of an accepted fence check.
type FenceResult struct {
	Resource string `json:"resource"`
	Accepted bool   `json:"accepted"`
	MaxToken uint64 `json:"max_token"`
}

// Fence checks token against the resource's high-water mark (POST /v1/fence/{resource}),
// raising the mark when the token is at least as high. A stale token fails with an *Error that
// errors.Is ErrStaleToken (its Body has max_token).
func (c *Client) Fence(ctx context.Context, resource string, token uint64) (*FenceResult, error) {
	var f FenceResult
	_, err := c.call(ctx, spec{method: http.MethodPost, path: "/v1/fence/" + quoteName(resource),
		body: map[string]interface{}{"token": token}, until: time.Now().Add(c.retryFor)}, &f)
	if err != nil {
		return nil, err
	}
	return &f, nil
}
