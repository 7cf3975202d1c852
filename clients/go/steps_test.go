package onceq_test

// Workflow steps: an ack that produces the next messages in the same atomic
// step (produce on POST /v1/ack), the worker's Complete and Job.Produce,
// and the topic setting ordering.
//
// TestStep*Encoding and TestStepWorker* run against fakeBroker (no onceqd
// needed); TestStepsAgainstOnceqd* skip, saying so, while the binary does
// not have the feature yet.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"reflect"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"onceq"
)

// fakeBroker is a tiny in-process fake of onceqd's HTTP API: it records
// every request and answers from a script. It knows nothing of leases or
// keys.
type fakeBroker struct {
	*httptest.Server
	mu         sync.Mutex
	requests   []fakeRequest
	deliveries []map[string]any
	offset     int
	onAck      func(body map[string]any) (int, any) // nil: defaultAck
}

type fakeRequest struct {
	method, path string
	body         map[string]any
}

func newFakeBroker(t *testing.T) *fakeBroker {
	f := &fakeBroker{offset: 100}
	f.Server = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.Close)
	return f
}

// delivery queues one delivery for the next consume and returns it.
func (f *fakeBroker) delivery(topic, value string) map[string]any {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.offset++
	d := map[string]any{"topic": topic, "partition": 0, "offset": f.offset, "attempts": 1, "key": "",
		"value": value, "last_error": "", "envelope": map[string]any{},
		"lease_expires_at_ms": time.Now().Add(30 * time.Second).UnixMilli(), "fencing_token": f.offset + 1000}
	f.deliveries = append(f.deliveries, d)
	return d
}

func (f *fakeBroker) bodies(path string) []map[string]any {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []map[string]any
	for _, r := range f.requests {
		if r.path == path {
			out = append(out, r.body)
		}
	}
	return out
}

func (f *fakeBroker) setOnAck(fn func(map[string]any) (int, any)) {
	f.mu.Lock()
	f.onAck = fn
	f.mu.Unlock()
}

func producedFor(msgs []any) []any {
	out := make([]any, len(msgs))
	for i, m := range msgs {
		out[i] = map[string]any{"topic": m.(map[string]any)["topic"], "partition": 0, "offset": i, "duplicate": false}
	}
	return out
}

func defaultAck(body map[string]any) (int, any) {
	if acks, ok := body["acks"].([]any); ok {
		results := make([]any, len(acks))
		for i, a := range acks {
			a := a.(map[string]any)
			r := map[string]any{"partition": a["partition"], "offset": a["offset"], "status": "acked"}
			if p, ok := a["produce"].([]any); ok {
				r["produced"] = producedFor(p)
			}
			results[i] = r
		}
		return 200, map[string]any{"results": results}
	}
	if p, ok := body["produce"].([]any); ok {
		return 200, map[string]any{"status": "acked", "produced": producedFor(p)}
	}
	return 204, nil
}

func (f *fakeBroker) serve(w http.ResponseWriter, r *http.Request) {
	var body map[string]any
	_ = json.NewDecoder(r.Body).Decode(&body)
	f.mu.Lock()
	f.requests = append(f.requests, fakeRequest{r.Method, r.URL.Path, body})
	onAck := f.onAck
	f.mu.Unlock()
	answer := func(status int, doc any) {
		if status == 204 {
			w.WriteHeader(204)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(doc)
	}
	switch {
	case r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, "/v1/topics/"):
		answer(200, map[string]any{"name": strings.TrimPrefix(r.URL.Path, "/v1/topics/"), "partitions": 1,
			"settings": map[string]any{"lease_ms": 30000}, "groups": map[string]any{}})
	case r.URL.Path == "/v1/consume":
		f.consume(w, body)
	case r.URL.Path == "/v1/ack":
		if onAck == nil {
			onAck = defaultAck
		}
		answer(onAck(body))
	case r.URL.Path == "/v1/nack":
		answer(204, nil)
	case r.URL.Path == "/v1/extend":
		answer(200, map[string]any{"lease_expires_at_ms": time.Now().Add(30 * time.Second).UnixMilli()})
	default:
		answer(404, map[string]any{"error": "NOT_FOUND", "message": "fake: no such path"})
	}
}

func (f *fakeBroker) consume(w http.ResponseWriter, body map[string]any) {
	var lines []any
	if acks, ok := body["acks"].([]any); ok && len(acks) > 0 {
		results := make([]any, len(acks))
		for i, a := range acks {
			a := a.(map[string]any)
			results[i] = map[string]any{"partition": a["partition"], "offset": a["offset"], "status": "acked"}
		}
		lines = append(lines, map[string]any{"acks": results})
	}
	n := 1
	if m, ok := body["max_messages"].(float64); ok {
		n = int(m)
	}
	f.mu.Lock()
	if n > len(f.deliveries) {
		n = len(f.deliveries)
	}
	got := f.deliveries[:n]
	f.deliveries = f.deliveries[n:]
	f.mu.Unlock()
	if len(got) == 0 && len(lines) == 0 {
		time.Sleep(50 * time.Millisecond) // a short long poll
	}
	for _, d := range got {
		lines = append(lines, d)
	}
	w.Header().Set("Content-Type", "application/x-ndjson")
	enc := json.NewEncoder(w)
	for _, l := range lines {
		_ = enc.Encode(l)
	}
}

// asJSON is v through JSON, for comparing with decoded request bodies.
func asJSON(t *testing.T, v any) any {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var out any
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

func sameJSON(t *testing.T, got, want any) {
	t.Helper()
	if g, w := asJSON(t, got), asJSON(t, want); !reflect.DeepEqual(g, w) {
		gb, _ := json.Marshal(g)
		wb, _ := json.Marshal(w)
		t.Fatalf("got  %s\nwant %s", gb, wb)
	}
}

func TestStepAckEncodingAndProducedDecoding(t *testing.T) {
	f := newFakeBroker(t)
	c := newClient(t, f.URL, onceq.WithRetries(0))
	ctx := context.Background()
	f.setOnAck(func(map[string]any) (int, any) {
		return 200, map[string]any{"status": "acked", "produced": []any{
			map[string]any{"topic": "charges", "partition": 1, "offset": 12, "duplicate": false},
			map[string]any{"topic": "emails", "status": "pending"},
		}}
	})
	item := onceq.AckItem{Ref: onceq.Ref{Partition: 0, Offset: 4, Attempts: 1, FencingToken: 9}, Result: map[string]bool{"ok": true},
		Produce: []onceq.Message{
			{Topic: "charges", Key: "customer-1", Value: map[string]int{"order": 7}, IdempotencyKey: "charge:7", MsgID: "m-1",
				Envelope: map[string]any{"delay_ms": 500}},
			{Topic: "emails", Value: "hi"},
		}}
	res, err := c.AckStep(ctx, "orders", "billing", "w1", item)
	if err != nil {
		t.Fatal(err)
	}
	sameJSON(t, f.bodies("/v1/ack"), []any{map[string]any{
		"topic": "orders", "group": "billing", "owner": "w1", "partition": 0, "offset": 4, "attempts": 1,
		"fencing_token": 9, "result": map[string]any{"ok": true},
		"produce": []any{
			map[string]any{"topic": "charges", "key": "customer-1", "value": `{"order":7}`,
				"envelope": map[string]any{"delay_ms": 500, "idempotency_key": "charge:7", "msg_id": "m-1"}},
			map[string]any{"topic": "emails", "value": "hi"},
		},
	}})
	want := onceq.AckResult{Partition: 0, Offset: 4, Status: "acked", Produced: []onceq.Produced{
		{Topic: "charges", Status: "produced", Partition: 1, Offset: 12},
		{Topic: "emails", Status: "pending"},
	}}
	if !reflect.DeepEqual(res, want) || res.Produced[0].Pending() || !res.Produced[1].Pending() {
		t.Fatalf("got %+v\nwant %+v", res, want)
	}

	// Without produce: 204, nothing produced; Ack is AckStep without the answer.
	f.setOnAck(nil)
	if res, err := c.AckStep(ctx, "t", "g", "w", onceq.AckItem{Ref: onceq.Ref{Offset: 1}}); err != nil || res.Status != "acked" || res.Produced != nil {
		t.Fatalf("%+v %v", res, err)
	}
	if err := c.Ack(ctx, "t", "g", "w", onceq.AckItem{Ref: onceq.Ref{Offset: 2}, Produce: []onceq.Message{{Topic: "x", Value: "v"}}}); err != nil {
		t.Fatal(err)
	}
	bodies := f.bodies("/v1/ack")
	if _, ok := bodies[1]["produce"]; ok {
		t.Fatalf("an ack without messages sent produce: %v", bodies[1])
	}
	sameJSON(t, bodies[2]["produce"], []any{map[string]any{"topic": "x", "value": "v"}})

	// Batch: produce per entry, produced per result.
	results, err := c.AckBatch(ctx, "t", "g", "w", []onceq.AckItem{
		{Ref: onceq.Ref{Offset: 1}, Result: "r", Produce: []onceq.Message{{Topic: "next", Value: "x"}}},
		{Ref: onceq.Ref{Offset: 2}},
	})
	if err != nil {
		t.Fatal(err)
	}
	sameJSON(t, f.bodies("/v1/ack")[3]["acks"], []any{
		map[string]any{"partition": 0, "offset": 1, "result": "r", "produce": []any{map[string]any{"topic": "next", "value": "x"}}},
		map[string]any{"partition": 0, "offset": 2},
	})
	if len(results) != 2 || !reflect.DeepEqual(results[0].Produced, []onceq.Produced{{Topic: "next", Status: "produced"}}) || results[1].Produced != nil {
		t.Fatalf("results %+v", results)
	}
}

func TestStepRefusalsAndBadMessagesEncoding(t *testing.T) {
	f := newFakeBroker(t)
	c := newClient(t, f.URL, onceq.WithRetries(0))
	ctx := context.Background()
	msg := []onceq.Message{{Topic: "t2", Value: "x"}}
	for _, tc := range []struct {
		status int
		code   string
		check  func(error) bool
	}{
		{409, "FAILED_PRECONDITION", is[*onceq.Fenced]},
		{404, "NOT_FOUND", is[*onceq.NotFound]},
		{400, "INVALID_ARGUMENT", is[*onceq.InvalidArgument]},
		{403, "PERMISSION_DENIED", is[*onceq.Forbidden]},
	} {
		tc := tc
		f.setOnAck(func(map[string]any) (int, any) {
			return tc.status, map[string]any{"error": tc.code, "message": "refused"}
		})
		if _, err := c.AckStep(ctx, "t", "g", "w", onceq.AckItem{Produce: msg}); !tc.check(err) {
			t.Fatalf("%d: %v", tc.status, err)
		}
	}
	n := len(f.bodies("/v1/ack"))
	if _, err := c.AckStep(ctx, "t", "g", "w", onceq.AckItem{Produce: []onceq.Message{{Value: "no topic"}}}); err == nil || !strings.Contains(err.Error(), "Topic") {
		t.Fatalf("no topic: %v", err)
	}
	if _, err := c.Consume(ctx, "t", "g", "w", onceq.ConsumeOptions{Acks: []onceq.AckItem{{Produce: msg}}}); err == nil || !strings.Contains(err.Error(), "AckStep") {
		t.Fatalf("carried produce: %v", err)
	}
	if _, err := c.ProduceBatch(ctx, "t", []onceq.Message{{Topic: "other", Value: "x"}}); err == nil {
		t.Fatal("ProduceBatch took a message for another topic")
	}
	if got := len(f.bodies("/v1/ack")) + len(f.bodies("/v1/consume")) + len(f.bodies("/v1/produce")); got != n {
		t.Fatalf("%d requests sent for refused calls", got-n)
	}
	_, _ = c.CreateTopic(ctx, "t", onceq.TopicConfig{Ordering: "key"}) // the fake has no POST /v1/topics
	sameJSON(t, f.bodies("/v1/topics"), []any{map[string]any{"name": "t", "ordering": "key"}})
}

// fakeWorker runs a worker of "orders" against f until until(stats) holds.
func fakeWorker(t *testing.T, f *fakeBroker, h onceq.Handler, until func(onceq.WorkerStats) bool, opts ...onceq.WorkerOption) (*onceq.Worker, *quiet) {
	t.Helper()
	logs := &quiet{}
	c := newClient(t, f.URL, onceq.WithRetries(0))
	opts = append([]onceq.WorkerOption{onceq.WithOwner("w1"), onceq.WithWait(50 * time.Millisecond), onceq.WithLogger(logs)}, opts...)
	w := onceq.NewWorker(c, "orders", "billing", opts...)
	w.Handle(h)
	stop := startWorker(t, w)
	ok := waitUntil(5*time.Second, func() bool { return until(w.Stats()) })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if !ok {
		t.Fatalf("stats %+v; logs %v", w.Stats(), logs.lines)
	}
	return w, logs
}

func (f *fakeBroker) paths() map[string]int {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[string]int{}
	for _, r := range f.requests {
		out[r.path]++
	}
	return out
}

// allAcks is every ack item sent: alone, in a batch, or carried on a consume.
func (f *fakeBroker) allAcks() []map[string]any {
	var out []map[string]any
	for _, path := range []string{"/v1/ack", "/v1/consume"} {
		for _, b := range f.bodies(path) {
			if acks, ok := b["acks"].([]any); ok {
				for _, a := range acks {
					out = append(out, a.(map[string]any))
				}
			} else if path == "/v1/ack" {
				out = append(out, b)
			}
		}
	}
	return out
}

func TestStepWorkerSendsCompleteAndStagedMessagesOnTheJobsOwnAck(t *testing.T) {
	f := newFakeBroker(t)
	d := f.delivery("orders", `{"order_id": 7}`)
	w, _ := fakeWorker(t, f, func(ctx context.Context, job *onceq.Job) (any, error) {
		job.Produce(onceq.Message{Topic: "audit", Value: map[string]int{"seen": 7}})
		job.Produce(onceq.Message{Topic: "emails", Key: "k", Value: map[string]int{"n": 1}, IdempotencyKey: "mail:7"})
		return onceq.Complete{Result: map[string]string{"charge_id": "ch_7"},
			Produce: []onceq.Message{{Topic: "charges", Value: map[string]int{"order_id": 7}, IdempotencyKey: "charge:7"}}}, nil
	}, func(s onceq.WorkerStats) bool { return s.Acked == 1 })
	sameJSON(t, f.bodies("/v1/ack"), []any{map[string]any{
		"topic": "orders", "group": "billing", "owner": "w1", "partition": 0, "offset": d["offset"], "attempts": 1,
		"fencing_token": d["fencing_token"], "result": map[string]any{"charge_id": "ch_7"},
		"produce": []any{
			map[string]any{"topic": "audit", "value": `{"seen":7}`},
			map[string]any{"topic": "emails", "key": "k", "value": `{"n":1}`, "envelope": map[string]any{"idempotency_key": "mail:7"}},
			map[string]any{"topic": "charges", "value": `{"order_id":7}`, "envelope": map[string]any{"idempotency_key": "charge:7"}},
		},
	}})
	for _, b := range f.bodies("/v1/consume") {
		if _, ok := b["acks"]; ok {
			t.Fatalf("an ack rode on a consume: %v", b)
		}
	}
	if p := f.paths(); p["/v1/produce"] != 0 {
		t.Fatalf("paths %v", p)
	}
	if s := w.Stats(); s.Acked != 1 || s.Produced != 3 {
		t.Fatalf("stats %+v", s)
	}
}

func TestStepWorkerJobsWithoutMessagesKeepRidingOnTheNextConsume(t *testing.T) {
	f := newFakeBroker(t)
	f.delivery("orders", "a")
	f.delivery("orders", "b")
	w, _ := fakeWorker(t, f, func(ctx context.Context, job *onceq.Job) (any, error) {
		if job.Value == "a" {
			return &onceq.Complete{Result: "ra", Produce: []onceq.Message{{Topic: "charges", Value: "next-a"}}}, nil
		}
		return onceq.Complete{Result: "rb"}, nil // no messages: the ordinary path
	}, func(s onceq.WorkerStats) bool { return s.Acked == 2 })
	var withProduce, without []any
	for _, a := range f.allAcks() {
		if _, ok := a["produce"]; ok {
			withProduce = append(withProduce, a["result"])
		} else {
			without = append(without, a["result"])
		}
	}
	sameJSON(t, withProduce, []any{"ra"})
	sameJSON(t, without, []any{"rb"})
	carried := 0
	for _, b := range f.bodies("/v1/consume") {
		if acks, ok := b["acks"].([]any); ok {
			carried += len(acks)
		}
	}
	single := 0
	for _, b := range f.bodies("/v1/ack") {
		if _, ok := b["produce"]; ok {
			single++
		}
	}
	if single != 1 || w.Stats().Produced != 1 {
		t.Fatalf("%d acks with produce sent alone, %d carried; stats %+v", single, carried, w.Stats())
	}
}

func TestStepWorkerARefusedAckStoresNothingAndIsNeverRetriedAsAProduce(t *testing.T) {
	f := newFakeBroker(t)
	f.delivery("orders", "x")
	f.setOnAck(func(map[string]any) (int, any) {
		return 409, map[string]any{"error": "FAILED_PRECONDITION", "message": "lease lost"}
	})
	var mu sync.Mutex
	var stale []error
	w, _ := fakeWorker(t, f, func(ctx context.Context, job *onceq.Job) (any, error) {
		job.Produce(onceq.Message{Topic: "charges", Value: "x"})
		return onceq.Complete{Result: "r", Produce: []onceq.Message{{Topic: "charges", Value: "y"}}}, nil
	}, func(s onceq.WorkerStats) bool { return s.Stale == 1 },
		onceq.WithOnStale(func(_ *onceq.Job, err error) { mu.Lock(); stale = append(stale, err); mu.Unlock() }))
	time.Sleep(200 * time.Millisecond) // nothing more comes
	if p := f.paths(); p["/v1/ack"] != 1 || p["/v1/produce"] != 0 || p["/v1/nack"] != 0 {
		t.Fatalf("paths %v", p)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(stale) != 1 || !is[*onceq.Fenced](stale[0]) {
		t.Fatalf("stale %v", stale)
	}
	if s := w.Stats(); s.Acked != 0 || s.Produced != 0 {
		t.Fatalf("stats %+v", s)
	}
}

func TestStepWorkerARefusalOfTheMessagesNacksTheJobWithTheReason(t *testing.T) {
	f := newFakeBroker(t)
	f.delivery("orders", "x")
	f.setOnAck(func(map[string]any) (int, any) {
		return 404, map[string]any{"error": "NOT_FOUND", "message": "unknown topic 'chargez'"}
	})
	w, _ := fakeWorker(t, f, func(ctx context.Context, job *onceq.Job) (any, error) {
		return onceq.Complete{Result: "r", Produce: []onceq.Message{{Topic: "chargez", Value: "y"}}}, nil
	}, func(s onceq.WorkerStats) bool { return s.Nacked == 1 })
	nacks := f.bodies("/v1/nack")
	if len(nacks) != 1 || !strings.Contains(fmt.Sprint(nacks[0]["reason"]), "unknown topic 'chargez'") {
		t.Fatalf("nacks %v", nacks)
	}
	if _, ok := nacks[0]["delay_ms"]; ok {
		t.Fatalf("the nack set a delay: %v", nacks[0])
	}
	if p := f.paths(); p["/v1/ack"] != 1 || p["/v1/produce"] != 0 {
		t.Fatalf("paths %v", p)
	}
	if s := w.Stats(); s.Acked != 0 || s.Produced != 0 {
		t.Fatalf("stats %+v", s)
	}
}

func TestStepWorkerAFailedHandlerSendsNoneOfItsMessages(t *testing.T) {
	f := newFakeBroker(t)
	for _, v := range []string{"error", "fail", "retry", "panic", "no-topic"} {
		f.delivery("orders", v)
	}
	w, _ := fakeWorker(t, f, func(ctx context.Context, job *onceq.Job) (any, error) {
		job.Produce(onceq.Message{Topic: "charges", Value: "staged"})
		switch job.Value {
		case "error":
			return nil, errors.New("boom")
		case "fail":
			return nil, onceq.Fail("declined")
		case "retry":
			return nil, onceq.Retry(100 * time.Millisecond)
		case "panic":
			panic("oops")
		}
		return onceq.Complete{Result: "r", Produce: []onceq.Message{{Value: "m"}}}, nil // no topic: nacked
	}, func(s onceq.WorkerStats) bool { return s.Nacked == 4 && s.Acked == 1 }, onceq.WithConcurrency(5))
	acks := f.allAcks()
	if len(acks) != 1 {
		t.Fatalf("acks %v", acks)
	}
	sameJSON(t, acks[0]["result"], map[string]any{"failed": "declined"})
	if _, ok := acks[0]["produce"]; ok {
		t.Fatalf("a Fail sent its messages: %v", acks[0])
	}
	var reasons []string
	for _, n := range f.bodies("/v1/nack") {
		reasons = append(reasons, fmt.Sprint(n["reason"]))
	}
	sort.Strings(reasons)
	if len(reasons) != 4 || reasons[0] != "boom" || !strings.Contains(strings.Join(reasons, "|"), "Topic") {
		t.Fatalf("reasons %q", reasons)
	}
	if p := f.paths(); p["/v1/produce"] != 0 || w.Stats().Produced != 0 {
		t.Fatalf("paths %v stats %+v", p, w.Stats())
	}
}

// Against onceqd.

var (
	probeOnce                sync.Once
	serverSteps, serverOrder bool
)

// needSteps skips t while the shared onceqd has no workflow steps (POST
// /v1/ack: unknown field 'produce'); needOrdering likewise for ordering.
func needSteps(t *testing.T, e *env) {
	t.Helper()
	probe(e)
	if !serverSteps {
		t.Skip("this onceqd has no workflow steps yet (POST /v1/ack: unknown field 'produce')")
	}
}

func needOrdering(t *testing.T, e *env) {
	t.Helper()
	probe(e)
	if !serverOrder {
		t.Skip("this onceqd has no topic setting 'ordering' yet")
	}
}

func probe(e *env) {
	probeOnce.Do(func() {
		unknown := func(err error, field string) bool {
			var inv *onceq.InvalidArgument
			return errors.As(err, &inv) && strings.Contains(inv.Message, "unknown field '"+field+"'")
		}
		_, err := e.c.AckStep(e.ctx, unique("probe"), "g", "w", onceq.AckItem{Produce: []onceq.Message{{Topic: "probe", Value: "x"}}})
		serverSteps = !unknown(err, "produce")
		_, err = e.c.CreateTopic(e.ctx, unique("probe"), onceq.TopicConfig{Ordering: "none"})
		serverOrder = !unknown(err, "ordering")
	})
}

// drain consumes and acks what is new in topic for the group "check": it
// waits up to waitMS for the first (a pending message comes through the
// broker's outbox), then takes what follows at once.
func (e *env) drain(topic string, waitMS int) []onceq.Delivery {
	e.t.Helper()
	const group = "check"
	var out []onceq.Delivery
	for {
		if len(out) > 0 {
			waitMS = 300
		}
		r, err := e.c.Consume(e.ctx, topic, group, "checker", onceq.ConsumeOptions{MaxMessages: 100, WaitMS: waitMS})
		if err != nil {
			e.t.Fatal(err)
		}
		if len(r.Messages) == 0 {
			return out
		}
		out = append(out, r.Messages...)
		items := make([]onceq.AckItem, len(r.Messages))
		for i, m := range r.Messages {
			items[i] = m.AckItem(nil)
		}
		if _, err := e.c.AckBatch(e.ctx, topic, group, "checker", items); err != nil {
			e.t.Fatal(err)
		}
	}
}

// checkProduced: produced names topics in order; those stored (not pending:
// a target on another shard may be) are at offsets 0, 1, ... of a fresh
// one-partition topic.
func checkProduced(t *testing.T, produced []onceq.Produced, topics ...string) {
	t.Helper()
	if len(produced) != len(topics) {
		t.Fatalf("produced %+v, want %v", produced, topics)
	}
	for i, p := range produced {
		if p.Topic != topics[i] || (p.Status != "produced" && p.Status != "pending") || p.Duplicate ||
			(!p.Pending() && (p.Partition != 0 || p.Offset != int64(i))) {
			t.Fatalf("produced %+v, want %v", produced, topics)
		}
	}
}

func (e *env) create(names ...string) {
	e.t.Helper()
	for _, n := range names {
		if _, err := e.c.CreateTopic(e.ctx, n, onceq.TopicConfig{Partitions: 1}); err != nil {
			e.t.Fatal(err)
		}
	}
}

func TestStepsAgainstOnceqdAnAckStoresItsMessagesInTheSameStep(t *testing.T) {
	e := newEnv(t, "orders")
	needSteps(t, e)
	dst := unique("charges")
	e.create(e.topic, dst)
	e.produce(`{"order_id":7}`, "order:7")
	d := e.consume("billing", "w1", 1, 2000)[0]
	item := d.AckItem(map[string]string{"charge": "ch_7"})
	item.Produce = []onceq.Message{
		{Topic: dst, Key: "customer-1", Value: map[string]int{"order_id": 7}, IdempotencyKey: "charge:7"},
		{Topic: dst, Value: "second", Envelope: map[string]any{"tenant_id": "acme"}},
	}
	res, err := e.c.AckStep(e.ctx, e.topic, "billing", "w1", item)
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != "acked" {
		t.Fatalf("got %+v", res)
	}
	checkProduced(t, res.Produced, dst, dst)
	// Retried at once by its owner (its answer was lost): the same list (a
	// pending message may have its position by now), stored once.
	again, err := e.c.AckStep(e.ctx, e.topic, "billing", "w1", item)
	if err != nil || len(again.Produced) != 2 {
		t.Fatalf("again %+v %v", again, err)
	}
	for i, p := range again.Produced {
		if q := res.Produced[i]; p.Topic != q.Topic || (!p.Pending() && !q.Pending() && p != q) {
			t.Fatalf("again %+v, first %+v", again.Produced, res.Produced)
		}
	}
	if k := e.key("billing", "order:7"); !jsonEq(k.Result, map[string]string{"charge": "ch_7"}) {
		t.Fatalf("key %+v", k)
	}
	got := e.drain(dst, 2000)
	if len(got) != 2 || got[0].Value != `{"order_id":7}` || got[0].Key != "customer-1" || got[0].IdempotencyKey != "charge:7" ||
		got[1].Value != "second" || got[1].Envelope["tenant_id"] != "acme" {
		t.Fatalf("got %+v", got)
	}
}

func TestStepsAgainstOnceqdABatchAckProducesPerEntry(t *testing.T) {
	e := newEnv(t, "orders")
	needSteps(t, e)
	dst := unique("charges")
	e.create(e.topic, dst)
	e.produce("a", "")
	e.produce("b", "")
	ds := e.consume("g", "w1", 2, 2000)
	first := ds[0].AckItem("ra")
	first.Produce = []onceq.Message{{Topic: dst, Value: "from-a"}}
	results, err := e.c.AckBatch(e.ctx, e.topic, "g", "w1", []onceq.AckItem{first, ds[1].AckItem("rb")})
	if err != nil {
		t.Fatal(err)
	}
	if len(results) != 2 || !results[0].OK() || !results[1].OK() || results[1].Produced != nil {
		t.Fatalf("results %+v", results)
	}
	checkProduced(t, results[0].Produced, dst)
	if got := e.drain(dst, 2000); len(got) != 1 || got[0].Value != "from-a" {
		t.Fatalf("got %+v", got)
	}
}

func TestStepsAgainstOnceqdAFencedAckStoresNoneOfItsMessages(t *testing.T) {
	e := newEnv(t, "orders")
	needSteps(t, e)
	dst := unique("charges")
	e.create(e.topic, dst)
	e.produce("x", "x")
	r, err := e.c.Consume(e.ctx, e.topic, "g", "slow", onceq.ConsumeOptions{MaxMessages: 1, WaitMS: 2000, LeaseMS: 300})
	if err != nil || len(r.Messages) != 1 {
		t.Fatalf("%+v %v", r, err)
	}
	if d2 := e.consume("g", "fast", 1, 3000); len(d2) != 1 || d2[0].Attempts != 2 {
		t.Fatalf("takeover %+v", d2)
	}
	item := r.Messages[0].AckItem(nil)
	item.Produce = []onceq.Message{{Topic: dst, Value: "stale"}}
	if _, err := e.c.AckStep(e.ctx, e.topic, "g", "slow", item); !is[*onceq.Fenced](err) {
		t.Fatalf("stale ack: %v", err)
	}
	if got := e.drain(dst, 1000); len(got) != 0 {
		t.Fatalf("a refused ack stored %+v", got)
	}
}

func TestStepsAgainstOnceqdAnUnknownTargetOrOver1000MessagesRefusesTheAck(t *testing.T) {
	e := newEnv(t, "orders")
	needSteps(t, e)
	e.create(e.topic)
	e.produce("x", "x")
	d := e.consume("g", "w1", 1, 2000)[0]
	item := d.AckItem(nil)
	item.Produce = []onceq.Message{{Topic: unique("missing"), Value: "y"}}
	if _, err := e.c.AckStep(e.ctx, e.topic, "g", "w1", item); !is[*onceq.NotFound](err) {
		t.Fatalf("unknown topic: %v", err)
	}
	if k := e.key("g", "x"); k.State != "leased" {
		t.Fatalf("acked anyway: %+v", k)
	}
	item.Produce = make([]onceq.Message, 1001)
	for i := range item.Produce {
		item.Produce[i] = onceq.Message{Topic: e.topic, Value: "y"}
	}
	if _, err := e.c.AckStep(e.ctx, e.topic, "g", "w1", item); !is[*onceq.InvalidArgument](err) {
		t.Fatalf("1001 messages: %v", err)
	}
	if k := e.key("g", "x"); k.State != "leased" {
		t.Fatalf("acked anyway: %+v", k)
	}
}

func TestStepsAgainstOnceqdAThreeStepPipelineWithWorkers(t *testing.T) {
	// order -> charge -> receipt, the docs/CLIENTS.md example.
	e := newEnv(t, "orders")
	needSteps(t, e)
	charges, receipts := unique("charges"), unique("receipts")
	e.create(e.topic, charges, receipts)
	type order struct {
		OrderID  int    `json:"order_id"`
		ChargeID string `json:"charge_id"`
	}
	var spies []*spy
	worker := func(topic, group string, h onceq.Handler) *onceq.Worker {
		c, s := e.spyClient()
		spies = append(spies, s)
		w := onceq.NewWorker(c, topic, group, onceq.WithOwner(group), onceq.WithWait(200*time.Millisecond), onceq.WithLogger(&quiet{}))
		w.Handle(h)
		startWorker(t, w)
		return w
	}
	w1 := worker(e.topic, "billing", func(ctx context.Context, job *onceq.Job) (any, error) {
		var o order
		if err := job.JSON(&o); err != nil {
			return nil, err
		}
		o.ChargeID = fmt.Sprintf("ch_%d", o.OrderID)
		return onceq.Complete{Result: map[string]string{"charge_id": o.ChargeID},
			Produce: []onceq.Message{{Topic: charges, Value: o, IdempotencyKey: fmt.Sprintf("receipt:%d", o.OrderID)}}}, nil
	})
	w2 := worker(charges, "receipts", func(ctx context.Context, job *onceq.Job) (any, error) {
		var o order
		if err := job.JSON(&o); err != nil {
			return nil, err
		}
		job.Produce(onceq.Message{Topic: receipts, Value: o, IdempotencyKey: fmt.Sprintf("mail:%d", o.OrderID)})
		return map[string]string{"receipt": fmt.Sprintf("r_%d", o.OrderID)}, nil
	})
	for n := 1; n <= 3; n++ {
		e.produce(fmt.Sprintf(`{"order_id":%d}`, n), fmt.Sprintf("order:%d", n))
	}
	if !waitUntil(15*time.Second, func() bool { return w2.Stats().Acked == 3 }) {
		t.Fatalf("stats %+v %+v", w1.Stats(), w2.Stats())
	}
	var charged, keys []string
	for _, m := range e.drain(receipts, 2000) {
		var o order
		_ = json.Unmarshal([]byte(m.Value), &o)
		charged = append(charged, o.ChargeID)
		keys = append(keys, m.IdempotencyKey)
	}
	sort.Strings(charged)
	sort.Strings(keys)
	if !reflect.DeepEqual(charged, []string{"ch_1", "ch_2", "ch_3"}) || !reflect.DeepEqual(keys, []string{"mail:1", "mail:2", "mail:3"}) {
		t.Fatalf("receipts %v %v", charged, keys)
	}
	if k := e.key("billing", "order:2"); !jsonEq(k.Result, map[string]string{"charge_id": "ch_2"}) {
		t.Fatalf("key %+v", k)
	}
	if k, err := e.c.GetKey(e.ctx, charges, "receipts", "receipt:2", onceq.KeyOptions{}); err != nil || !jsonEq(k.Result, map[string]string{"receipt": "r_2"}) {
		t.Fatalf("key %+v %v", k, err)
	}
	if w1.Stats().Produced != 3 || w2.Stats().Produced != 3 {
		t.Fatalf("stats %+v %+v", w1.Stats(), w2.Stats())
	}
	for _, s := range spies {
		if len(s.paths("/v1/produce")) != 0 {
			t.Fatal("a worker sent a separate produce")
		}
	}
}

func TestStepsAgainstOnceqdAStaleWorkersMessagesAreNeverStored(t *testing.T) {
	e := newEnv(t, "orders")
	needSteps(t, e)
	dst := unique("charges")
	if _, err := e.c.CreateTopic(e.ctx, e.topic, onceq.TopicConfig{Partitions: 1, LeaseMS: 500}); err != nil {
		t.Fatal(err)
	}
	e.create(dst)
	e.produce("charge", "charge:1")
	started, resume := make(chan struct{}), make(chan struct{})
	c, calls := e.spyClient()
	w, _ := e.worker(c, func(ctx context.Context, job *onceq.Job) (any, error) {
		job.Produce(onceq.Message{Topic: dst, Value: "staged by the slow one"})
		close(started)
		<-resume // paused past its lease
		return onceq.Complete{Result: map[string]string{"by": "slow"},
			Produce: []onceq.Message{{Topic: dst, Value: "returned by the slow one"}}}, nil
	}, onceq.WithOwner("slow"), onceq.WithoutAutoExtend())
	stop := startWorker(t, w)
	<-started
	d := e.consume("g", "fast", 1, 5000)
	if len(d) != 1 || d[0].Attempts != 2 {
		t.Fatalf("takeover %+v", d)
	}
	item := d[0].AckItem(map[string]string{"by": "fast"})
	item.Produce = []onceq.Message{{Topic: dst, Value: "by the fast one"}}
	if _, err := e.c.AckStep(e.ctx, e.topic, "g", "fast", item); err != nil {
		t.Fatal(err)
	}
	close(resume)
	if !waitUntil(10*time.Second, func() bool { return w.Stats().Stale == 1 }) {
		t.Fatalf("stats %+v", w.Stats())
	}
	_ = stop()
	if got := e.drain(dst, 2000); len(got) != 1 || got[0].Value != "by the fast one" {
		t.Fatalf("got %+v", got)
	}
	if k := e.key("g", "charge:1"); !jsonEq(k.Result, map[string]string{"by": "fast"}) {
		t.Fatalf("key %+v", k)
	}
	if len(calls.paths("/v1/produce")) != 0 || w.Stats().Produced != 0 {
		t.Fatalf("stats %+v", w.Stats())
	}
}

func TestStepsAgainstOnceqdOrderingKeyLeasesOneMessagePerKeyAtATime(t *testing.T) {
	e := newEnv(t, "orders")
	needOrdering(t, e)
	e.createTopic(onceq.TopicConfig{Partitions: 1, Ordering: "key"})
	if info, err := e.c.GetTopic(e.ctx, e.topic); err != nil || info.Settings.Ordering != "key" {
		t.Fatalf("%+v %v", info.Settings, err)
	}
	e.produce("k1-first", "", onceq.WithKey("k1"))
	e.produce("k1-second", "", onceq.WithKey("k1"))
	e.produce("k2-first", "", onceq.WithKey("k2"))
	values := func(ds []onceq.Delivery) []string {
		out := []string{}
		for _, d := range ds {
			out = append(out, d.Value)
		}
		return out
	}
	first := e.consume("g", "w1", 3, 1000)
	if v := values(first); !reflect.DeepEqual(v, []string{"k1-first", "k2-first"}) {
		t.Fatalf("first %v", v)
	}
	if v := values(e.consume("g", "w2", 3, 300)); len(v) != 0 {
		t.Fatalf("k1-second leased beside k1-first: %v", v)
	}
	if err := e.c.Ack(e.ctx, e.topic, "g", "w1", first[0].AckItem(nil)); err != nil {
		t.Fatal(err)
	}
	if v := values(e.consume("g", "w2", 3, 1000)); !reflect.DeepEqual(v, []string{"k1-second"}) {
		t.Fatalf("next %v", v)
	}
	if v := values(e.consume("g2", "w3", 3, 1000)); !reflect.DeepEqual(v, []string{"k1-first", "k2-first"}) {
		t.Fatalf("another group %v", v)
	}
}
