package onceq_test

// Test support: real onceqd servers on ephemeral ports with fresh temp data
// dirs (the binary from $ONCEQD, else ../../build/cmd/onceqd), workers in
// subprocesses (this test binary run again, see TestMain), and helpers.

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"onceq"
)

// shared is the server most tests use (each with its own topics); TestMain
// starts it.
var shared *server

func TestMain(m *testing.M) {
	if os.Getenv(workerEnv) != "" {
		os.Exit(workerMain())
	}
	code := func() int {
		if _, err := onceqdBinary(); err != nil {
			fmt.Fprintln(os.Stderr, "onceq tests:", err)
			return m.Run() // every test skips
		}
		s, err := startServer()
		if err != nil {
			fmt.Fprintln(os.Stderr, "onceq tests:", err)
			return 1
		}
		defer s.stop()
		shared = s
		return m.Run()
	}()
	os.Exit(code)
}

func onceqdBinary() (string, error) {
	path := os.Getenv("ONCEQD")
	if path == "" {
		path = filepath.Join("..", "..", "build", "cmd", "onceqd")
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", err
	}
	if st, err := os.Stat(abs); err != nil || st.IsDir() || st.Mode()&0o111 == 0 {
		return "", fmt.Errorf("no onceqd binary at %s (set ONCEQD)", abs)
	}
	return abs, nil
}

// server is one onceqd process, killed by its own pid.
type server struct {
	URL  string
	Port string
	root string
	cmd  *exec.Cmd
	log  *os.File
}

const ready = "onceqd listening on "

func startServer(extra ...string) (*server, error) {
	bin, err := onceqdBinary()
	if err != nil {
		return nil, err
	}
	root, err := os.MkdirTemp("", "onceq-go-")
	if err != nil {
		return nil, err
	}
	s := &server{root: root}
	if s.log, err = os.Create(filepath.Join(root, "server.log")); err != nil {
		return nil, err
	}
	args := append([]string{"--listen", "127.0.0.1:0", "--data-dir", filepath.Join(root, "data"),
		"--fsync", "none", "--log-level", "warn"}, extra...)
	s.cmd = exec.Command(bin, args...)
	s.cmd.Stderr = s.log
	s.cmd.SysProcAttr = dieWithParent()
	out, err := s.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := s.cmd.Start(); err != nil {
		return nil, err
	}
	lines := make(chan string, 1)
	go func() {
		r := bufio.NewReader(out)
		line, _ := r.ReadString('\n')
		lines <- strings.TrimSpace(line)
		_, _ = io.Copy(io.Discard, r) // the server never blocks on stdout
	}()
	var line string
	select {
	case line = <-lines:
	case <-time.After(20 * time.Second):
	}
	if !strings.HasPrefix(line, ready) {
		s.stop()
		return nil, fmt.Errorf("onceqd did not start: %q; log:\n%s", line, s.logTail())
	}
	addr := strings.TrimPrefix(line, ready)
	s.Port = addr[strings.LastIndex(addr, ":")+1:]
	scheme := "http"
	for _, a := range extra {
		if a == "--tls-cert" {
			scheme = "https"
		}
	}
	s.URL = scheme + "://127.0.0.1:" + s.Port
	return s, nil
}

func (s *server) logTail() string {
	b, _ := os.ReadFile(filepath.Join(s.root, "server.log"))
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

func (s *server) stop() {
	if s.cmd != nil && s.cmd.Process != nil {
		_ = s.cmd.Process.Kill()
		_ = s.cmd.Wait()
	}
	s.log.Close()
	os.RemoveAll(s.root)
}

// startOwnServer starts a server for one test (auth, TLS), stopped at its end.
func startOwnServer(t *testing.T, extra ...string) *server {
	t.Helper()
	needServer(t)
	s, err := startServer(extra...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.stop)
	return s
}

func needServer(t *testing.T) {
	t.Helper()
	if _, err := onceqdBinary(); err != nil {
		t.Skip(err)
	}
}

// env is one test's client of the shared server and its topic.
type env struct {
	t     *testing.T
	c     *onceq.Client
	topic string
	ctx   context.Context
}

func newEnv(t *testing.T, prefix string) *env {
	t.Helper()
	needServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return &env{t: t, c: newClient(t, shared.URL), topic: unique(prefix), ctx: ctx}
}

func newClient(t *testing.T, url string, opts ...onceq.Option) *onceq.Client {
	t.Helper()
	c := onceq.NewClient(url, opts...)
	if err := c.Err(); err != nil {
		t.Fatal(err)
	}
	return c
}

func unique(prefix string) string {
	var b [5]byte
	_, _ = rand.Read(b[:])
	return prefix + "-" + hex.EncodeToString(b[:])
}

// createTopic creates e.topic with cfg.
func (e *env) createTopic(cfg onceq.TopicConfig) {
	e.t.Helper()
	if _, err := e.c.CreateTopic(e.ctx, e.topic, cfg); err != nil {
		e.t.Fatal(err)
	}
}

// produce produces value with the key as idempotency key.
func (e *env) produce(value, key string, opts ...onceq.ProduceOption) onceq.ProduceResult {
	e.t.Helper()
	if key != "" {
		opts = append(opts, onceq.WithIdempotencyKey(key))
	}
	r, err := e.c.Produce(e.ctx, e.topic, value, opts...)
	if err != nil {
		e.t.Fatal(err)
	}
	return r
}

// produceN produces "m0".."m<n-1>" with the keys "k0".."k<n-1>".
func (e *env) produceN(n int) {
	e.t.Helper()
	for i := 0; i < n; i++ {
		e.produce(fmt.Sprintf("m%d", i), fmt.Sprintf("k%d", i))
	}
}

func (e *env) key(group, key string) onceq.KeyState {
	e.t.Helper()
	k, err := e.c.GetKey(e.ctx, e.topic, group, key, onceq.KeyOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	return k
}

func (e *env) group(group string) onceq.GroupCounters {
	e.t.Helper()
	info, err := e.c.GetTopic(e.ctx, e.topic)
	if err != nil {
		e.t.Fatal(err)
	}
	return info.Groups[group]
}

// consume takes up to max deliveries, waiting up to waitMS.
func (e *env) consume(group, owner string, max, waitMS int) []onceq.Delivery {
	e.t.Helper()
	r, err := e.c.Consume(e.ctx, e.topic, group, owner, onceq.ConsumeOptions{MaxMessages: max, WaitMS: waitMS})
	if err != nil {
		e.t.Fatal(err)
	}
	return r.Messages
}

// committed waits up to timeout for the key to be committed.
func (e *env) committed(group, key string, timeout time.Duration) onceq.KeyState {
	e.t.Helper()
	k, err := e.c.GetKey(e.ctx, e.topic, group, key, onceq.KeyOptions{WaitMS: int(timeout.Milliseconds())})
	if err != nil {
		e.t.Fatal(err)
	}
	if !k.Committed() {
		e.t.Fatalf("key %q not committed within %v: %+v", key, timeout, k)
	}
	return k
}

// waitUntil polls pred every 20 ms for up to timeout.
func waitUntil(timeout time.Duration, pred func() bool) bool {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if pred() {
			return true
		}
		time.Sleep(20 * time.Millisecond)
	}
	return pred()
}

// startWorker runs w until the returned stop is called (or the test ends);
// stop cancels Run's context and waits for Run to return its error.
func startWorker(t *testing.T, w *onceq.Worker) (stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	var once sync.Once
	var err error
	stop = func() error {
		once.Do(func() {
			cancel()
			select {
			case err = <-done:
			case <-time.After(30 * time.Second):
				t.Errorf("Worker.Run did not return")
			}
		})
		return err
	}
	t.Cleanup(func() { _ = stop() })
	return stop
}

// jsonEq tells whether the raw JSON equals want's JSON.
func jsonEq(raw json.RawMessage, want any) bool {
	var got, exp any
	b, _ := json.Marshal(want)
	return json.Unmarshal(raw, &got) == nil && json.Unmarshal(b, &exp) == nil && fmt.Sprint(got) == fmt.Sprint(exp)
}

// quiet is a Logger that keeps what the worker logs, for assertions.
type quiet struct {
	mu    sync.Mutex
	lines []string
}

func (q *quiet) Printf(format string, args ...any) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.lines = append(q.lines, fmt.Sprintf(format, args...))
	if os.Getenv("ONCEQ_TEST_LOGS") != "" {
		fmt.Fprintf(os.Stderr, format+"\n", args...)
	}
}

func (q *quiet) contains(s string) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, l := range q.lines {
		if strings.Contains(l, s) {
			return true
		}
	}
	return false
}
