// Orders paid through a (simulated) payment API, with a worker killed
// mid-payment: nobody is charged twice.
//
//	go run ./examples/payments demo [--url http://127.0.0.1:8080]
//
// runs the whole story against a running onceqd: it starts a fake payment
// API (which, like Stripe's, remembers each Idempotency-Key), produces five
// orders and a duplicate, starts a worker, kills it with SIGKILL in the
// middle of a payment (after the API charged the card, before the worker
// heard back), starts a second worker, and prints the ledger.
//
//	go run ./examples/payments worker --url URL --payments URL --topic T
//
// is one worker (what you would deploy); the demo runs it as a subprocess
// (this program again).
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"os/exec"
	"sort"
	"sync"
	"syscall"
	"time"

	"onceq"
)

const group = "billing"

type order struct {
	OrderID     string `json:"order_id"`
	Customer    string `json:"customer"`
	AmountCents int    `json:"amount_cents"`
}

type charge struct {
	ChargeID string `json:"charge_id"`
	order
}

// -- the worker ----------------------------------------------------------------

// chargeCard POSTs /charges to the payment API, with the key that makes it
// safe to repeat.
func chargeCard(ctx context.Context, paymentsURL string, o order, idempotencyKey string) (charge, error) {
	body, _ := json.Marshal(o)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, paymentsURL+"/charges", bytes.NewReader(body))
	if err != nil {
		return charge{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", idempotencyKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return charge{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return charge{}, fmt.Errorf("payment API answered %s", resp.Status)
	}
	var c charge
	return c, json.NewDecoder(resp.Body).Decode(&c)
}

func runWorker(url, paymentsURL, topic, name string) error {
	client := onceq.NewClient(url)
	if err := client.Err(); err != nil {
		return err
	}
	opts := []onceq.WorkerOption{onceq.WithWait(time.Second)}
	if name != "" {
		opts = append(opts, onceq.WithOwner(name))
	}
	worker := onceq.NewWorker(client, topic, group, opts...)
	name = worker.Owner()
	worker.Handle(func(ctx context.Context, job *onceq.Job) (any, error) {
		var o order
		if err := job.JSON(&o); err != nil {
			return nil, onceq.Fail("not an order: " + err.Error())
		}
		fmt.Printf("  %s: paying %s (attempt %d)\n", name, o.OrderID, job.Attempts)
		// The payment is the side effect that must not happen twice: the
		// message's idempotency key goes to the payment API, so a
		// redelivery after a crash replays the first charge.
		key := job.IdempotencyKey
		if key == "" {
			key = job.StepID()
		}
		c, err := chargeCard(ctx, paymentsURL, o, key)
		if err != nil {
			return nil, err
		}
		return map[string]string{"charge_id": c.ChargeID}, nil
	})
	err := onceq.RunWithSignals(context.Background(), worker)
	fmt.Printf("  %s: stopped (%d acked)\n", name, worker.Stats().Acked)
	return err
}

// -- the fake payment API -----------------------------------------------------------

// paymentAPI charges once per Idempotency-Key and kills the first worker
// mid-payment.
type paymentAPI struct {
	mu       sync.Mutex
	charges  map[string]charge // idempotency key -> charge
	attempts []string
	killOn   string
	victim   *exec.Cmd
	killed   chan struct{}
	url      string
}

func (api *paymentAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	key := r.Header.Get("Idempotency-Key")
	var o order
	if err := json.NewDecoder(r.Body).Decode(&o); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	api.mu.Lock()
	api.attempts = append(api.attempts, o.OrderID)
	c, replay := api.charges[key]
	if !replay {
		c = charge{ChargeID: fmt.Sprintf("ch_%d", len(api.charges)+1), order: o}
		api.charges[key] = c
	}
	kill := o.OrderID == api.killOn && api.victim != nil
	if kill {
		api.killOn = "" // once
	}
	api.mu.Unlock()
	if replay {
		fmt.Printf("[payments] %s: key %s seen before -> %s replayed, card NOT charged again\n", o.OrderID, key, c.ChargeID)
	} else {
		fmt.Printf("[payments] %s: charged $%.2f -> %s\n", o.OrderID, float64(o.AmountCents)/100, c.ChargeID)
	}
	if kill {
		fmt.Printf("[payments] ...and worker pid %d is killed (SIGKILL) before it hears back\n", api.victim.Process.Pid)
		_ = api.victim.Process.Kill()
		_ = api.victim.Wait()
		close(api.killed)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(c)
}

// -- the demo -----------------------------------------------------------------

func demo(url string) error {
	ctx := context.Background()
	client := onceq.NewClient(url)
	if err := client.Err(); err != nil {
		return err
	}
	topic := fmt.Sprintf("orders-demo-%d", os.Getpid())
	// A short lease so that the killed worker's payment comes back in 2 s.
	if _, err := client.CreateTopic(ctx, topic, onceq.TopicConfig{Partitions: 1, LeaseMS: 2000}); err != nil {
		return err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	api := &paymentAPI{charges: map[string]charge{}, killOn: "order-3", killed: make(chan struct{}),
		url: "http://" + ln.Addr().String()}
	go func() { _ = http.Serve(ln, api) }()
	fmt.Printf("payment API on %s; onceq at %s; topic %s\n", api.url, url, topic)

	var orders []order
	for i := 1; i <= 5; i++ {
		o := order{OrderID: fmt.Sprintf("order-%d", i), Customer: fmt.Sprintf("customer-%d", i), AmountCents: 1000 * i}
		orders = append(orders, o)
		if _, err := client.Produce(ctx, topic, o, onceq.WithKey(o.Customer),
			onceq.WithIdempotencyKey("charge:"+o.OrderID)); err != nil {
			return err
		}
	}
	// A double click: order-2 again.
	if _, err := client.Produce(ctx, topic, orders[1], onceq.WithKey(orders[1].Customer),
		onceq.WithIdempotencyKey("charge:order-2")); err != nil {
		return err
	}
	fmt.Printf("produced %d orders and a duplicate of order-2\n", len(orders))

	self, err := os.Executable()
	if err != nil {
		return err
	}
	start := func(name string) (*exec.Cmd, error) {
		cmd := exec.Command(self, "worker", "--url", url, "--payments", api.url, "--topic", topic, "--name", name)
		cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
		return cmd, cmd.Start()
	}
	api.mu.Lock()
	first, err := start("worker-1")
	api.victim = first
	api.mu.Unlock()
	if err != nil {
		return err
	}
	select {
	case <-api.killed:
	case <-time.After(30 * time.Second):
		_ = first.Process.Kill()
		return errors.New("the first worker never reached order-3")
	}
	second, err := start("worker-2")
	if err != nil {
		return err
	}
	for _, o := range orders {
		k, err := client.GetKey(ctx, topic, group, "charge:"+o.OrderID, onceq.KeyOptions{WaitMS: 20000})
		if err == nil && !k.Committed() {
			err = fmt.Errorf("%s not committed: %+v", o.OrderID, k)
		}
		if err != nil {
			_ = second.Process.Kill()
			return err
		}
	}
	_ = second.Process.Signal(syscall.SIGTERM)
	_ = second.Wait()

	fmt.Println("\nledger (payment API):")
	api.mu.Lock()
	defer api.mu.Unlock()
	var ledger []charge
	for _, c := range api.charges {
		ledger = append(ledger, c)
	}
	sort.Slice(ledger, func(i, j int) bool { return ledger[i].ChargeID < ledger[j].ChargeID })
	perOrder := map[string]int{}
	for _, c := range ledger {
		perOrder[c.OrderID]++
		fmt.Printf("  %s  %s  $%.2f\n", c.ChargeID, c.OrderID, float64(c.AmountCents)/100)
	}
	info, err := client.GetTopic(ctx, topic)
	if err != nil {
		return err
	}
	g := info.Groups[group]
	fmt.Printf("payment attempts: %d (order-3 twice: once by the killed worker, once replayed)\n", len(api.attempts))
	fmt.Printf("onceq: acked %d, duplicates auto-acked %d, redelivered %d\n", g.Acked, g.AutoAcked, g.Redelivered)
	if err := client.DeleteTopic(ctx, topic); err != nil {
		return err
	}
	for id, n := range perOrder {
		if n > 1 {
			return fmt.Errorf("%s charged %d times", id, n)
		}
	}
	if len(perOrder) != len(orders) {
		return fmt.Errorf("charged orders %v, want %d", perOrder, len(orders))
	}
	fmt.Printf("OK: %d orders, %d charges: nobody was charged twice\n", len(orders), len(api.charges))
	return nil
}

func main() {
	log.SetFlags(0)
	if len(os.Args) < 2 || (os.Args[1] != "demo" && os.Args[1] != "worker") {
		log.Fatal("usage: payments demo [--url URL] | payments worker --url URL --payments URL --topic T [--name N]")
	}
	fs := flag.NewFlagSet(os.Args[1], flag.ExitOnError)
	defaultURL := os.Getenv("ONCEQ_URL")
	if defaultURL == "" {
		defaultURL = "http://127.0.0.1:8080"
	}
	url := fs.String("url", defaultURL, "onceq server")
	payments := fs.String("payments", "", "payment API (worker)")
	topic := fs.String("topic", "", "topic (worker)")
	name := fs.String("name", "", "worker name (default: host-pid)")
	_ = fs.Parse(os.Args[2:])
	var err error
	if os.Args[1] == "demo" {
		err = demo(*url)
	} else {
		err = runWorker(*url, *payments, *topic, *name)
	}
	if err != nil {
		log.Fatal("FAIL: ", err)
	}
}
