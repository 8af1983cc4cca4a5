// Command driver is the Go client's contract driver for the conformance runner
// (tests/conformance/PROTOCOL.md): JSON steps on stdin, answers and lost events on stdout.
// It maps each step onto the client's public API as an application would and reports what
// the client said; it has no retries, clocks or checks of its own.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"leasegate"
)

type step struct {
	ID         int64    `json:"id"`
	Op         string   `json:"op"`
	Servers    []string `json:"servers"`
	Owner      string   `json:"owner"`
	TimeoutMs  int64    `json:"timeout_ms"`
	RetryForMs int64    `json:"retry_for_ms"`
	Name       string   `json:"name"`
	TTLMs      *int64   `json:"ttl_ms"`
	WaitMs     int64    `json:"wait_ms"`
	Mode       string   `json:"mode"`
	Semaphore  *struct {
		Limit int `json:"limit"`
	} `json:"semaphore"`
	RequestID string `json:"request_id"`
	Reenter   string `json:"reenter"`
	LeaseRef  string `json:"lease_ref"`
	Method    string `json:"method"`
	Path      string `json:"path"`
	Body      string `json:"body"`
	Resource  string `json:"resource"`
	Token     string `json:"token"`
	Text      string `json:"text"`
}

type answer map[string]interface{}

type driver struct {
	out    sync.Mutex
	client *leasegate.Client
	leases map[string]*leasegate.Lease
}

func (d *driver) emit(v interface{}) {
	line, err := json.Marshal(v)
	if err != nil {
		line = []byte(fmt.Sprintf(`{"event":"driver_error","message":%q}`, err.Error()))
	}
	d.out.Lock()
	defer d.out.Unlock()
	os.Stdout.Write(append(line, '\n'))
}

func main() {
	d := &driver{leases: map[string]*leasegate.Lease{}}
	in := bufio.NewReader(os.Stdin)
	for {
		line, err := in.ReadBytes('\n')
		if len(strings.TrimSpace(string(line))) > 0 {
			var s step
			var a answer
			if jerr := json.Unmarshal(line, &s); jerr != nil {
				a = answer{"ok": false, "error": "driver_error", "message": "not a step: " + jerr.Error()}
			} else {
				a = d.step(&s)
			}
			a["id"] = s.ID
			d.emit(a)
		}
		if err != nil {
			if err != io.EOF {
				fmt.Fprintln(os.Stderr, "driver: reading stdin:", err)
			}
			return
		}
	}
}

func failure(err error) answer {
	a := answer{"ok": false, "message": err.Error()}
	var answered *leasegate.Error
	switch {
	case errors.Is(err, leasegate.ErrLeaseLost), errors.Is(err, leasegate.ErrReleased):
		a["error"] = "lost"
	case errors.As(err, &answered) && answered.Code != "":
		a["error"] = answered.Code
		var body struct {
			MaxToken *uint64 `json:"max_token"`
		}
		if json.Unmarshal(answered.Body, &body) == nil && body.MaxToken != nil {
			a["max_token"] = strconv.FormatUint(*body.MaxToken, 10)
		}
	case errors.Is(err, leasegate.ErrUnavailable):
		a["error"] = "unavailable"
	case errors.Is(err, leasegate.ErrBadDuration):
		a["error"] = "bad_duration"
	default:
		a["error"] = "driver_error"
	}
	return a
}

func ms(v int64) time.Duration { return time.Duration(v) * time.Millisecond }

func (d *driver) lease(ref string) (*leasegate.Lease, error) {
	l, ok := d.leases[ref]
	if !ok {
		return nil, fmt.Errorf("no lease ref %q", ref)
	}
	return l, nil
}

func (d *driver) step(s *step) answer {
	ctx := context.Background()
	switch s.Op {
	case "hello":
		c, err := leasegate.NewClient(leasegate.Config{Servers: s.Servers, Owner: s.Owner,
			Timeout: ms(s.TimeoutMs), RetryFor: ms(s.RetryForMs)})
		if err != nil {
			return failure(err)
		}
		d.client = c
		return answer{"ok": true, "client": "go", "capabilities": []string{"read", "semaphore", "reentry",
			"request_id", "write", "fence", "duration", "check_after_pause"}}
	case "acquire":
		return d.acquire(ctx, s)
	case "renew":
		l, err := d.lease(s.LeaseRef)
		if err != nil {
			return failure(err)
		}
		var ttl time.Duration
		if s.TTLMs != nil {
			ttl = ms(*s.TTLMs)
		}
		if err := l.Renew(ctx, ttl); err != nil {
			return failure(err)
		}
		return answer{"ok": true, "token": strconv.FormatUint(l.Token(), 10), "ttl_ms": l.TTL().Milliseconds()}
	case "release":
		l, err := d.lease(s.LeaseRef)
		if err == nil {
			err = l.Release(ctx)
		}
		if err != nil {
			return failure(err)
		}
		return answer{"ok": true}
	case "check":
		l, err := d.lease(s.LeaseRef)
		if err == nil {
			err = l.Err()
		}
		if err != nil {
			return failure(err)
		}
		return answer{"ok": true}
	case "write":
		return d.write(ctx, s)
	case "fence":
		token, err := strconv.ParseUint(s.Token, 10, 64)
		if err != nil {
			return failure(err)
		}
		f, err := d.client.Fence(ctx, s.Resource, token)
		if err != nil {
			return failure(err)
		}
		return answer{"ok": true, "accepted": f.Accepted, "max_token": strconv.FormatUint(f.MaxToken, 10)}
	case "duration":
		v, err := leasegate.ParseDuration(s.Text)
		if err != nil {
			return failure(err)
		}
		return answer{"ok": true, "ms": v.Milliseconds()}
	}
	return answer{"ok": false, "error": "unsupported", "message": "no op " + s.Op}
}

func (d *driver) acquire(ctx context.Context, s *step) answer {
	ref := fmt.Sprintf("L%d", len(d.leases)+1)
	if s.Reenter != "" {
		l, err := d.lease(s.Reenter)
		if err == nil {
			err = l.Reenter(ctx)
		}
		if err != nil {
			return failure(err)
		}
		d.leases[ref] = l
		return granted(ref, l)
	}
	var opts []leasegate.AcquireOption
	if s.TTLMs != nil {
		opts = append(opts, leasegate.TTL(ms(*s.TTLMs)))
	}
	opts = append(opts, leasegate.Wait(ms(s.WaitMs)))
	if s.RequestID != "" {
		opts = append(opts, leasegate.RequestID(s.RequestID))
	}
	var l *leasegate.Lease
	var err error
	if s.Semaphore != nil {
		l, err = d.client.AcquirePermit(ctx, s.Name, s.Semaphore.Limit, opts...)
	} else {
		if s.Mode == "read" {
			opts = append(opts, leasegate.Shared())
		}
		l, err = d.client.Acquire(ctx, s.Name, opts...)
	}
	if err != nil {
		return failure(err)
	}
	d.leases[ref] = l
	go func() {
		<-l.Lost()
		at := time.Now().UnixMilli()
		d.emit(map[string]interface{}{"event": "lost", "lease_ref": ref, "at_ms": at, "reason": l.Err().Error()})
	}()
	return granted(ref, l)
}

func granted(ref string, l *leasegate.Lease) answer {
	var mode interface{}
	if !l.Semaphore() {
		mode = string(l.Mode())
	}
	header := map[string]string{}
	for k := range l.Header() {
		header[k] = l.Header().Get(k)
	}
	return answer{"ok": true, "lease_ref": ref, "token": strconv.FormatUint(l.Token(), 10), "name": l.Name(),
		"mode": mode, "ttl_ms": l.TTL().Milliseconds(), "lease_header": header}
}

func (d *driver) write(ctx context.Context, s *step) answer {
	l, err := d.lease(s.LeaseRef)
	if err != nil {
		return failure(err)
	}
	// As an application writes through the guard: its own net/http request with l.Header().
	req, err := http.NewRequestWithContext(ctx, s.Method, l.Server()+s.Path, strings.NewReader(s.Body))
	if err != nil {
		return failure(err)
	}
	for k, v := range l.Header() {
		req.Header[k] = v
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return answer{"ok": false, "error": "unavailable", "message": err.Error()}
	}
	defer resp.Body.Close()
	var body struct {
		Error *string `json:"error"`
	}
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	_ = json.Unmarshal(data, &body)
	return answer{"ok": true, "status": resp.StatusCode, "code": body.Error}
}
