package onceq

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// Job is one delivery handed to a Handler.
//
// Use IdempotencyKey, or StepID (stable across redeliveries), as the
// idempotency key of the side effects you cause (a payment API's
// Idempotency-Key), and FencingToken to fence your own database writes
// (docs/CLIENTS.md, "What the handler must make idempotent").
type Job struct {
	Topic          string
	Group          string
	Partition      int
	Offset         int64
	Attempts       int // deliveries of this message to the group, 1 on the first
	Key            string
	Value          string
	LastError      string // the previous delivery's nack reason, or "lease_expired"
	Envelope       map[string]any
	IdempotencyKey string // the envelope's idempotency_key ("" if none)

	delivery     Delivery
	leaseMS      int64
	leaseExpires atomic.Int64
	leaseLost    atomic.Bool
	stopping     atomic.Bool
	ctx          context.Context // the handler's: ends when the lease is lost or the job released
	cancel       context.CancelFunc
	keeping      context.CancelFunc // stops the lease keeper
	// Guarded by the worker's mutex.
	finished, released bool

	stagedMu sync.Mutex
	staged   []Message // Produce's, sent on the job's ack
}

func newJob(parent context.Context, d Delivery, group string, leaseMS int64) *Job {
	j := &Job{
		Topic: d.Topic, Group: group, Partition: d.Partition, Offset: d.Offset,
		Attempts: d.Attempts, Key: d.Key, Value: d.Value, LastError: d.LastError,
		Envelope: d.Envelope, IdempotencyKey: d.IdempotencyKey,
		delivery: d, leaseMS: leaseMS,
	}
	j.leaseExpires.Store(d.LeaseExpiresAtMS)
	j.ctx, j.cancel = context.WithCancel(parent)
	return j
}

// FencingToken is this delivery's fencing token: strictly increasing per
// topic and group, larger on every redelivery. Store it with your own
// writes and refuse older ones:
//
//	UPDATE accounts SET balance = balance - 10, last_token = $token
//	 WHERE id = $id AND last_token < $token;
func (j *Job) FencingToken() int64 { return j.delivery.FencingToken }

// LeaseLost tells that an extend was refused: another consumer holds the
// message now (or it was acked). Stop, and write nothing: your ack would be
// refused. The handler's context is cancelled at the same time.
func (j *Job) LeaseLost() bool { return j.leaseLost.Load() }

// Stopping tells that the worker is shutting down: finish soon.
func (j *Job) Stopping() bool { return j.stopping.Load() }

// Check returns ErrLeaseLost once LeaseLost; call it between steps.
func (j *Job) Check() error {
	if j.LeaseLost() {
		return fmt.Errorf("%s/%d/%d: %w", j.Topic, j.Partition, j.Offset, ErrLeaseLost)
	}
	return nil
}

// StepID is the envelope's step_id if the producer set one, else
// "<topic>/<group>/<partition>/<offset>": the same on every redelivery of
// the message.
func (j *Job) StepID() string {
	if s := j.delivery.envelopeString("step_id"); s != "" {
		return s
	}
	return fmt.Sprintf("%s/%s/%d/%d", j.Topic, j.Group, j.Partition, j.Offset)
}

// Produce stages messages to store with this job's ack, in the same atomic
// step (a workflow step's next messages; each needs its Topic). Nothing is
// sent now: the ack sends every staged message, then those of a returned
// Complete. If the job is nacked, fails, or its ack is refused, none is
// stored. A message that cannot be sent (no Topic, a Value that is not
// JSON) nacks the job when the handler returns. Safe for concurrent use.
func (j *Job) Produce(msgs ...Message) {
	j.stagedMu.Lock()
	j.staged = append(j.staged, msgs...)
	j.stagedMu.Unlock()
}

// Staged is a copy of the messages staged with Produce so far.
func (j *Job) Staged() []Message {
	j.stagedMu.Lock()
	defer j.stagedMu.Unlock()
	return append([]Message(nil), j.staged...)
}

// Complete, returned by a handler as its result (a Complete or a
// *Complete), acks the job with Result (nil: none) and stores Produce in
// the same atomic step, after the messages staged with Job.Produce:
//
//	return onceq.Complete{Result: map[string]string{"charge_id": id},
//		Produce: []onceq.Message{{Topic: "receipts", Value: receipt, IdempotencyKey: "receipt:" + orderID}}}, nil
//
// The messages are stored with the ack or not at all.
type Complete struct {
	Result  any
	Produce []Message
}

// JSON decodes the value (JSON text) into v.
func (j *Job) JSON(v any) error { return json.Unmarshal([]byte(j.Value), v) }

// LeaseMS is the lease the worker extends by.
func (j *Job) LeaseMS() int64 { return j.leaseMS }

// LeaseExpiresAtMS is when the lease ends unless extended again (epoch ms).
func (j *Job) LeaseExpiresAtMS() int64 { return j.leaseExpires.Load() }

// Delivery is the delivery as consumed.
func (j *Job) Delivery() Delivery { return j.delivery }

func (j *Job) String() string {
	return fmt.Sprintf("Job(%s/%d/%d, attempts=%d, token=%d, key=%q)",
		j.Topic, j.Partition, j.Offset, j.Attempts, j.delivery.FencingToken, j.IdempotencyKey)
}

// loseLease marks the lease lost and ends the handler's context.
func (j *Job) loseLease() {
	j.leaseLost.Store(true)
	j.cancel()
}

// RetryError is what Retry returns: the job is nacked with Delay.
type RetryError struct{ Delay time.Duration }

func (e *RetryError) Error() string { return "retry in " + e.Delay.String() }

// Retry, returned by a handler (or wrapped: fmt.Errorf("rate limited: %w",
// onceq.Retry(d))), nacks the job with delay d instead of the topic's
// backoff. The nack's reason is the returned error's text.
func Retry(d time.Duration) error { return &RetryError{Delay: d} }

// FailError is what Fail returns.
type FailError struct{ Reason string }

func (e *FailError) Error() string { return "failed for good: " + e.Reason }

// Fail, returned by a handler (or wrapped), gives up for good: the
// delivery is acked with {"failed": reason} as its result, so the key is
// committed with the failure and the work never retried. (The API has no
// "dead-letter now"; for the DLQ, give the topic max_attempts and return
// an ordinary error.)
func Fail(reason string) error { return &FailError{Reason: reason} }
