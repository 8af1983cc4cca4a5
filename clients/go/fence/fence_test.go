package fence_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"leasegate"
	"leasegate/fence"
	"leasegate/internal/testserver"
)

// backend is a store behind the middleware: it records the token of every write it applied.
type backend struct {
	mu      sync.Mutex
	applied []string
	hold    chan struct{} // when set, a write waits for it before it is applied
	entered chan string   // when set, gets the token of each write that reaches the backend
}

func (b *backend) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if b.entered != nil && r.Method != http.MethodGet {
		b.entered <- r.Header.Get("Fencing-Token")
	}
	if b.hold != nil && r.Method != http.MethodGet {
		<-b.hold
	}
	b.mu.Lock()
	if r.Method != http.MethodGet {
		b.applied = append(b.applied, r.Header.Get("Fencing-Token"))
	}
	b.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

func (b *backend) tokens() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.applied...)
}

func send(t *testing.T, url, method, token string) (int, map[string]interface{}) {
	t.Helper()
	status, _, body := sendFull(t, url, method, token)
	return status, body
}

func sendFull(t *testing.T, url, method, token string) (int, http.Header, map[string]interface{}) {
	t.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader("data"))
	if token != "" {
		req.Header.Set("Fencing-Token", token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	var body map[string]interface{}
	_ = json.Unmarshal(data, &body)
	return resp.StatusCode, resp.Header, body
}

func TestLocalRefusesStaleTokens(t *testing.T) {
	b := &backend{}
	srv := httptest.NewServer(fence.Middleware(fence.Options{Checker: fence.NewLocal()})(b))
	defer srv.Close()
	cases := []struct {
		method, path, token string
		status              int
		code                string
	}{
		{"PUT", "/orders/42", "5", 204, ""},
		{"PUT", "/orders/42", "5", 204, ""}, // the same holder again
		{"PUT", "/orders/42", "4", 409, "stale_token"},
		{"PUT", "/orders/7", "4", 204, ""}, // another resource has its own mark
		{"DELETE", "/orders/42", "6", 204, ""},
		{"POST", "/orders/42", "5", 409, "stale_token"},
		{"PUT", "/orders/42", "", 428, "token_required"},
		{"PUT", "/orders/42", "x", 400, "bad_request"},
		{"PUT", "/orders/42", "0", 400, "bad_request"},
		{"PUT", "/orders/42", "-7", 400, "bad_request"},
		{"PUT", "/orders/42", "18446744073709551616", 400, "bad_request"},
		{"GET", "/orders/42", "", 204, ""}, // reads pass unchecked
		{"PUT", "/orders/42", "18446744073709551615", 204, ""},
	}
	for _, c := range cases {
		status, body := send(t, srv.URL+c.path, c.method, c.token)
		if status != c.status || (c.code != "" && body["error"] != c.code) {
			t.Errorf("%s %s with token %q: %d %v; want %d %s", c.method, c.path, c.token, status, body, c.status, c.code)
		}
	}
	if _, body := send(t, srv.URL+"/orders/42", "PUT", "6"); body["max_token"] != float64(18446744073709551615) {
		t.Errorf("a stale answer's max_token: %v", body)
	}
	want := []string{"5", "5", "4", "6", "18446744073709551615"}
	if got := b.tokens(); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("the backend applied %v, want %v", got, want)
	}
}

// A write checked and running holds back a newer one for its resource until it is applied, so
// the backend never applies an older token after a newer one.
func TestWritesOfOneResourceAreAppliedInTokenOrder(t *testing.T) {
	b := &backend{hold: make(chan struct{}), entered: make(chan string, 2)}
	srv := httptest.NewServer(fence.Middleware(fence.Options{Checker: fence.NewLocal()})(b))
	defer srv.Close()
	var once sync.Once
	release := func() { once.Do(func() { close(b.hold) }) }
	defer release() // before srv.Close, which waits for the held writes
	results := make(chan int, 2)
	go func() { status, _ := send(t, srv.URL+"/r", "PUT", "5"); results <- status }()
	if got := <-b.entered; got != "5" {
		t.Fatalf("entered %s", got)
	}
	go func() { status, _ := send(t, srv.URL+"/r", "PUT", "6"); results <- status }()
	select { // a chance for the newer write to overtake, were it allowed to
	case got := <-b.entered:
		t.Fatalf("write %s reached the backend while the older one was being applied", got)
	case <-time.After(200 * time.Millisecond):
	}
	release()
	if s1, s2 := <-results, <-results; s1 != 204 || s2 != 204 {
		t.Fatalf("statuses %d %d", s1, s2)
	}
	if got := b.tokens(); strings.Join(got, ",") != "5,6" {
		t.Fatalf("applied in the order %v", got)
	}
}

func TestRemoteAsksLeasegate(t *testing.T) {
	lg := testserver.Start(t)
	client, err := leasegate.NewClient(leasegate.Config{Servers: []string{lg.URL}, RetryFor: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	old, err := client.Acquire(ctx, "reports/q3")
	if err != nil {
		t.Fatal(err)
	}
	_ = old.Release(ctx)
	current, err := client.Acquire(ctx, "reports/q3")
	if err != nil {
		t.Fatal(err)
	}
	defer current.Release(ctx)
	b := &backend{}
	srv := httptest.NewServer(fence.Middleware(fence.Options{Checker: fence.Remote{Client: client}})(b))
	defer srv.Close()
	token := func(l *leasegate.Lease) string { return strconv.FormatUint(l.Token(), 10) }
	if status, body := send(t, srv.URL+"/reports/q3", "PUT", token(current)); status != 204 {
		t.Fatalf("the current holder's write: %d %v", status, body)
	}
	status, body := send(t, srv.URL+"/reports/q3", "PUT", token(old))
	if status != 409 || body["error"] != "stale_token" || body["max_token"] != float64(current.Token()) {
		t.Fatalf("the old holder's write: %d %v", status, body)
	}
	if status, body := send(t, srv.URL+"/reports/q3", "PUT", "999999"); status != 400 || body["error"] != "bad_request" {
		t.Fatalf("a token never issued: %d %v", status, body)
	}
	lg.Stop()
	status, header, body := sendFull(t, srv.URL+"/reports/q3", "PUT", token(current))
	if status != 503 || body["error"] != "fence_unavailable" || header.Get("Retry-After") != "1" {
		t.Fatalf("with leasegate down: %d %v %v", status, header, body)
	}
	if got := b.tokens(); len(got) != 1 || got[0] != token(current) {
		t.Fatalf("the backend applied %v", got)
	}
}

// Prefix names the resources, the admitted token is in the handler's context, a path that
// names no resource is refused, and NoSerialize lets writes of one resource run at once.
func TestOptions(t *testing.T) {
	local := fence.NewLocal()
	var mu sync.Mutex
	var seen []string
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		token, ok := fence.Token(r.Context())
		mu.Lock()
		seen = append(seen, r.URL.Path+"="+strconv.FormatUint(token, 10)+"/"+strconv.FormatBool(ok))
		mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	})
	srv := httptest.NewServer(fence.Middleware(fence.Options{Checker: local, Prefix: "billing/"})(handler))
	defer srv.Close()
	if status, _ := send(t, srv.URL+"/orders/1", "PUT", "9"); status != 204 {
		t.Fatalf("a write: %d", status)
	}
	if max, ok, _ := local.Check(context.Background(), "billing/orders/1", 8); ok || max != 9 {
		t.Fatalf("the mark of billing/orders/1: %d %v", max, ok)
	}
	if status, body := send(t, srv.URL+"/", "PUT", "9"); status != 400 || body["error"] != "bad_request" {
		t.Fatalf("a path without a resource: %d %v", status, body)
	}
	if status, _ := send(t, srv.URL+"/orders/1", "GET", ""); status != 204 {
		t.Fatalf("a read: %d", status)
	}
	mu.Lock()
	if strings.Join(seen, ",") != "/orders/1=9/true,/orders/1=0/false" {
		t.Fatalf("the handler saw %v", seen)
	}
	mu.Unlock()

	b := &backend{hold: make(chan struct{}), entered: make(chan string, 2)}
	concurrent := httptest.NewServer(fence.Middleware(fence.Options{Checker: fence.NewLocal(), NoSerialize: true})(b))
	defer concurrent.Close()
	var once sync.Once
	release := func() { once.Do(func() { close(b.hold) }) }
	defer release()
	results := make(chan int, 2)
	for _, token := range []string{"5", "6"} {
		go func(token string) { status, _ := send(t, concurrent.URL+"/r", "PUT", token); results <- status }(token)
		select {
		case <-b.entered: // without serialization both reach the backend at once
		case <-time.After(20 * time.Second):
			t.Fatalf("write %s did not reach the backend while another was held", token)
		}
	}
	release()
	<-results
	<-results
}
