package onceq

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

// RunWithSignals runs the workers until SIGTERM or SIGINT (or ctx ends),
// then drains them: the first signal stops taking work and lets running
// handlers finish and ack (each worker's drain timeout); a second one
// means "now": the polls in flight are cut and running jobs released at
// once (Worker.StopNow). It returns when every worker's Run has returned:
// the first error among them (a worker refused for good stops the others
// too), else nil.
//
//	if err := onceq.RunWithSignals(context.Background(), worker); err != nil {
//		log.Fatal(err)
//	}
//
// A process killed with SIGKILL does none of this: its jobs come back to
// other workers when their leases end.
func RunWithSignals(ctx context.Context, workers ...*Worker) error {
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	defer signal.Stop(sigs)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errs := make(chan error, len(workers))
	for _, w := range workers {
		go func(w *Worker) { errs <- w.Run(ctx) }(w)
	}
	var first error
	for left, signals := len(workers), 0; left > 0; {
		select {
		case err := <-errs:
			left--
			if err != nil && first == nil {
				first = err
				cancel()
			}
		case sig := <-sigs:
			signals++
			for _, w := range workers {
				if signals == 1 {
					w.log.Printf("onceq worker %s: %v: stopping (running jobs get %v; a second signal stops at once)",
						w.owner, sig, w.drainTimeout)
					w.Stop()
				} else {
					w.StopNow()
				}
			}
		}
	}
	return first
}
