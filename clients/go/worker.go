package onceq

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"os"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"
)

// Handler processes one job. Its returned value is acked as the key's
// committed result (any JSON; nil commits none). A returned Complete acks
// with its Result and stores its Produce messages, and those staged with
// Job.Produce, in the same step. A returned error nacks the job with the
// error's text as the reason and the topic's backoff; Retry(d) sets the
// delay, Fail(reason) gives up for good. A panic is a nack too. A nack, a
// Fail or a panic stores none of the job's messages.
//
// ctx ends when the job's lease is lost (Job.LeaseLost) or the worker
// releases the job (a second signal, the drain timeout): stop then, your
// result would be refused or dropped. Cancelling Run's context does not
// end it: the handler is let finish.
type Handler func(ctx context.Context, job *Job) (any, error)

// Logger receives the worker's warnings (nacks, stale acks, lost leases,
// consume errors). *log.Logger is one.
type Logger interface {
	Printf(format string, args ...any)
}

// WorkerOption configures NewWorker.
type WorkerOption func(*Worker)

// WithOwner names the consumer (default: "<hostname>-<pid>"). Give each
// process its own.
func WithOwner(name string) WorkerOption { return func(w *Worker) { w.owner = name } }

// WithConcurrency runs up to n handlers at once (default 1).
func WithConcurrency(n int) WorkerOption { return func(w *Worker) { w.concurrency = n } }

// WithLease asks for leases of d (default: the topic's lease_ms, read with
// GET /v1/topics/{topic} when the token may, else estimated from the first
// delivery). Leases are extended every third of it while handlers run.
func WithLease(d time.Duration) WorkerOption {
	return func(w *Worker) { w.leaseMS = d.Milliseconds() }
}

// WithWait sets the long poll's wait (default 5 s). It also bounds how long
// a stop waits for the poll in flight.
func WithWait(d time.Duration) WorkerOption {
	return func(w *Worker) { w.waitMS = int(d.Milliseconds()) }
}

// WithDrainTimeout is how long a stop lets running handlers finish
// (default 30 s); those still running then are released.
func WithDrainTimeout(d time.Duration) WorkerOption { return func(w *Worker) { w.drainTimeout = d } }

// WithoutAutoExtend lets leases run out: the lease is then the handler's
// time limit.
func WithoutAutoExtend() WorkerOption { return func(w *Worker) { w.autoExtend = false } }

// WithOnStale calls fn when the broker refuses a job's ack or nack because
// another delivery holds the message now: the job's side effects may have
// run twice (the first commit's result stands).
func WithOnStale(fn func(job *Job, err error)) WorkerOption {
	return func(w *Worker) { w.onStale = fn }
}

// WithLogger sends the worker's warnings to l (default: the standard
// logger); nil discards them.
func WithLogger(l Logger) WorkerOption {
	return func(w *Worker) {
		if l == nil {
			l = log.New(discard{}, "", 0)
		}
		w.log = l
	}
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

// WorkerStats counts what a worker did.
type WorkerStats struct {
	Received  int64 // deliveries
	Acked     int64 // acks accepted
	Nacked    int64 // handler errors nacked
	Failed    int64 // Fail: acked as failed for good
	Extended  int64 // lease extensions
	LeaseLost int64 // extends refused: another consumer holds the message
	Stale     int64 // acks or nacks refused for the same reason
	Released  int64 // jobs given back unfinished by a stop
	Produced  int64 // messages stored with acks (Complete, Job.Produce)
}

// Worker runs a Handler for each message of a topic in a group: it
// long-polls POST /v1/consume for as many messages as it has free handler
// slots, extends each running job's lease every third of the lease, and
// acks with the handler's result, carried on the next consume (or at once
// with POST /v1/ack when the poller is inside a long poll). See
// docs/CLIENTS.md, "The worker".
//
// Run it once. Handle must be called before Run.
type Worker struct {
	client       *Client
	topic, group string
	owner        string
	concurrency  int
	leaseMS      int64
	waitMS       int
	drainTimeout time.Duration
	autoExtend   bool
	onStale      func(*Job, error)
	log          Logger
	handler      Handler

	mu         sync.Mutex
	free       int
	inflight   map[*Job]struct{}
	pending    []*pendingAck // acks carried on the next consume
	polling    bool
	pollerDone bool
	wake       chan struct{} // a slot freed or a job left inflight

	started  atomic.Bool
	soft     chan struct{} // Stop: take no more work, drain
	hard     chan struct{} // StopNow: cut the poll, release running jobs
	softOnce sync.Once
	hardOnce sync.Once

	statsMu sync.Mutex
	stats   WorkerStats
}

type pendingAck struct {
	job  *Job
	item AckItem
}

// NewWorker makes a worker of topic for group. Register the handler with
// Handle, then Run.
func NewWorker(client *Client, topic, group string, opts ...WorkerOption) *Worker {
	w := &Worker{
		client: client, topic: topic, group: group,
		owner:        defaultOwner(),
		concurrency:  1,
		waitMS:       5000,
		drainTimeout: 30 * time.Second,
		autoExtend:   true,
		log:          log.Default(),
		inflight:     map[*Job]struct{}{},
		wake:         make(chan struct{}, 1),
		soft:         make(chan struct{}),
		hard:         make(chan struct{}),
	}
	for _, opt := range opts {
		opt(w)
	}
	return w
}

func defaultOwner() string {
	host, err := os.Hostname()
	if err != nil {
		host = "worker"
	}
	return fmt.Sprintf("%s-%d", host, os.Getpid())
}

// Handle registers the handler.
func (w *Worker) Handle(h Handler) { w.handler = h }

// Owner is the consumer name the worker uses.
func (w *Worker) Owner() string { return w.owner }

// Stats is a snapshot of the worker's counters.
func (w *Worker) Stats() WorkerStats {
	w.statsMu.Lock()
	defer w.statsMu.Unlock()
	return w.stats
}

func (w *Worker) count(f func(*WorkerStats)) {
	w.statsMu.Lock()
	f(&w.stats)
	w.statsMu.Unlock()
}

// Stop stops taking new work, as cancelling Run's context does: the poll
// in flight ends (within the long poll's wait) and what it brought is
// released at once; running handlers get the drain timeout to finish and
// ack. Safe from any goroutine; idempotent.
func (w *Worker) Stop() { w.softOnce.Do(func() { close(w.soft) }) }

// StopNow stops at once: the poll in flight is cut (what it leased comes
// back when the lease ends), running jobs are released (nacked without
// delay; their handlers' contexts end and their late results are dropped),
// and Run returns.
func (w *Worker) StopNow() {
	w.Stop()
	w.hardOnce.Do(func() { close(w.hard) })
}

func (w *Worker) stopping() bool {
	select {
	case <-w.soft:
		return true
	default:
		return false
	}
}

// notify wakes the poller or the drain (w.mu held or not).
func (w *Worker) notify() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// Run processes messages until ctx is cancelled (or Stop), then drains and
// returns nil. If the server refuses the worker for good (unknown topic,
// bad token: *InvalidArgument, *Unauthorized, *Forbidden, *NotFound) it
// stops as on Stop, drains, and returns that error.
func (w *Worker) Run(ctx context.Context) error {
	if w.handler == nil {
		return errors.New("onceq: Worker.Run: no handler (call Handle first)")
	}
	if w.concurrency < 1 {
		return errors.New("onceq: WithConcurrency needs n >= 1")
	}
	if !w.started.CompareAndSwap(false, true) {
		return errors.New("onceq: Worker.Run may be called once")
	}
	// Requests outlive ctx (a drain acks after it ended); the poll ends
	// with StopNow.
	bg := detached{ctx}
	pollCtx, cutPoll := context.WithCancel(bg)
	done := make(chan struct{})
	defer close(done)
	go func() {
		select {
		case <-ctx.Done():
			w.Stop()
		case <-done:
		}
	}()
	go func() {
		select {
		case <-w.hard:
			cutPoll()
		case <-done:
		}
	}()
	w.mu.Lock()
	w.free = w.concurrency
	w.mu.Unlock()
	w.resolveLease(pollCtx)
	err := w.poll(bg, pollCtx)
	if err != nil {
		w.Stop()
	}
	w.drain(bg)
	cutPoll()
	return err
}

// detached keeps a context's values but not its end.
type detached struct{ parent context.Context }

func (detached) Deadline() (time.Time, bool) { return time.Time{}, false }
func (detached) Done() <-chan struct{}       { return nil }
func (detached) Err() error                  { return nil }
func (d detached) Value(key any) any         { return d.parent.Value(key) }

func (w *Worker) resolveLease(ctx context.Context) {
	if w.leaseMS > 0 {
		return
	}
	info, err := w.client.GetTopic(ctx, w.topic)
	if err == nil && info.Settings.LeaseMS > 0 {
		w.leaseMS = info.Settings.LeaseMS
	}
	// Else (no admin scope) each delivery tells: see leaseOf.
}

// leaseOf is the lease a job is extended by.
func (w *Worker) leaseOf(d Delivery, recv time.Time) int64 {
	if w.leaseMS > 0 {
		return w.leaseMS
	}
	// What is left of the lease on arrival: an underestimate, so extends
	// come early rather than late.
	if left := d.LeaseExpiresAtMS - recv.UnixMilli(); left > 100 {
		return left
	}
	return 100
}

// fatal tells the consume errors that retrying cannot fix.
func fatal(err error) bool {
	var (
		inv *InvalidArgument
		una *Unauthorized
		frb *Forbidden
		nf  *NotFound
	)
	return errors.As(err, &inv) || errors.As(err, &una) || errors.As(err, &frb) || errors.As(err, &nf)
}

// poll is the poller: consume for the free slots, carrying the finished
// jobs' acks, and start a handler per delivery.
func (w *Worker) poll(bg, pollCtx context.Context) error {
	failures := 0
	for {
		w.mu.Lock()
		for w.free == 0 && !w.stopping() {
			w.mu.Unlock()
			select {
			case <-w.wake:
			case <-w.soft:
			}
			w.mu.Lock()
		}
		if w.stopping() {
			w.mu.Unlock()
			return nil
		}
		carried := w.pending
		w.pending = nil
		n := w.free
		w.polling = true
		w.mu.Unlock()

		batch, err := w.client.Consume(pollCtx, w.topic, w.group, w.owner, ConsumeOptions{
			MaxMessages: n, WaitMS: w.waitMS, LeaseMS: w.leaseMS, Acks: ackItems(carried),
		})
		if err != nil {
			// The drain sends the carried acks again: an ack repeated by its
			// owner is accepted.
			w.mu.Lock()
			w.polling = false
			w.pending = append(carried, w.pending...)
			w.mu.Unlock()
			if pollCtx.Err() != nil {
				return nil
			}
			if fatal(err) {
				return err
			}
			failures++
			delay := 5 * time.Second
			if failures < 6 {
				delay = 100 * time.Millisecond << failures
			}
			w.log.Printf("onceq worker %s: consume failed (%v); retrying in %v", w.owner, err, delay)
			select {
			case <-time.After(delay):
			case <-w.soft:
			}
			continue
		}
		failures = 0
		// The leases started just before the answer: timing extends from
		// its arrival errs on the early side.
		recv := time.Now()
		for i, p := range carried {
			if i < len(batch.Acks) {
				w.ackOutcome(p.job, batch.Acks[i], nil)
			}
		}
		jobs := make([]*Job, 0, len(batch.Messages))
		w.mu.Lock()
		w.polling = false
		for _, d := range batch.Messages {
			job := newJob(bg, d, w.group, w.leaseOf(d, recv))
			w.free--
			w.inflight[job] = struct{}{}
			jobs = append(jobs, job)
		}
		w.mu.Unlock()
		w.count(func(s *WorkerStats) { s.Received += int64(len(jobs)) })
		for _, job := range jobs {
			if w.stopping() {
				w.release(bg, job, "worker stopping")
				continue
			}
			keepCtx, stopKeeping := context.WithCancel(bg)
			job.keeping = stopKeeping
			if w.autoExtend {
				go w.keepLease(keepCtx, job, recv)
			}
			go w.run(bg, job)
		}
	}
}

func ackItems(p []*pendingAck) []AckItem {
	items := make([]AckItem, len(p))
	for i, a := range p {
		items[i] = a.item
	}
	return items
}

// run runs the handler and acks or nacks by its outcome.
func (w *Worker) run(bg context.Context, job *Job) {
	result, err := w.call(job)
	defer job.cancel()
	var produce []Message
	if err == nil {
		produce = job.Staged()
		switch c := result.(type) {
		case Complete:
			result, produce = c.Result, append(produce, c.Produce...)
		case *Complete:
			if c != nil {
				result, produce = c.Result, append(produce, c.Produce...)
			} else {
				result = nil
			}
		}
		if _, jerr := json.Marshal(result); jerr != nil {
			err = fmt.Errorf("the handler's result is not JSON: %w", jerr)
		} else if perr := checkProduce(produce); perr != nil {
			err = fmt.Errorf("the handler's messages cannot be sent: %w", perr)
		}
	}
	var (
		retry *RetryError
		fail  *FailError
	)
	switch {
	case err == nil:
		w.finishAck(bg, job, result, produce)
	case errors.As(err, &fail):
		w.count(func(s *WorkerStats) { s.Failed++ })
		w.log.Printf("onceq worker %s: %v failed for good: %s", w.owner, job, fail.Reason)
		w.finishAck(bg, job, map[string]string{"failed": fail.Reason}, nil)
	case errors.As(err, &retry):
		w.finishNack(bg, job, err.Error(), Ptr(retry.Delay.Milliseconds()))
	default:
		reason := err.Error()
		if len(reason) > 1000 {
			reason = reason[:1000]
		}
		w.log.Printf("onceq worker %s: %v: %s (nacked)", w.owner, job, reason)
		w.finishNack(bg, job, reason, nil)
	}
}

// call runs the handler; a panic is its error.
func (w *Worker) call(job *Job) (result any, err error) {
	defer func() {
		if r := recover(); r != nil {
			w.log.Printf("onceq worker %s: %v: handler panicked: %v\n%s", w.owner, job, r, debug.Stack())
			result, err = nil, fmt.Errorf("panic: %v", r)
		}
	}()
	return w.handler(job.ctx, job)
}

// ackItem is the ack of a finished job, fenced on its attempt and token,
// with the messages it produces (workflow steps): the ack commits the key
// and stores them in one write.
func (w *Worker) ackItem(job *Job, result any, produce []Message) AckItem {
	item := job.delivery.AckItem(result)
	if len(produce) > 0 {
		item.Produce = produce
	}
	return item
}

// finish marks the handler's job finished, unless a stop released it
// first: then its late outcome is dropped (false). A finished job is never
// released.
func (w *Worker) finish(job *Job) bool {
	job.keeping()
	w.mu.Lock()
	defer w.mu.Unlock()
	job.finished = !job.released
	return job.finished
}

func (w *Worker) finishAck(bg context.Context, job *Job, result any, produce []Message) {
	item := w.ackItem(job, result, produce)
	if !w.finish(job) {
		return
	}
	w.mu.Lock()
	w.free++
	// An ack with messages goes on its own POST /v1/ack: the acks carried
	// on a consume cannot produce.
	if len(item.Produce) > 0 {
		w.mu.Unlock()
		w.notify()
		w.ackStep(bg, job, item)
		return
	}
	if !w.polling && !w.pollerDone {
		delete(w.inflight, job)
		w.pending = append(w.pending, &pendingAck{job, item}) // carried on the next consume
		w.mu.Unlock()
		w.notify()
		return
	}
	w.mu.Unlock()
	w.notify()
	results, err := w.client.AckBatch(bg, w.topic, w.group, w.owner, []AckItem{item})
	switch {
	case err != nil:
		w.ackOutcome(job, AckResult{Status: "error", Error: codeOf(err)}, err)
	case len(results) == 1:
		w.ackOutcome(job, results[0], nil)
	}
	w.mu.Lock() // only now: a drain waits for this ack too
	delete(w.inflight, job)
	w.mu.Unlock()
	w.notify()
}

// ackStep acks the job with its messages: both are stored, or neither. The
// messages are never sent again on their own: a refused ack is reported
// (409) or nacked (a refusal of the messages), and the redelivered job
// produces them again.
func (w *Worker) ackStep(bg context.Context, job *Job, item AckItem) {
	n := int64(len(item.Produce))
	_, err := w.client.AckStep(bg, w.topic, w.group, w.owner, item)
	var (
		fenced *Fenced
		inv    *InvalidArgument
		frb    *Forbidden
		nf     *NotFound
		big    *PayloadTooLarge
		busy   *ResourceExhausted
	)
	switch {
	case err == nil:
		w.count(func(s *WorkerStats) { s.Acked++; s.Produced += n })
	case errors.As(err, &fenced):
		w.ackOutcome(job, AckResult{Status: "error", Error: codeOf(err)}, err)
	case errors.As(err, &inv) || errors.As(err, &frb) || errors.As(err, &nf) || errors.As(err, &big) || errors.As(err, &busy):
		// Nothing was stored. Waiting for the lease to end would only delay
		// the same refusal: nack, so the topic's backoff and max_attempts
		// (then the DLQ) apply, with the reason to read.
		w.log.Printf("onceq worker %s: ack of %v with %d messages refused (%v); nacking it", w.owner, job, n, err)
		reason := "ack refused: " + err.Error()
		if len(reason) > 1000 {
			reason = reason[:1000]
		}
		switch nerr := w.nack(bg, job, reason, nil); {
		case nerr == nil:
			w.count(func(s *WorkerStats) { s.Nacked++ })
		case errors.As(nerr, &fenced):
			w.reportStale(job, "nack", nerr)
		default:
			w.log.Printf("onceq worker %s: nack of %v failed: %v (redelivered when its lease ends)", w.owner, job, nerr)
		}
	default:
		w.ackOutcome(job, AckResult{Status: "error", Error: codeOf(err)}, err)
	}
	w.mu.Lock() // only now: a drain waits for this ack too
	delete(w.inflight, job)
	w.mu.Unlock()
	w.notify()
}

func codeOf(err error) string {
	var e *APIError
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}

func (w *Worker) finishNack(bg context.Context, job *Job, reason string, delayMS *int64) {
	if !w.finish(job) {
		return
	}
	var fenced *Fenced
	switch err := w.nack(bg, job, reason, delayMS); {
	case err == nil:
		w.count(func(s *WorkerStats) { s.Nacked++ })
	case errors.As(err, &fenced):
		w.reportStale(job, "nack", err)
	default:
		w.log.Printf("onceq worker %s: nack of %v failed: %v (redelivered when its lease ends)", w.owner, job, err)
	}
	w.freeSlot(job)
}

// nack nacks the job's delivery, fenced on its attempt and token.
func (w *Worker) nack(bg context.Context, job *Job, reason string, delayMS *int64) error {
	return w.client.Nack(bg, w.topic, w.group, w.owner, NackItem{Ref: job.delivery.Ref(), Reason: reason, DelayMS: delayMS})
}

// freeSlot: the job is no longer in flight; its slot is free.
func (w *Worker) freeSlot(job *Job) {
	w.mu.Lock()
	delete(w.inflight, job)
	w.free++
	w.mu.Unlock()
	w.notify()
}

func (w *Worker) ackOutcome(job *Job, r AckResult, err error) {
	switch {
	case r.OK():
		w.count(func(s *WorkerStats) { s.Acked++ })
	case r.Error == "FAILED_PRECONDITION":
		if err == nil {
			err = &Fenced{Conflict{APIError{Code: r.Error, Status: 409,
				Message: "ack refused: the delivery is held by another consumer now"}}}
		}
		w.reportStale(job, "ack", err)
	default:
		if err == nil {
			err = errors.New(r.Error)
		}
		w.log.Printf("onceq worker %s: ack of %v failed: %v (redelivered when its lease ends)", w.owner, job, err)
	}
}

func (w *Worker) reportStale(job *Job, what string, err error) {
	w.count(func(s *WorkerStats) { s.Stale++ })
	job.loseLease()
	w.log.Printf("onceq worker %s: %s of %v refused (%v): another delivery holds the message now; "+
		"the work may have run twice, the first commit's result stands", w.owner, what, job, err)
	if w.onStale != nil {
		w.onStale(job, err)
	}
}

// release gives an unfinished job back (a nack without delay) and ends its
// handler's context; its late result is dropped.
func (w *Worker) release(bg context.Context, job *Job, reason string) {
	if job.keeping != nil {
		job.keeping()
	}
	w.mu.Lock()
	if job.finished || job.released {
		w.mu.Unlock()
		return
	}
	job.released = true
	w.mu.Unlock()
	job.stopping.Store(true)
	job.cancel()
	if err := w.nack(bg, job, reason, Ptr(int64(0))); err != nil {
		w.log.Printf("onceq worker %s: release of %v failed: %v", w.owner, job, err)
	} else {
		w.count(func(s *WorkerStats) { s.Released++ })
	}
	w.freeSlot(job)
}

// drain flushes the carried acks, lets running handlers finish (up to the
// drain timeout, or until StopNow) and releases the rest.
func (w *Worker) drain(bg context.Context) {
	w.mu.Lock()
	w.pollerDone = true
	carried := w.pending
	w.pending = nil
	for job := range w.inflight {
		job.stopping.Store(true)
	}
	w.mu.Unlock()
	if len(carried) > 0 {
		results, err := w.client.AckBatch(bg, w.topic, w.group, w.owner, ackItems(carried))
		for i, p := range carried {
			switch {
			case err != nil:
				w.ackOutcome(p.job, AckResult{Status: "error", Error: codeOf(err)}, err)
			case i < len(results):
				w.ackOutcome(p.job, results[i], nil)
			}
		}
	}
	deadline := time.NewTimer(w.drainTimeout)
	defer deadline.Stop()
	for waiting := true; waiting; {
		w.mu.Lock()
		n := len(w.inflight)
		w.mu.Unlock()
		if n == 0 {
			return
		}
		select {
		case <-w.wake:
		case <-deadline.C:
			waiting = false
		case <-w.hard:
			waiting = false
		}
	}
	w.mu.Lock()
	late := make([]*Job, 0, len(w.inflight))
	for job := range w.inflight {
		late = append(late, job)
	}
	w.mu.Unlock()
	for _, job := range late {
		w.log.Printf("onceq worker %s: %v still running at stop: releasing it", w.owner, job)
		w.release(bg, job, "worker stopped before the handler finished")
	}
}

// keepLease extends the job's lease every third of it, fenced on its
// token, until ctx ends (the job finished). A refused extend means another
// consumer holds the message: the job's lease is lost.
func (w *Worker) keepLease(ctx context.Context, job *Job, recv time.Time) {
	period := time.Duration(job.leaseMS) * time.Millisecond / 3
	next := recv.Add(period)
	for {
		t := time.NewTimer(time.Until(next))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		started := time.Now()
		next = started.Add(period)
		expires, err := w.client.Extend(ctx, w.topic, w.group, w.owner,
			ExtendItem{Ref: job.delivery.Ref(), LeaseMS: job.leaseMS})
		var (
			fenced *Fenced
			nf     *NotFound
		)
		switch {
		case ctx.Err() != nil:
			return
		case err == nil:
			job.leaseExpires.Store(expires)
			w.count(func(s *WorkerStats) { s.Extended++ })
		case errors.As(err, &fenced) || errors.As(err, &nf):
			w.count(func(s *WorkerStats) { s.LeaseLost++ })
			job.loseLease()
			w.log.Printf("onceq worker %s: extend of %v refused (%v): lease lost", w.owner, job, err)
			return
		default:
			// Transient: try again sooner, before the lease can run out.
			next = started.Add(period / 2)
			w.log.Printf("onceq worker %s: extend of %v failed (%v); retrying", w.owner, job, err)
		}
	}
}
