package onceq_test

// Produce keeps one dedup id across its retries: a produce retried after a
// dropped connection, a 503 or a 429 is stored once. A proxy in front of the
// real server breaks the connection or answers 503 on cue.

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"onceq"
)

// faultyProxy forwards to the server; plan says what to do with each
// produce: "pass", "drop" (forward, then close without answering),
// "503-after" (forward, then answer 503), "503" or "429" (answer that
// only).
type faultyProxy struct {
	*httptest.Server
	mu     sync.Mutex
	plan   []string
	bodies []map[string]any
}

func newFaultyProxy(t *testing.T, plan ...string) *faultyProxy {
	p := &faultyProxy{plan: plan}
	p.Server = httptest.NewServer(http.HandlerFunc(p.serve))
	t.Cleanup(p.Close)
	return p
}

func (p *faultyProxy) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	action := "pass"
	if r.URL.Path == "/v1/produce" {
		var doc map[string]any
		_ = json.Unmarshal(body, &doc)
		p.mu.Lock()
		p.bodies = append(p.bodies, doc)
		if len(p.plan) > 0 {
			action, p.plan = p.plan[0], p.plan[1:]
		}
		p.mu.Unlock()
	}
	switch action {
	case "503":
		answer(w, 503, `{"error":"UNAVAILABLE","message":"test","retry_after_ms":200}`)
		return
	case "429":
		answer(w, 429, `{"error":"RESOURCE_EXHAUSTED","message":"backlog full","retry_after_ms":100}`)
		return
	}
	req, _ := http.NewRequest(r.Method, shared.URL+r.URL.RequestURI(), bytes.NewReader(body))
	req.Header = r.Header.Clone()
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		answer(w, 502, err.Error())
		return
	}
	data, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	switch action {
	case "drop":
		conn, _, err := w.(http.Hijacker).Hijack()
		if err == nil {
			conn.Close()
		}
	case "503-after":
		answer(w, 503, `{"error":"UNAVAILABLE","message":"fsync failed","retry_after_ms":200}`)
	default:
		w.Header().Set("Content-Type", resp.Header.Get("Content-Type"))
		w.WriteHeader(resp.StatusCode)
		_, _ = w.Write(data)
	}
}

func answer(w http.ResponseWriter, status int, body string) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Retry-After", "1")
	w.WriteHeader(status)
	_, _ = io.WriteString(w, body)
}

func (p *faultyProxy) msgIDs() map[any]int {
	p.mu.Lock()
	defer p.mu.Unlock()
	ids := map[any]int{}
	for _, b := range p.bodies {
		env, _ := b["envelope"].(map[string]any)
		ids[env["msg_id"]]++
	}
	return ids
}

// sent is the produce bodies the proxy received.
func (p *faultyProxy) sent() []map[string]any {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]map[string]any(nil), p.bodies...)
}

// stored lists the values of e.topic, read by a fresh group.
func (e *env) stored() []string {
	var values []string
	for _, d := range e.consume(unique("check"), "c", 100, 300) {
		values = append(values, d.Value)
	}
	return values
}

func TestARetriedProduceIsStoredOnce(t *testing.T) {
	e := newEnv(t, "retry")
	e.createTopic(onceq.TopicConfig{})
	p := newFaultyProxy(t, "drop", "drop", "pass")
	c := newClient(t, p.URL, onceq.WithRetries(4))
	r, err := c.Produce(e.ctx, e.topic, "pay order 1", onceq.WithIdempotencyKey("charge:1"))
	if err != nil {
		t.Fatal(err)
	}
	if ids := p.msgIDs(); len(ids) != 1 || ids[r.MsgID] != 3 {
		t.Fatalf("msg_ids sent %v, the result's %q", ids, r.MsgID)
	}
	if !r.Duplicate { // the first copy was stored; its retry found it
		t.Fatalf("result %+v", r)
	}
	if got := e.stored(); len(got) != 1 || got[0] != "pay order 1" {
		t.Fatalf("stored %v", got)
	}
}

func TestA503AfterTheStoreIsRetriedAfterRetryAfterAndStoredOnce(t *testing.T) {
	e := newEnv(t, "retry")
	e.createTopic(onceq.TopicConfig{})
	p := newFaultyProxy(t, "503-after", "429", "pass")
	c := newClient(t, p.URL)
	t0 := time.Now()
	r, err := c.Produce(e.ctx, e.topic, "x")
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Since(t0); d < 280*time.Millisecond { // retry_after_ms 200, then 100
		t.Fatalf("retried after %v, before the server's retry_after_ms", d)
	}
	if ids := p.msgIDs(); len(ids) != 1 || !r.Duplicate {
		t.Fatalf("msg_ids %v, result %+v", ids, r)
	}
	if got := e.stored(); len(got) != 1 {
		t.Fatalf("stored %v", got)
	}
}

func TestUnavailablePastTheRetriesIsReturnedWithRetryAfter(t *testing.T) {
	e := newEnv(t, "retry")
	e.createTopic(onceq.TopicConfig{})
	p := newFaultyProxy(t, "503", "503", "503", "503")
	c := newClient(t, p.URL, onceq.WithRetries(2))
	_, err := c.Produce(e.ctx, e.topic, "x")
	var un *onceq.Unavailable
	if !errors.As(err, &un) || un.Status != 503 || un.RetryAfter != 200*time.Millisecond {
		t.Fatalf("%#v", err)
	}
	if n := len(p.msgIDs()); n != 1 || len(p.sent()) != 3 {
		t.Fatalf("%d requests with %d msg_ids", len(p.sent()), n)
	}
	p2 := newFaultyProxy(t, "429")
	_, err = newClient(t, p2.URL, onceq.WithRetries(0)).Produce(e.ctx, e.topic, "x")
	var re *onceq.ResourceExhausted
	if !errors.As(err, &re) || !errors.As(err, &un) || un.Status != 429 || un.RetryAfter != 100*time.Millisecond {
		t.Fatalf("a 429: %#v", err)
	}
	if got := e.stored(); len(got) != 0 {
		t.Fatalf("stored %v", got)
	}
}

func TestSkipIfCommittedSurvivesARetry(t *testing.T) {
	e := newEnv(t, "retry")
	e.createTopic(onceq.TopicConfig{})
	e.produce("p", "charge:2")
	d := e.consume("billing", "w", 1, 1000)[0]
	if err := e.c.Ack(e.ctx, e.topic, "billing", "w", d.AckItem(map[string]int{"ok": 1})); err != nil {
		t.Fatal(err)
	}
	p := newFaultyProxy(t, "drop", "pass")
	r, err := newClient(t, p.URL).Produce(e.ctx, e.topic, "p", onceq.WithIdempotencyKey("charge:2"),
		onceq.WithSkipIfCommitted("billing"))
	if err != nil || !r.AlreadyCommitted() || !jsonEq(r.Committed["billing"].Result, map[string]int{"ok": 1}) {
		t.Fatalf("%+v %v", r, err)
	}
}

func TestWithoutDedupAConnectionErrorIsNotRetried(t *testing.T) {
	e := newEnv(t, "retry")
	e.createTopic(onceq.TopicConfig{})
	p := newFaultyProxy(t, "drop")
	_, err := newClient(t, p.URL).Produce(e.ctx, e.topic, "x", onceq.WithoutDedup())
	var te *onceq.TransportError
	if !errors.As(err, &te) {
		t.Fatalf("%#v", err)
	}
	if sent := p.sent(); len(sent) != 1 || sent[0]["envelope"] != nil {
		t.Fatalf("sent %v", sent)
	}
}
