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
// A handler can store the next messages of a workflow with its ack, in one
// atomic step (POST /v1/ack with produce; both are stored or neither):
// return Complete{Result: r, Produce: msgs}, or stage messages with
// Job.Produce while it runs. The worker never sends them as a separate
// produce: an ack that is refused stores none of them, and the redelivered
// job produces them again. Client.AckStep is the low-level call
// (AckItem.Produce; AckResult.Produced says where each message went).
package onceq
