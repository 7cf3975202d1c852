package onceq_test

// Workers as real processes: kill -9 mid-handler, and signals draining. The
// worker process is this test binary run again with workerEnv set: TestMain
// then runs workerMain instead of the tests.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"testing"
	"time"

	"onceq"
)

const workerEnv = "ONCEQ_GO_TEST_WORKER"

// workerConfig is what a worker process runs.
type workerConfig struct {
	URL, Topic, Group, Owner string
	SleepMS                  int // how long each handler runs
	WaitMS                   int
}

// workerMain is a worker process: onceq.RunWithSignals, printing one JSON
// event per line.
func workerMain() int {
	var cfg workerConfig
	if err := json.Unmarshal([]byte(os.Getenv(workerEnv)), &cfg); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	emit := func(event string, fields map[string]any) {
		fields["event"] = event
		b, _ := json.Marshal(fields)
		os.Stdout.Write(append(b, '\n'))
	}
	client := onceq.NewClient(cfg.URL)
	if err := client.Err(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	w := onceq.NewWorker(client, cfg.Topic, cfg.Group, onceq.WithOwner(cfg.Owner),
		onceq.WithWait(time.Duration(cfg.WaitMS)*time.Millisecond))
	w.Handle(func(ctx context.Context, job *onceq.Job) (any, error) {
		emit("started", map[string]any{"offset": job.Offset, "attempts": job.Attempts,
			"token": job.FencingToken(), "key": job.IdempotencyKey, "value": job.Value})
		end := time.Now().Add(time.Duration(cfg.SleepMS) * time.Millisecond)
		for time.Now().Before(end) && ctx.Err() == nil {
			time.Sleep(20 * time.Millisecond)
		}
		emit("finished", map[string]any{"offset": job.Offset, "lease_lost": job.LeaseLost(), "stopping": job.Stopping()})
		return map[string]any{"by": cfg.Owner, "offset": job.Offset}, nil
	})
	emit("ready", map[string]any{"owner": w.Owner()})
	err := onceq.RunWithSignals(context.Background(), w)
	s := w.Stats()
	emit("stopped", map[string]any{"acked": s.Acked, "received": s.Received, "released": s.Released,
		"extended": s.Extended, "stale": s.Stale, "error": fmt.Sprint(err)})
	if err != nil {
		return 1
	}
	return 0
}

// workerProc is a worker process seen from the test.
type workerProc struct {
	t      *testing.T
	cmd    *exec.Cmd
	stderr bytes.Buffer
	mu     sync.Mutex
	cond   *sync.Cond
	events []map[string]any
	exited chan struct{}
}

func startWorkerProc(t *testing.T, cfg workerConfig) *workerProc {
	t.Helper()
	if cfg.WaitMS == 0 {
		cfg.WaitMS = 1000
	}
	b, _ := json.Marshal(cfg)
	p := &workerProc{t: t, exited: make(chan struct{})}
	p.cond = sync.NewCond(&p.mu)
	p.cmd = exec.Command(os.Args[0])
	p.cmd.Env = append(os.Environ(), workerEnv+"="+string(b))
	p.cmd.Stderr = &p.stderr
	p.cmd.SysProcAttr = dieWithParent()
	out, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		lines := bufio.NewScanner(out)
		for lines.Scan() {
			var e map[string]any
			if json.Unmarshal(lines.Bytes(), &e) == nil {
				p.mu.Lock()
				p.events = append(p.events, e)
				p.cond.Broadcast()
				p.mu.Unlock()
			}
		}
		_ = p.cmd.Wait()
		close(p.exited)
		p.mu.Lock()
		p.cond.Broadcast()
		p.mu.Unlock()
	}()
	t.Cleanup(p.kill)
	return p
}

// event waits up to timeout for the first event of that kind.
func (p *workerProc) event(kind string, timeout time.Duration) map[string]any {
	p.t.Helper()
	deadline := time.Now().Add(timeout)
	timer := time.AfterFunc(timeout, func() {
		p.mu.Lock()
		p.cond.Broadcast()
		p.mu.Unlock()
	})
	defer timer.Stop()
	p.mu.Lock()
	defer p.mu.Unlock()
	for {
		for _, e := range p.events {
			if e["event"] == kind {
				return e
			}
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("no %q event within %v; events %v; stderr %s", kind, timeout, p.events, p.stderr.String())
		}
		p.cond.Wait()
	}
}

// started lists the offsets of the "started" events.
func (p *workerProc) started() []float64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	var offsets []float64
	for _, e := range p.events {
		if e["event"] == "started" {
			offsets = append(offsets, e["offset"].(float64))
		}
	}
	return offsets
}

func (p *workerProc) signal(sig syscall.Signal) {
	_ = p.cmd.Process.Signal(sig)
}

// wait waits up to timeout for the process to exit; its exit code.
func (p *workerProc) wait(timeout time.Duration) int {
	p.t.Helper()
	select {
	case <-p.exited:
		return p.cmd.ProcessState.ExitCode()
	case <-time.After(timeout):
		p.t.Fatalf("the worker did not exit within %v; stderr %s", timeout, p.stderr.String())
		return -1
	}
}

// kill sends SIGKILL (mid-handler: no ack, no nack, no release).
func (p *workerProc) kill() {
	_ = p.cmd.Process.Kill()
	<-p.exited
}

// billingWorker starts a worker process of e.topic in group "billing"
// whose handlers run sleepMS each.
func (e *env) billingWorker(owner string, sleepMS int) *workerProc {
	return startWorkerProc(e.t, workerConfig{URL: shared.URL, Topic: e.topic, Group: "billing", Owner: owner, SleepMS: sleepMS})
}

// oneJobWorker produces one message with key "k" and starts a worker
// process whose handler runs sleepMS; it returns once the handler started.
func (e *env) oneJobWorker(owner string, sleepMS int) *workerProc {
	e.createTopic(onceq.TopicConfig{})
	e.produce("m", "k")
	w := e.billingWorker(owner, sleepMS)
	w.event("started", 15*time.Second)
	return w
}

func TestAWorkerKilledMidHandlerIsReplacedAndTheKeyCommittedOnce(t *testing.T) {
	e := newEnv(t, "orders")
	e.createTopic(onceq.TopicConfig{LeaseMS: 1000})
	e.produce("order 7", "charge:order-7")
	a := e.billingWorker("worker-a", 60000)
	first := a.event("started", 15*time.Second)
	if first["attempts"] != 1.0 {
		t.Fatalf("first delivery: %v", first)
	}
	a.kill()
	if status, ok := a.cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || status.Signal() != syscall.SIGKILL {
		t.Fatalf("worker-a was not killed by SIGKILL: %v", a.cmd.ProcessState)
	}
	// The same work produced again meanwhile (a duplicate upstream).
	e.produce("order 7 again", "charge:order-7")

	b := e.billingWorker("worker-b", 0)
	second := b.event("started", 15*time.Second)
	if second["offset"] != first["offset"] || second["attempts"] != 2.0 {
		t.Fatalf("redelivery %v after %v", second, first)
	}
	if second["token"].(float64) <= first["token"].(float64) {
		t.Fatalf("the redelivery's fencing token %v is not above %v", second["token"], first["token"])
	}
	k := e.committed("billing", "charge:order-7", 10*time.Second)
	if k.Owner != "worker-b" || k.Attempts != 2 || !jsonEq(k.Result, map[string]any{"by": "worker-b", "offset": 0}) {
		t.Fatalf("committed %+v (result %s)", k, k.Result)
	}
	// The duplicate is never delivered: auto-acked by the committed key.
	if !waitUntil(5*time.Second, func() bool { return e.group("billing").AutoAcked == 1 }) {
		t.Fatalf("the duplicate was not auto-acked: %+v", e.group("billing"))
	}
	if got := b.started(); len(got) != 1 || got[0] != 0 {
		t.Fatalf("worker-b ran offsets %v, want [0]", got)
	}
	if g := e.group("billing"); g.Acked != 1 || g.AutoAcked != 1 || g.Backlog != 0 || g.Inflight != 0 {
		t.Fatalf("group counters %+v", g)
	}
}

func TestSIGTERMFinishesTheRunningHandlerThenExits(t *testing.T) {
	e := newEnv(t, "orders")
	e.createTopic(onceq.TopicConfig{})
	e.produceN(3)
	w := e.billingWorker("worker-t", 1500)
	w.event("started", 15*time.Second)
	w.signal(syscall.SIGTERM)
	if code := w.wait(15 * time.Second); code != 0 {
		t.Fatalf("exit code %d; stderr %s", code, w.stderr.String())
	}
	finished := w.event("finished", time.Second)
	if finished["offset"] != 0.0 || finished["stopping"] != true || finished["lease_lost"] != false {
		t.Fatalf("finished %v", finished)
	}
	stopped := w.event("stopped", time.Second)
	if stopped["acked"] != 1.0 || stopped["received"] != 1.0 || stopped["released"] != 0.0 {
		t.Fatalf("stopped %v", stopped)
	}
	if got := w.started(); len(got) != 1 {
		t.Fatalf("started %v after SIGTERM, want one job", got)
	}
	if !e.key("billing", "k0").Committed() {
		t.Fatal("the running job was not acked before exit")
	}
	if g := e.group("billing"); g.Acked != 1 || g.Backlog != 2 || g.Inflight != 0 {
		t.Fatalf("group counters %+v", g)
	}
}

func TestSIGINTDrainsToo(t *testing.T) {
	e := newEnv(t, "orders")
	w := e.oneJobWorker("worker-i", 500)
	w.signal(syscall.SIGINT)
	if code := w.wait(15 * time.Second); code != 0 {
		t.Fatalf("exit code %d", code)
	}
	if !e.key("billing", "k").Committed() {
		t.Fatal("not committed")
	}
}

func TestASecondSignalReleasesRunningJobsAtOnce(t *testing.T) {
	e := newEnv(t, "orders")
	w := e.oneJobWorker("worker-2x", 60000)
	w.signal(syscall.SIGTERM) // drain: the handler has 30 s to finish
	time.Sleep(300 * time.Millisecond)
	t0 := time.Now()
	w.signal(syscall.SIGTERM) // now
	if code := w.wait(10 * time.Second); code != 0 {
		t.Fatalf("exit code %d", code)
	}
	if d := time.Since(t0); d > 5*time.Second {
		t.Fatalf("the second signal took %v", d)
	}
	if stopped := w.event("stopped", time.Second); stopped["released"] != 1.0 {
		t.Fatalf("stopped %v", stopped)
	}
	d := e.consume("billing", "other", 1, 2000)
	if len(d) != 1 || d[0].Attempts != 2 || d[0].LastError != "worker stopped before the handler finished" {
		t.Fatalf("after release: %+v", d)
	}
}
