package leasegate

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// How a call goes to the servers, as in the Python and Node clients: a connection failure, a
// timeout or a 503 moves on to the next server, and a whole round of failures backs off (50 ms
// doubling to 1 s, jittered) before the next one, until the call's time is up. A certificate
// that fails verification is not tried again: when no other server is left, the call fails at
// once. Any other answer is final. The caller's context ends a call at once.
const (
	maxPoll         = time.Hour             // the server's largest wait_ms; a longer wait polls again
	minAttempt      = 50 * time.Millisecond // no attempt gets a shorter timeout, even at its call's end
	courtesyTimeout = time.Second           // per server, for the release of a lease already lost
	backoffFirst    = 50 * time.Millisecond // after the first round of failures
	backoffMax      = time.Second           // doubling up to this
	maxAnswerBytes  = 64 << 20              // a larger answer is refused, not buffered
)

// spec is one call: a request that may go to any server.
type spec struct {
	method, path string
	body         map[string]interface{} // nil: no body
	until        time.Time              // no new attempt starts after it, once every server was tried
	waitUntil    time.Time              // a long-polling acquire: each attempt waits what is left (wait_ms)
	hard         bool                   // no answer is awaited past until either (a renewal is useless later)
}

// result is a call's success: the server that answered and when its attempt was sent.
type result struct {
	server string
	sent   time.Time
}

// call sends s until some server answers other than 503, and decodes a 2xx answer into out.
// It returns an *Error for an error answer, an *UnavailableError when no server answered in
// time, or the context's error.
func (c *Client) call(ctx context.Context, s spec, out interface{}) (result, error) {
	count := len(c.servers)
	var failures []string
	var lastAnswer *Error // the latest 503, returned when time is up
	untrusted := map[int]string{}
	tried := 0
	for {
		index := c.currentServer() % count
		if _, bad := untrusted[index]; bad {
			c.setCurrent(index + 1)
			continue
		}
		server := c.servers[index]
		sent := time.Now()
		timeout := c.timeout
		body := s.body
		if !s.waitUntil.IsZero() {
			wait := s.waitUntil.Sub(sent)
			if wait < 0 {
				wait = 0
			}
			body = withField(s.body, "wait_ms", int64(wait/time.Millisecond))
			timeout += wait
		}
		if s.hard && s.until.Sub(sent) < timeout {
			timeout = s.until.Sub(sent)
		}
		if timeout < minAttempt {
			timeout = minAttempt
		}
		status, answer, err := c.attempt(ctx, server, s.method, s.path, body, timeout)
		switch {
		case ctx.Err() != nil:
			return result{}, ctx.Err()
		case err != nil && isTLSFailure(err):
			untrusted[index] = describe(server, err) +
				" (a server whose certificate a private CA signed needs Config.TLSConfig or $LEASEGATE_CACERT)"
			c.setCurrent(index + 1)
			if len(untrusted) == count {
				return result{}, &UnavailableError{Failures: values(untrusted), TLS: true}
			}
			continue // to the next server at once: not a round's failure to back off from
		case err != nil:
			failures = append(failures, describe(server, err))
			lastAnswer = nil
		case status < 300:
			c.setCurrent(index)
			if out != nil {
				if err := json.Unmarshal(answer, out); err != nil {
					return result{}, fmt.Errorf("leasegate: %s answered HTTP %d with a body that is not the expected JSON: %v",
						server, status, err)
				}
			}
			return result{server: server, sent: sent}, nil
		case status == http.StatusServiceUnavailable:
			lastAnswer = errorFromAnswer(status, answer)
			failures = append(failures, server+": "+lastAnswer.Error())
		default:
			return result{}, errorFromAnswer(status, answer)
		}
		c.setCurrent(index + 1)
		tried++
		live := count - len(untrusted)
		left := time.Until(s.until)
		if tried >= live && left <= 0 {
			if lastAnswer != nil {
				return result{}, lastAnswer
			}
			return result{}, &UnavailableError{Failures: append(values(untrusted), lastN(failures, live)...)}
		}
		if tried%live == 0 {
			backoff := backoffFirst << uint(tried/live-1)
			if backoff > backoffMax || backoff <= 0 {
				backoff = backoffMax
			}
			pause := time.Duration(float64(backoff) * (0.5 + rand.Float64()/2))
			if pause > left {
				pause = left
			}
			if err := sleep(ctx, pause); err != nil {
				return result{}, err
			}
		}
	}
}

// attempt is one request to one server: its status and body, or the error when no whole answer
// came within timeout, or when the first-byte watch (firstbyte.go) gave it up.
func (c *Client) attempt(ctx context.Context, server, method, path string, body map[string]interface{},
	timeout time.Duration) (int, []byte, error) {
	actx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var payload io.Reader
	if body != nil {
		data, err := json.Marshal(body)
		if err != nil {
			return 0, nil, err
		}
		payload = bytes.NewReader(data)
	}
	var w watch
	req, err := http.NewRequestWithContext(w.watched(actx), method, server+path, payload)
	if err != nil {
		return 0, nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	c.authorize(req.Header)
	go w.run(c, actx, cancel, server)
	resp, err := c.http.Do(req)
	if stalled := w.stalled.Load(); stalled != nil {
		if err == nil {
			resp.Body.Close()
		}
		return 0, nil, stalled
	}
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswerBytes+1))
	if err != nil {
		return 0, nil, err
	}
	if len(data) > maxAnswerBytes {
		return 0, nil, fmt.Errorf("an answer of more than %d bytes", maxAnswerBytes)
	}
	return resp.StatusCode, data, nil
}

// courtesyRelease makes one short release attempt per server, errors ignored: for a lease that
// may already be gone, where the server frees the lock at its TTL anyway.
func (c *Client) courtesyRelease(name, lease string, kind leaseKind) {
	for _, server := range c.servers {
		status, _, err := c.attempt(context.Background(), server, http.MethodPost, lockPath(name, "release", kind),
			map[string]interface{}{"lease": lease}, minDuration(c.timeout, courtesyTimeout))
		if err == nil && status != http.StatusServiceUnavailable {
			return
		}
	}
}

func (c *Client) authorize(h http.Header) {
	if c.key != "" {
		h.Set("Authorization", "Bearer "+c.key)
	}
}

// quoteName is a lock or resource name as a path: its own characters ([A-Za-z0-9._~:/-]) stay;
// anything else is percent-encoded, for the server to refuse by name.
func quoteName(name string) string {
	parts := strings.Split(name, "/")
	for i, p := range parts {
		parts[i] = strings.ReplaceAll(url.PathEscape(p), "%3A", ":")
	}
	return strings.Join(parts, "/")
}

// leaseKind is what a lease is a grant of: a lock, permits of a semaphore, or the leadership of
// an election. Each is its own namespace of names.
type leaseKind int

const (
	kindLock leaseKind = iota
	kindSemaphore
	kindElection
)

// lockPath is the path of an action (acquire, renew, release, value) on a name of kind, in that
// kind's words: an election's acquire is its campaign, its release the leader's resignation.
func lockPath(name, action string, kind leaseKind) string {
	collection := "locks"
	switch kind {
	case kindSemaphore:
		collection = "semaphores"
	case kindElection:
		collection = "elections"
		switch action {
		case "acquire":
			action = "campaign"
		case "release":
			action = "resign"
		}
	}
	return "/v1/" + collection + "/" + quoteName(name) + "/" + action
}

func isTLSFailure(err error) bool {
	var unknown x509.UnknownAuthorityError
	var host x509.HostnameError
	var invalid x509.CertificateInvalidError
	return errors.As(err, &unknown) || errors.As(err, &host) || errors.As(err, &invalid)
}

func describe(server string, err error) string {
	var uerr *url.Error
	if errors.As(err, &uerr) {
		err = uerr.Err
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return server + ": no answer in time"
	}
	return server + ": " + err.Error()
}

func withField(m map[string]interface{}, key string, value interface{}) map[string]interface{} {
	out := make(map[string]interface{}, len(m)+1)
	for k, v := range m {
		out[k] = v
	}
	out[key] = value
	return out
}

func values(m map[int]string) []string {
	out := make([]string, 0, len(m))
	for _, v := range m {
		out = append(out, v)
	}
	return out
}

func lastN(s []string, n int) []string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

func minDuration(a, b time.Duration) time.Duration {
	if a < b {
		return a
	}
	return b
}

// sleep waits d, or less when ctx ends (its error).
func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
