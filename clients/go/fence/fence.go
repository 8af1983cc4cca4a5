// Package fence is a net/http middleware for storage backends: it refuses a write whose
// fencing token is older than one the resource has already seen, with 409 stale_token, before
// the handler runs. A backend puts it in front of its write handlers:
//
//	checker := fence.Remote{Client: client}   // asks leasegate: POST /v1/fence/{resource}
//	// or fence.NewLocal(): the highest token per resource, kept by this process
//	http.Handle("/objects/", fence.Middleware(fence.Options{Checker: checker})(objects))
//
// The token comes in the Fencing-Token header, as leasegate's guard forwards it and as
// `leasegate run` hands it to a command ($LEASEGATE_TOKEN). GET, HEAD and OPTIONS pass
// unchecked. Writes to one resource run one at a time in this process, each checked just
// before its handler, so the handler applies them in token order; across several processes
// behind one store, the store's own atomic check is the decisive one (docs/fencing-sql.md).
// It behaves as the fence checks of the Python, Node and Java clients (docs/fencing.md).
package fence

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"

	"leasegate"
)

// Checker decides whether token may write resource, raising the resource's mark when it may.
// It returns the mark after the check and whether the token was accepted (token >= mark), or
// an error: one that errors.Is ErrInvalidToken refuses the token itself (never issued), any
// other says the check could not be made.
type Checker interface {
	Check(ctx context.Context, resource string, token uint64) (maxToken uint64, accepted bool, err error)
}

// ErrInvalidToken: the checker refuses the token itself, as leasegate refuses a token it never
// issued. Middleware answers 400 bad_request.
var ErrInvalidToken = errors.New("fence: invalid token")

// Local keeps the highest token seen per resource in this process's memory. It forgets them
// when the process stops: use it where the backend's state does too, or where a restart also
// empties the writers' pipeline (a cache, a test); otherwise prefer Remote, whose marks are
// durable. Safe for concurrent use.
type Local struct {
	mu  sync.Mutex
	max map[string]uint64
}

// NewLocal is a Local with no marks.
func NewLocal() *Local { return &Local{max: map[string]uint64{}} }

// Check accepts token when it is at least the resource's mark, and makes it the mark.
func (l *Local) Check(_ context.Context, resource string, token uint64) (uint64, bool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if token < l.max[resource] {
		return l.max[resource], false, nil
	}
	l.max[resource] = token
	return token, true, nil
}

// Remote asks leasegate (POST /v1/fence/{resource}), whose marks are durable before it answers
// and are shared by every backend that asks; it also refuses tokens never issued and tokens of
// force-released leases.
type Remote struct {
	Client *leasegate.Client
}

// Check asks the server; a stale token is (mark, false, nil), a failure to ask an error.
func (r Remote) Check(ctx context.Context, resource string, token uint64) (uint64, bool, error) {
	f, err := r.Client.Fence(ctx, resource, token)
	if err == nil {
		return f.MaxToken, f.Accepted, nil
	}
	var answered *leasegate.Error
	if errors.As(err, &answered) && answered.Code == "stale_token" {
		var body struct {
			MaxToken uint64 `json:"max_token"`
		}
		_ = json.Unmarshal(answered.Body, &body) // without it the mark is reported as 0
		return body.MaxToken, false, nil
	}
	if errors.As(err, &answered) && answered.Code == "bad_request" {
		return 0, false, fmt.Errorf("%w: %s", ErrInvalidToken, answered.Message)
	}
	return 0, false, err
}

// Options configure Middleware.
type Options struct {
	// Checker decides (required).
	Checker Checker
	// Resource names the resource a request writes ("" refuses it with 400). Default: Prefix
	// and the URL path without its leading "/" ("/orders/42" -> "orders/42"), the name
	// leasegate's guard binds to a lock.
	Resource func(*http.Request) string
	// Prefix goes before the default resource's name, to keep one backend's resources apart
	// from another's on one leasegate ("billing/" + "orders/42").
	Prefix string
	// Header carries the token. Default: "Fencing-Token".
	Header string
	// NoSerialize lets writes of one resource run at once, for a handler that orders them
	// itself; by default each waits for the one before it (first come, first served).
	NoSerialize bool
}

type tokenKey struct{}

// Token is the fencing token of a write the middleware admitted, from its request's context.
func Token(ctx context.Context) (uint64, bool) {
	token, ok := ctx.Value(tokenKey{}).(uint64)
	return token, ok
}

// Middleware checks every write (any method but GET, HEAD and OPTIONS) before next runs:
// no token is 428 token_required, a token that is not a decimal integer in 1..2^64-1 is 400
// bad_request (so is one the checker refuses as never issued, and a path that names no
// resource), a stale token 409 stale_token with max_token, a checker that fails 503
// fence_unavailable with Retry-After: 1. Each is a JSON body as leasegate's own errors. An
// admitted write runs next with its token in the request's context (Token).
func Middleware(opts Options) func(http.Handler) http.Handler {
	if opts.Checker == nil {
		panic("fence.Middleware: Options.Checker is required")
	}
	if opts.Resource == nil {
		opts.Resource = func(r *http.Request) string {
			path := strings.TrimPrefix(r.URL.Path, "/")
			if path == "" {
				return ""
			}
			return opts.Prefix + path
		}
	}
	if opts.Header == "" {
		opts.Header = "Fencing-Token"
	}
	var queues resourceLocks
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			switch r.Method {
			case http.MethodGet, http.MethodHead, http.MethodOptions:
				next.ServeHTTP(w, r)
				return
			}
			text := r.Header.Get(opts.Header)
			if text == "" {
				reply(w, http.StatusPreconditionRequired, "token_required",
					fmt.Sprintf("a write needs its fencing token in %s", opts.Header), nil)
				return
			}
			field := map[string]interface{}{"field": opts.Header}
			token, err := strconv.ParseUint(text, 10, 64)
			if err != nil || token == 0 || text[0] == '+' {
				reply(w, http.StatusBadRequest, "bad_request",
					fmt.Sprintf("%s must be a decimal integer in 1..18446744073709551615", opts.Header), field)
				return
			}
			resource := opts.Resource(r)
			if resource == "" {
				reply(w, http.StatusBadRequest, "bad_request", "this path names no resource to fence", nil)
				return
			}
			if !opts.NoSerialize {
				defer queues.lock(resource)()
				if r.Context().Err() != nil {
					return // its client left while it waited for its turn: not run
				}
			}
			max, accepted, err := opts.Checker.Check(r.Context(), resource, token)
			switch {
			case errors.Is(err, ErrInvalidToken):
				reply(w, http.StatusBadRequest, "bad_request", err.Error(), field)
			case err != nil:
				w.Header().Set("Retry-After", "1")
				reply(w, http.StatusServiceUnavailable, "fence_unavailable", "the fence check failed: "+err.Error(), nil)
			case !accepted:
				reply(w, http.StatusConflict, "stale_token",
					fmt.Sprintf("token %d is older than %d, which %q has seen", token, max, resource),
					map[string]interface{}{"max_token": max, "resource": resource})
			default:
				next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), tokenKey{}, token)))
			}
		})
	}
}

func reply(w http.ResponseWriter, status int, code, message string, extra map[string]interface{}) {
	body := map[string]interface{}{"error": code, "message": message}
	for k, v := range extra {
		body[k] = v
	}
	data, _ := json.Marshal(body)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(append(data, '\n'))
}

// resourceLocks serializes the writes of each resource: a resource's entry lives while a
// write to it runs or waits, so the map holds only resources in use.
type resourceLocks struct {
	mu      sync.Mutex
	entries map[string]*resourceLock
}

type resourceLock struct {
	mu    sync.Mutex
	users int // writes running or waiting; guarded by resourceLocks.mu
}

func (q *resourceLocks) lock(resource string) (unlock func()) {
	q.mu.Lock()
	if q.entries == nil {
		q.entries = map[string]*resourceLock{}
	}
	e := q.entries[resource]
	if e == nil {
		e = &resourceLock{}
		q.entries[resource] = e
	}
	e.users++
	q.mu.Unlock()
	e.mu.Lock()
	return func() {
		e.mu.Unlock()
		q.mu.Lock()
		e.users--
		if e.users == 0 {
			delete(q.entries, resource)
		}
		q.mu.Unlock()
	}
}
