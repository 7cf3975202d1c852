package onceq_test

// The Worker in-process against a real onceqd: acks carried on consume,
// results committed, nacks with reasons and backoff, Retry and Fail, lease
// extension, lost leases, stale acks, concurrency, stop and drain.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"onceq"
)

// spy is an http.RoundTripper that records each request's path and JSON
// body, and can stall the next extends (a network partition, a GC pause).
type spy struct {
	mu           sync.Mutex
	calls        []spyCall
	slowExtends  int
	stall        time.Duration
	roundTripper http.RoundTripper
}

type spyCall struct {
	path string
	body map[string]any
}

func (s *spy) RoundTrip(req *http.Request) (*http.Response, error) {
	var body map[string]any
	if req.Body != nil {
		b, _ := io.ReadAll(req.Body)
		_ = json.Unmarshal(b, &body)
		req.Body = io.NopCloser(bytes.NewReader(b))
	}
	s.mu.Lock()
	s.calls = append(s.calls, spyCall{req.URL.Path, body})
	stall := time.Duration(0)
	if req.URL.Path == "/v1/extend" && s.slowExtends > 0 {
		s.slowExtends--
		stall = s.stall
	}
	s.mu.Unlock()
	time.Sleep(stall)
	return s.roundTripper.RoundTrip(req)
}

func (s *spy) paths(path string) []spyCall {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []spyCall
	for _, c := range s.calls {
		if c.path == path {
			out = append(out, c)
		}
	}
	return out
}

func (e *env) spyClient() (*onceq.Client, *spy) {
	s := &spy{roundTripper: http.DefaultTransport}
	return newClient(e.t, shared.URL, onceq.WithHTTPClient(&http.Client{Transport: s})), s
}

func (e *env) worker(c *onceq.Client, h onceq.Handler, opts ...onceq.WorkerOption) (*onceq.Worker, *quiet) {
	logs := &quiet{}
	opts = append([]onceq.WorkerOption{onceq.WithOwner("w1"), onceq.WithWait(300 * time.Millisecond),
		onceq.WithLogger(logs)}, opts...)
	w := onceq.NewWorker(c, e.topic, "g", opts...)
	w.Handle(h)
	return w, logs
}

func TestReturnedValuesAreCommittedWithAcksCarriedOnTheNextConsume(t *testing.T) {
	e := newEnv(t, "jobs")
	e.createTopic(onceq.TopicConfig{})
	msgs := make([]onceq.Message, 5)
	for i := range msgs {
		msgs[i] = onceq.Message{Value: map[string]int{"n": i}, IdempotencyKey: fmt.Sprintf("k%d", i)}
	}
	if _, err := e.c.ProduceBatch(e.ctx, e.topic, msgs); err != nil {
		t.Fatal(err)
	}
	c, calls := e.spyClient()
	var mu sync.Mutex
	var seen []*onceq.Job
	w, _ := e.worker(c, func(ctx context.Context, job *onceq.Job) (any, error) {
		mu.Lock()
		seen = append(seen, job)
		mu.Unlock()
		var v struct{ N int }
		if err := job.JSON(&v); err != nil {
			return nil, err
		}
		return map[string]int{"double": 2 * v.N}, nil
	})
	stop := startWorker(t, w)
	if !waitUntil(10*time.Second, func() bool { return w.Stats().Acked == 4 }) {
		t.Fatalf("stats %+v", w.Stats())
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 5; i++ {
		k := e.key("g", fmt.Sprintf("k%d", i))
		if !k.Committed() || k.Owner != "w1" || !jsonEq(k.Result, map[string]int{"double": 2 * i}) {
			t.Fatalf("k%d: %+v (%s)", i, k, k.Result)
		}
	}
	carried := 0
	for _, call := range calls.paths("/v1/consume") {
		if acks, ok := call.body["acks"].([]any); ok {
			carried += len(acks)
		}
	}
	if direct := calls.paths("/v1/ack"); carried < 4 || len(direct) > 1 {
		t.Fatalf("%d acks carried on a consume, %d sent alone", carried, len(direct))
	}
	if s := w.Stats(); s.Acked != 5 || s.Received != 5 {
		t.Fatalf("stats %+v", s)
	}
	j := seen[0]
	if j.Attempts != 1 || j.IdempotencyKey != "k0" || j.Offset != 0 || j.StepID() != e.topic+"/g/0/0" || j.LeaseLost() {
		t.Fatalf("job %v step %s", j, j.StepID())
	}
	if g := e.group("g"); g.Acked != 5 {
		t.Fatalf("group %+v", g)
	}
}

func TestAnErrorNacksWithItsMessageAndTheTopicBackoff(t *testing.T) {
	e := newEnv(t, "jobs")
	e.createTopic(onceq.TopicConfig{BackoffMS: 400})
	e.produce("x", "k")
	type run struct {
		at  time.Time
		job *onceq.Job
	}
	runs := make(chan run, 4)
	w, logs := e.worker(e.c, func(ctx context.Context, job *onceq.Job) (any, error) {
		runs <- run{time.Now(), job}
		if job.Attempts == 1 {
			return nil, errors.New("payment gateway timeout")
		}
		return "ok", nil
	})
	stop := startWorker(t, w)
	e.committed("g", "k", 10*time.Second)
	_ = stop()
	r1, r2 := <-runs, <-runs
	if r2.job.Attempts != 2 || r2.job.LastError != "payment gateway timeout" {
		t.Fatalf("second run %v last_error %q", r2.job, r2.job.LastError)
	}
	if gap := r2.at.Sub(r1.at); gap < 350*time.Millisecond {
		t.Fatalf("redelivered after %v, before the topic's 400 ms backoff", gap)
	}
	if r1.job.StepID() != r2.job.StepID() || r2.job.FencingToken() <= r1.job.FencingToken() {
		t.Fatalf("step ids %s %s, tokens %d %d", r1.job.StepID(), r2.job.StepID(), r1.job.FencingToken(), r2.job.FencingToken())
	}
	if s := w.Stats(); s.Nacked != 1 || s.Acked != 1 {
		t.Fatalf("stats %+v", s)
	}
	if !logs.contains("payment gateway timeout (nacked)") {
		t.Fatalf("logs %v", logs.lines)
	}
}

func TestRetrySetsTheDelayAndFailGivesUpForGood(t *testing.T) {
	e := newEnv(t, "jobs")
	e.createTopic(onceq.TopicConfig{})
	e.produce("retry-me", "r")
	e.produce("declined", "f", onceq.WithEnvelope("step_id", "charge-f"))
	type run struct {
		at                     time.Time
		value, lastError, step string
		attempts               int
	}
	var mu sync.Mutex
	var runs []run
	w, _ := e.worker(e.c, func(ctx context.Context, job *onceq.Job) (any, error) {
		mu.Lock()
		runs = append(runs, run{time.Now(), job.Value, job.LastError, job.StepID(), job.Attempts})
		mu.Unlock()
		if job.Value == "declined" {
			return nil, onceq.Fail("card declined")
		}
		if job.Attempts == 1 {
			return nil, fmt.Errorf("rate limited: %w", onceq.Retry(600*time.Millisecond))
		}
		return "paid", nil
	})
	stop := startWorker(t, w)
	f := e.committed("g", "f", 10*time.Second)
	r := e.committed("g", "r", 10*time.Second)
	_ = stop()
	if !jsonEq(f.Result, map[string]string{"failed": "card declined"}) || !jsonEq(r.Result, "paid") {
		t.Fatalf("results %s %s", f.Result, r.Result)
	}
	var retried, declined []run
	for _, x := range runs {
		if x.value == "retry-me" {
			retried = append(retried, x)
		} else {
			declined = append(declined, x)
		}
	}
	if len(retried) != 2 || retried[1].attempts != 2 || retried[1].lastError != "rate limited: retry in 600ms" {
		t.Fatalf("retried %+v", retried)
	}
	if gap := retried[1].at.Sub(retried[0].at); gap < 550*time.Millisecond {
		t.Fatalf("retried after %v, before Retry's 600 ms", gap)
	}
	if len(declined) != 1 || declined[0].step != "charge-f" {
		t.Fatalf("declined ran %+v (once, never retried)", declined)
	}
	if s := w.Stats(); s.Failed != 1 {
		t.Fatalf("stats %+v", s)
	}
}

func TestAHandlerRunningThreeLeasesIsExtendedAndNotRedelivered(t *testing.T) {
	e := newEnv(t, "jobs")
	e.createTopic(onceq.TopicConfig{LeaseMS: 1000})
	e.produce("slow", "slow")
	var ran atomic.Int32
	w, _ := e.worker(e.c, func(ctx context.Context, job *onceq.Job) (any, error) {
		ran.Add(1)
		time.Sleep(3200 * time.Millisecond)
		return map[string]bool{"lease_lost": job.LeaseLost()}, nil
	})
	stop := startWorker(t, w)
	if !waitUntil(5*time.Second, func() bool { return ran.Load() == 1 }) {
		t.Fatal("the handler did not start")
	}
	// Another consumer of the group polls all along: it gets nothing.
	var other []onceq.Delivery
	for deadline := time.Now().Add(4 * time.Second); time.Now().Before(deadline) && !e.key("g", "slow").Committed(); {
		other = append(other, e.consume("g", "w2", 1, 250)...)
	}
	k := e.committed("g", "slow", 5*time.Second)
	_ = stop()
	if len(other) != 0 {
		t.Fatalf("another consumer got %+v", other)
	}
	if k.Owner != "w1" || k.Attempts != 1 || !jsonEq(k.Result, map[string]bool{"lease_lost": false}) || ran.Load() != 1 {
		t.Fatalf("key %+v (%s), ran %d", k, k.Result, ran.Load())
	}
	if s := w.Stats(); s.Extended < 6 { // every ~333 ms for 3.2 s
		t.Fatalf("stats %+v", s)
	}
	if g := e.group("g"); g.Redelivered != 0 || g.Acked != 1 {
		t.Fatalf("group %+v", g)
	}
}

func TestAFencedExtendTellsTheHandlerItsLeaseIsLost(t *testing.T) {
	e := newEnv(t, "jobs")
	e.createTopic(onceq.TopicConfig{LeaseMS: 600})
	e.produce("x", "x")
	c, s := e.spyClient()
	s.slowExtends, s.stall = 1, 1500*time.Millisecond // the first extend arrives after the lease ran out
	started := make(chan struct{})
	told := make(chan error, 1)
	w, _ := e.worker(c, func(ctx context.Context, job *onceq.Job) (any, error) {
		close(started)
		select {
		case <-ctx.Done(): // the lease was lost
		case <-time.After(8 * time.Second):
		}
		told <- job.Check()
		return "too late", nil
	}, onceq.WithOwner("paused"))
	stop := startWorker(t, w)
	<-started
	d, err := e.c.Consume(e.ctx, e.topic, "g", "other", onceq.ConsumeOptions{WaitMS: 5000, LeaseMS: 10000})
	if err != nil || len(d.Messages) != 1 || d.Messages[0].Attempts != 2 {
		t.Fatalf("the other consumer got %+v %v", d, err)
	}
	if err := <-told; !errors.Is(err, onceq.ErrLeaseLost) {
		t.Fatalf("job.Check() = %v", err)
	}
	if !waitUntil(5*time.Second, func() bool { return w.Stats().Stale == 1 }) {
		t.Fatalf("stats %+v", w.Stats())
	}
	_ = stop()
	if st := w.Stats(); st.LeaseLost != 1 || st.Acked != 0 {
		t.Fatalf("stats %+v", st)
	}
	if k := e.key("g", "x"); k.State != "leased" || k.Owner != "other" { // the late ack changed nothing
		t.Fatalf("key %+v", k)
	}
	if err := e.c.Ack(e.ctx, e.topic, "g", "other", d.Messages[0].AckItem("right")); err != nil {
		t.Fatal(err)
	}
	if k := e.key("g", "x"); !jsonEq(k.Result, "right") {
		t.Fatalf("key %+v", k)
	}
}

func TestAStaleWorkersAckIsRefusedAndReported(t *testing.T) {
	e := newEnv(t, "jobs")
	e.createTopic(onceq.TopicConfig{LeaseMS: 600})
	e.produce("charge", "charge:1")
	started, resume := make(chan struct{}), make(chan struct{})
	type report struct {
		job *onceq.Job
		err error
	}
	stale := make(chan report, 1)
	w, logs := e.worker(e.c, func(ctx context.Context, job *onceq.Job) (any, error) {
		close(started)
		<-resume // paused past its lease
		return map[string]string{"by": "slow"}, nil
	}, onceq.WithOwner("slow"), onceq.WithoutAutoExtend(),
		onceq.WithOnStale(func(job *onceq.Job, err error) { stale <- report{job, err} }))
	stop := startWorker(t, w)
	<-started
	// The lease runs out; another consumer takes over and commits.
	d := e.consume("g", "fast", 1, 5000)
	if len(d) != 1 || d[0].Attempts != 2 {
		t.Fatalf("takeover %+v", d)
	}
	if err := e.c.Ack(e.ctx, e.topic, "g", "fast", d[0].AckItem(map[string]string{"by": "fast"})); err != nil {
		t.Fatal(err)
	}
	close(resume)
	var r report
	select {
	case r = <-stale:
	case <-time.After(10 * time.Second):
		t.Fatal("the stale ack was not reported")
	}
	_ = stop()
	var fenced *onceq.Fenced
	if !errors.As(r.err, &fenced) || !r.job.LeaseLost() {
		t.Fatalf("reported %#v, lease lost %v", r.err, r.job.LeaseLost())
	}
	if s := w.Stats(); s.Stale != 1 || s.Acked != 0 {
		t.Fatalf("stats %+v", s)
	}
	if !logs.contains("refused") {
		t.Fatalf("logs %v", logs.lines)
	}
	if k := e.key("g", "charge:1"); !jsonEq(k.Result, map[string]string{"by": "fast"}) { // the first commit stands
		t.Fatalf("key %+v (%s)", k, k.Result)
	}
}

func TestConcurrencyRunsNHandlersAtOnce(t *testing.T) {
	e := newEnv(t, "jobs")
	e.createTopic(onceq.TopicConfig{})
	msgs := make([]onceq.Message, 8)
	for i := range msgs {
		msgs[i] = onceq.Message{Value: fmt.Sprintf("m%d", i)}
	}
	if _, err := e.c.ProduceBatch(e.ctx, e.topic, msgs); err != nil {
		t.Fatal(err)
	}
	var running, peak atomic.Int32
	gate := make(chan struct{})
	w, _ := e.worker(e.c, func(ctx context.Context, job *onceq.Job) (any, error) {
		n := running.Add(1)
		for {
			p := peak.Load()
			if n <= p || peak.CompareAndSwap(p, n) {
				break
			}
		}
		if n == 4 {
			close(gate) // four at once: let them all go
		}
		<-gate
		running.Add(-1)
		return nil, nil
	}, onceq.WithConcurrency(4))
	stop := startWorker(t, w)
	if !waitUntil(10*time.Second, func() bool { return w.Stats().Acked == 8 }) {
		t.Fatalf("stats %+v", w.Stats())
	}
	_ = stop()
	if peak.Load() != 4 {
		t.Fatalf("peak concurrency %d", peak.Load())
	}
	if g := e.group("g"); g.Acked != 8 {
		t.Fatalf("group %+v", g)
	}
}

func TestCancellingTheContextFinishesTheRunningHandlerAndTakesNoMore(t *testing.T) {
	e := newEnv(t, "jobs")
	e.createTopic(onceq.TopicConfig{})
	e.produceN(3)
	started := make(chan struct{}, 3)
	w, _ := e.worker(e.c, func(ctx context.Context, job *onceq.Job) (any, error) {
		started <- struct{}{}
		time.Sleep(800 * time.Millisecond)
		return map[string]bool{"stopping": job.Stopping(), "ctx_done": ctx.Err() != nil}, nil
	})
	stop := startWorker(t, w)
	<-started
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if k := e.key("g", "k0"); !jsonEq(k.Result, map[string]bool{"stopping": true, "ctx_done": false}) {
		t.Fatalf("key %+v (%s)", k, k.Result)
	}
	if g := e.group("g"); g.Acked != 1 || g.Backlog != 2 || g.Inflight != 0 {
		t.Fatalf("group %+v", g)
	}
}

func TestAHandlerStillRunningAfterTheDrainTimeoutIsReleased(t *testing.T) {
	e := newEnv(t, "jobs")
	e.createTopic(onceq.TopicConfig{})
	e.produce("stuck", "stuck")
	started, unblock := make(chan struct{}), make(chan struct{})
	ended := make(chan error, 1)
	w, _ := e.worker(e.c, func(ctx context.Context, job *onceq.Job) (any, error) {
		close(started)
		<-unblock
		ended <- ctx.Err()
		return "late", nil
	}, onceq.WithDrainTimeout(300*time.Millisecond))
	stop := startWorker(t, w)
	<-started
	t0 := time.Now()
	_ = stop()
	if d := time.Since(t0); d > 5*time.Second {
		t.Fatalf("the stop took %v", d)
	}
	if s := w.Stats(); s.Released != 1 {
		t.Fatalf("stats %+v", s)
	}
	d := e.consume("g", "w2", 1, 1000)
	if len(d) != 1 || d[0].Attempts != 2 || d[0].LastError != "worker stopped before the handler finished" {
		t.Fatalf("after release %+v", d)
	}
	close(unblock)
	if err := <-ended; !errors.Is(err, context.Canceled) {
		t.Fatalf("the released handler's context: %v", err)
	}
	time.Sleep(200 * time.Millisecond)
	if k := e.key("g", "stuck"); k.State != "leased" || k.Owner != "w2" { // the late result was dropped
		t.Fatalf("key %+v", k)
	}
}

func TestAPanickingHandlerIsNacked(t *testing.T) {
	e := newEnv(t, "jobs")
	e.createTopic(onceq.TopicConfig{})
	e.produce("x", "k")
	w, _ := e.worker(e.c, func(ctx context.Context, job *onceq.Job) (any, error) {
		if job.Attempts == 1 {
			panic("boom")
		}
		return job.LastError, nil
	})
	stop := startWorker(t, w)
	k := e.committed("g", "k", 10*time.Second)
	_ = stop()
	if !jsonEq(k.Result, "panic: boom") {
		t.Fatalf("key %+v (%s)", k, k.Result)
	}
}

func TestAnUnknownTopicStopsRunWithTheError(t *testing.T) {
	e := newEnv(t, "missing")
	w, _ := e.worker(e.c, func(context.Context, *onceq.Job) (any, error) { return nil, nil })
	var inv *onceq.InvalidArgument
	if err := w.Run(e.ctx); !errors.As(err, &inv) {
		t.Fatalf("Run: %#v", err)
	}
	if err := w.Run(e.ctx); err == nil {
		t.Fatal("a second Run was accepted")
	}
}
