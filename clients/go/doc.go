// Package onceq is the Go client of the onceq message broker: a Client with
// one method per endpoint of docs/API.md, a producer whose retries are
// stored once, and a Worker that consumes, runs your handler, extends its
// lease while it runs, and acks with the handler's result. Standard
// library only; Go 1.19+.
//
//	client := onceq.NewClient("http://127.0.0.1:8080")
//	if err := client.Err(); err != nil {
//		log.Fatal(err)
//	}
//	worker := onceq.NewWorker(client, "orders", "billing", onceq.WithConcurrency(4))
//	worker.Handle(func(ctx context.Context, job *onceq.Job) (any, error) {
//		chargeID, err := payments.Charge(ctx, job.Value, job.IdempotencyKey)
//		if err != nil {
//			return nil, err // nacked: retried after the topic's backoff
//		}
//		return map[string]string{"charge_id": chargeID}, nil // acked, committed with the key
//	})
//	if err := onceq.RunWithSignals(context.Background(), worker); err != nil {
//		log.Fatal(err)
//	}
//
// Errors are typed: match *NotFound, *Conflict, *Fenced, *Unavailable
// (RetryAfter), *Unauthorized, *Forbidden, *InvalidArgument, ... with
// errors.As. 429, 503 and network errors are retried first (WithRetries).
//
// The worker's semantics (when it acks, extends, nacks, stops) are those
// of the Python and TypeScript workers, documented once in
// docs/CLIENTS.md; README.md lists this package's API.
//
// # Workflow steps
//
// The server's ack cannot yet produce the next messages of a workflow in
// the same write (the open issue "Workflow steps"). This package does not
// imitate it with a produce followed by an ack, which a crash between the
// two would break. When the server has it, AckItem gains the messages and
// the worker's ackItem (worker.go) is where a handler's next messages join
// its result.
package onceq
