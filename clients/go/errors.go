package leasegate

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// Errors named after the contract's error codes: test with errors.Is(err, leasegate.ErrLockHeld).
// Every error answer of a server is an *Error, which errors.Is matches against the sentinel of
// its code (a semaphore_full and a not_leader are also an ErrLockHeld).
var (
	ErrBadRequest    = errors.New("leasegate: bad_request")
	ErrUnauthorized  = errors.New("leasegate: unauthorized")
	ErrForbidden     = errors.New("leasegate: forbidden")
	ErrNotFound      = errors.New("leasegate: not_found")
	ErrLockHeld      = errors.New("leasegate: lock_held")
	ErrSemaphoreFull = errors.New("leasegate: semaphore_full")
	ErrLimitMismatch = errors.New("leasegate: limit_mismatch")
	ErrModeConflict  = errors.New("leasegate: mode_conflict")
	ErrNotHolder     = errors.New("leasegate: not_holder")
	ErrStaleToken    = errors.New("leasegate: stale_token")
	// ErrNotLeader: a campaign not elected within its wait (also an ErrLockHeld), or a Proclaim
	// or Resign by a lease that does not lead now.
	ErrNotLeader = errors.New("leasegate: not_leader")
	// ErrTooOld: the events asked for are no longer kept (an Observer goes on from the state).
	ErrTooOld = errors.New("leasegate: too_old")
	// ErrVersionMismatch: a SetValueIf whose version is not the value's now.
	ErrVersionMismatch = errors.New("leasegate: version_mismatch")
	ErrTokenRequired   = errors.New("leasegate: token_required")
	ErrOverloaded      = errors.New("leasegate: overloaded")
)

// Errors of the client itself.
var (
	// ErrLeaseLost: the lease was lost (a *LostError says how).
	ErrLeaseLost = errors.New("leasegate: lease lost")
	// ErrReleased: the lease was released by its holder.
	ErrReleased = errors.New("leasegate: lease released")
	// ErrUnavailable: no server answered in time (an *UnavailableError says what happened).
	ErrUnavailable = errors.New("leasegate: no server answered")
	// ErrTLSVerification: a server's certificate failed verification; not retried.
	ErrTLSVerification = errors.New("leasegate: certificate verification failed")
	// ErrBadDuration: a duration the client refuses before any request (see ParseDuration).
	ErrBadDuration = errors.New("leasegate: bad duration")
)

var codeErrors = map[string]error{
	"bad_request":      ErrBadRequest,
	"unauthorized":     ErrUnauthorized,
	"forbidden":        ErrForbidden,
	"not_found":        ErrNotFound,
	"lock_held":        ErrLockHeld,
	"semaphore_full":   ErrSemaphoreFull,
	"limit_mismatch":   ErrLimitMismatch,
	"mode_conflict":    ErrModeConflict,
	"not_holder":       ErrNotHolder,
	"stale_token":      ErrStaleToken,
	"not_leader":       ErrNotLeader,
	"too_old":          ErrTooOld,
	"version_mismatch": ErrVersionMismatch,
	"token_required":   ErrTokenRequired,
	"overloaded":       ErrOverloaded,
}

// Error is an error answer of a server: {"error": code, "message": ..., more fields}.
type Error struct {
	Status  int             // the HTTP status
	Code    string          // the contract's error code ("lock_held"...); "" for an answer that is not leasegate's
	Message string          // the server's human text
	Reason  string          // the answer's "reason" (not_holder's "expired", "revoked", "released"...), if any
	Field   string          // bad_request's "field", if any
	Body    json.RawMessage // the whole answer, e.g. lock_held's holder and waiters
}

func (e *Error) Error() string {
	code := e.Code
	if code == "" {
		code = "error"
	}
	text := fmt.Sprintf("leasegate: %s (HTTP %d)", code, e.Status)
	if e.Message != "" {
		text += ": " + e.Message
	}
	if e.Reason != "" {
		text += " (reason: " + e.Reason + ")"
	}
	return text
}

// Is matches the sentinel of the error's code.
func (e *Error) Is(target error) bool {
	if sentinel, ok := codeErrors[e.Code]; ok && sentinel == target {
		return true
	}
	return (e.Code == "semaphore_full" || e.Code == "not_leader") && target == ErrLockHeld
}

// errorFromAnswer builds the *Error of an answer with a status >= 300.
func errorFromAnswer(status int, body []byte) *Error {
	e := &Error{Status: status, Body: json.RawMessage(body)}
	var fields struct {
		Error   string `json:"error"`
		Message string `json:"message"`
		Reason  string `json:"reason"`
		Field   string `json:"field"`
	}
	if json.Unmarshal(body, &fields) == nil {
		e.Code, e.Message, e.Reason, e.Field = fields.Error, fields.Message, fields.Reason, fields.Field
	} else {
		text := strings.TrimSpace(string(body))
		if len(text) > 200 {
			text = text[:200]
		}
		e.Message = text
	}
	return e
}

// LostError says that, and why, a lease was lost. errors.Is(err, ErrLeaseLost) is true, and
// errors.Is(err, ErrNotHolder) too when the server said so.
type LostError struct {
	Name   string // the lock (or semaphore, or election)
	Reason string // what happened, in words
	Cause  error  // the error that showed it (an *Error, an *UnavailableError), or nil for the clock
	// Work is what the function given to WithLock or WithPermit returned, if it failed too.
	Work error
}

func (e *LostError) Error() string {
	text := fmt.Sprintf("leasegate: the lease on %q was lost: %s", e.Name, e.Reason)
	if e.Work != nil {
		text += "; the work under it failed too: " + e.Work.Error()
	}
	return text
}

func (e *LostError) Is(target error) bool { return target == ErrLeaseLost }
func (e *LostError) Unwrap() error        { return e.Cause }

// UnavailableError: no server gave an answer in time. Failures has one line per server of the
// last round (refused, timed out, certificate not verified...).
type UnavailableError struct {
	Failures []string
	TLS      bool // every server failed certificate verification
}

func (e *UnavailableError) Error() string {
	if e.TLS {
		return "leasegate: certificate verification failed: " + strings.Join(e.Failures, "; ")
	}
	return "leasegate: no server answered: " + strings.Join(e.Failures, "; ")
}

func (e *UnavailableError) Is(target error) bool {
	return target == ErrUnavailable || (e.TLS && target == ErrTLSVerification)
}
