package onceq_test

// The Client against a real onceqd: every endpoint, typed results, typed
// errors, auth and TLS.

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"onceq"
)

func TestHealthVersionOpenAPIAndMetrics(t *testing.T) {
	e := newEnv(t, "health")
	h, err := e.c.Healthz(e.ctx)
	if err != nil || !h.OK || h.Status != "ok" {
		t.Fatalf("healthz %+v %v", h, err)
	}
	v, err := e.c.Version(e.ctx)
	if err != nil || v.Version == "" || v.Commit == "" {
		t.Fatalf("version %+v %v", v, err)
	}
	doc, err := e.c.OpenAPI(e.ctx)
	if err != nil || !strings.Contains(string(doc), `"openapi"`) {
		t.Fatalf("openapi %.100s %v", doc, err)
	}
	e.createTopic(onceq.TopicConfig{})
	e.produce("x", "")
	m, err := e.c.Metrics(e.ctx)
	if err != nil || !strings.Contains(m, e.topic) {
		t.Fatalf("metrics do not name the topic: %v", err)
	}
}

func TestTopicsAreCreatedListedDescribedAndDeleted(t *testing.T) {
	e := newEnv(t, "topics")
	cfg := onceq.TopicConfig{Partitions: 2, LeaseMS: 1500, MaxAttempts: 4, BackoffMS: 100,
		KeyTTLMS: onceq.Ptr(int64(0)), KeyHistory: true, KeyConflict: "supersede",
		Extra: map[string]any{"replay_window_ms": 60000}}
	created, err := e.c.CreateTopic(e.ctx, e.topic, cfg)
	if err != nil || created.Name != e.topic || created.Partitions != 2 || created.Status != "created" {
		t.Fatalf("created %+v %v", created, err)
	}
	if _, err := e.c.CreateTopic(e.ctx, e.topic, cfg); err != nil {
		t.Fatalf("creating it again with the same settings: %v", err)
	}
	_, err = e.c.CreateTopic(e.ctx, e.topic, onceq.TopicConfig{Partitions: 3})
	var conflict *onceq.Conflict
	var fenced *onceq.Fenced
	if !errors.As(err, &conflict) || errors.As(err, &fenced) || conflict.Code != "ALREADY_EXISTS" || conflict.Status != 409 {
		t.Fatalf("other settings: %#v", err)
	}
	names, err := e.c.ListTopics(e.ctx)
	if err != nil || !contains(names, e.topic) {
		t.Fatalf("list %v %v", names, err)
	}
	info, err := e.c.GetTopic(e.ctx, e.topic)
	s := info.Settings
	if err != nil || info.Partitions != 2 || s.LeaseMS != 1500 || s.MaxAttempts != 4 || s.BackoffMS != 100 ||
		s.KeyTTLMS != 0 || !s.KeyHistory || s.KeyConflict != "supersede" || s.ReplayWindowMS != 60000 ||
		string(s.Raw["lease_ms"]) != "1500" {
		t.Fatalf("get %+v %v", info, err)
	}
	if err := e.c.DeleteTopic(e.ctx, e.topic); err != nil {
		t.Fatal(err)
	}
	var nf *onceq.NotFound
	if _, err := e.c.GetTopic(e.ctx, e.topic); !errors.As(err, &nf) || nf.Status != 404 {
		t.Fatalf("get after delete: %#v", err)
	}
	if err := e.c.DeleteTopic(e.ctx, e.topic); !errors.As(err, &nf) {
		t.Fatalf("delete again: %#v", err)
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func TestProduceConsumeAndAckCommitTheResult(t *testing.T) {
	e := newEnv(t, "orders")
	e.createTopic(onceq.TopicConfig{Partitions: 2})
	r, err := e.c.Produce(e.ctx, e.topic, map[string]any{"order": 7}, onceq.WithKey("customer-42"),
		onceq.WithIdempotencyKey("charge:order-7"), onceq.WithTenant("acme"),
		onceq.WithHeaders(map[string]string{"trace-id": "4bf92f35"}), onceq.WithEnvelope("step_id", "charge-7"))
	if err != nil || r.Status != "produced" || r.Duplicate || r.MsgID == "" || r.Topic != e.topic {
		t.Fatalf("produce %+v %v", r, err)
	}
	got := e.consume("billing", "worker-1", 10, 2000)
	if len(got) != 1 {
		t.Fatalf("consumed %+v", got)
	}
	d := got[0]
	if d.Partition != r.Partition || d.Offset != r.Offset || d.Attempts != 1 || d.Key != "customer-42" ||
		d.Value != `{"order":7}` || d.IdempotencyKey != "charge:order-7" || d.Envelope["tenant_id"] != "acme" ||
		d.Envelope["msg_id"] != r.MsgID || d.FencingToken <= 0 || d.LeaseExpiresAtMS <= 0 {
		t.Fatalf("delivery %+v", d)
	}
	k, err := e.c.GetKey(e.ctx, e.topic, "billing", "charge:order-7", onceq.KeyOptions{TenantID: "acme"})
	if err != nil || k.State != "leased" || k.Owner != "worker-1" || k.FencingToken != d.FencingToken {
		t.Fatalf("leased key %+v %v", k, err)
	}
	if err := e.c.Ack(e.ctx, e.topic, "billing", "worker-1", d.AckItem(map[string]string{"charge_id": "ch_123"})); err != nil {
		t.Fatal(err)
	}
	// An ack repeated by its owner succeeds again.
	if err := e.c.Ack(e.ctx, e.topic, "billing", "worker-1", d.AckItem(nil)); err != nil {
		t.Fatalf("a repeated ack: %v", err)
	}
	k, err = e.c.GetKey(e.ctx, e.topic, "billing", "charge:order-7", onceq.KeyOptions{TenantID: "acme"})
	if err != nil || !k.Committed() || !jsonEq(k.Result, map[string]string{"charge_id": "ch_123"}) || k.CommittedAtMS == 0 {
		t.Fatalf("committed key %+v (%s) %v", k, k.Result, err)
	}
	// The same work produced again is auto-acked, never delivered.
	e.produce("again", "charge:order-7", onceq.WithTenant("acme"), onceq.WithKey("customer-42"))
	if again := e.consume("billing", "worker-1", 10, 300); len(again) != 0 {
		t.Fatalf("a committed key was delivered again: %+v", again)
	}
	// skip_if_committed stores nothing and answers the commit.
	s, err := e.c.Produce(e.ctx, e.topic, "third", onceq.WithIdempotencyKey("charge:order-7"),
		onceq.WithTenant("acme"), onceq.WithSkipIfCommitted("billing"))
	if err != nil || !s.AlreadyCommitted() || !jsonEq(s.Committed["billing"].Result, map[string]string{"charge_id": "ch_123"}) {
		t.Fatalf("skip_if_committed %+v %v", s, err)
	}
}

func TestErrorsAreTypedAndMatchableWithErrorsAs(t *testing.T) {
	e := newEnv(t, "errors")
	_, err := e.c.Produce(e.ctx, e.topic, "x") // no such topic
	var inv *onceq.InvalidArgument
	var api *onceq.APIError
	if !errors.As(err, &inv) || inv.Status != 400 || inv.Code != "INVALID_ARGUMENT" || inv.RequestID == "" {
		t.Fatalf("produce to an unknown topic: %#v", err)
	}
	if !errors.As(err, &api) || api.Code != "INVALID_ARGUMENT" || !strings.Contains(err.Error(), "INVALID_ARGUMENT (400)") {
		t.Fatalf("as *APIError: %#v", err)
	}
	e.createTopic(onceq.TopicConfig{})
	e.produce("x", "k")
	d := e.consume("g", "w1", 1, 2000)[0]
	err = e.c.Ack(e.ctx, e.topic, "g", "w2", d.AckItem(nil))
	var fenced *onceq.Fenced
	var conflict *onceq.Conflict
	if !errors.As(err, &fenced) || !errors.As(err, &conflict) || conflict.Code != "FAILED_PRECONDITION" {
		t.Fatalf("an ack by another owner: %#v", err)
	}
	stale := d.Ref()
	stale.FencingToken++
	if _, err := e.c.Extend(e.ctx, e.topic, "g", "w1", onceq.ExtendItem{Ref: stale, LeaseMS: 1000}); !errors.As(err, &fenced) {
		t.Fatalf("an extend with another token: %#v", err)
	}
	var nf *onceq.NotFound
	if _, err := e.c.Cluster(e.ctx); !errors.As(err, &nf) {
		t.Fatalf("cluster on a single node: %#v", err)
	}
	var bad *onceq.InvalidArgument
	ftp := onceq.NewClient("ftp://x")
	if err := ftp.Err(); !errors.As(err, &bad) {
		t.Fatalf("an ftp:// URL was accepted: %#v", err)
	}
	if _, err := ftp.Version(e.ctx); !errors.As(err, &bad) {
		t.Fatalf("a call on a client with an ftp:// URL: %#v", err)
	}
	if err := onceq.NewClient("http://x", onceq.WithHTTPClient(http.DefaultClient),
		onceq.WithTLSConfig(&tls.Config{})).Err(); !errors.As(err, &bad) {
		t.Fatal("WithHTTPClient and WithTLSConfig were accepted together")
	}
	down := newClient(t, "http://127.0.0.1:1", onceq.WithRetries(1))
	var te *onceq.TransportError
	if _, err := down.Version(e.ctx); !errors.As(err, &te) {
		t.Fatalf("no server: %#v", err)
	}
}

func TestBatchesAndAcksCarriedOnTheNextConsume(t *testing.T) {
	e := newEnv(t, "batch")
	e.createTopic(onceq.TopicConfig{})
	rs, err := e.c.ProduceBatch(e.ctx, e.topic, []onceq.Message{
		{Value: "a", IdempotencyKey: "ka"}, {Value: "b", Key: "k"}, {Value: map[string]int{"n": 3}, MsgID: "mine"},
	})
	if err != nil || len(rs) != 3 || rs[2].MsgID != "mine" || rs[0].MsgID == "" || rs[1].Offset != 1 {
		t.Fatalf("batch %+v %v", rs, err)
	}
	if _, err := e.c.ProduceBatch(e.ctx, e.topic, []onceq.Message{{Value: "x"}}, onceq.WithKey("k")); err == nil {
		t.Fatal("a per-message option was accepted by ProduceBatch")
	}
	first := e.consume("g", "w", 2, 2000)
	next, err := e.c.Consume(e.ctx, e.topic, "g", "w", onceq.ConsumeOptions{MaxMessages: 5, WaitMS: 1000,
		Acks: []onceq.AckItem{first[0].AckItem("done-a"), first[1].AckItem(nil)}})
	if err != nil || len(next.Acks) != 2 || !next.Acks[0].OK() || !next.Acks[1].OK() ||
		len(next.Messages) != 1 || next.Messages[0].Value != `{"n":3}` {
		t.Fatalf("consume with carried acks %+v %v", next, err)
	}
	if k := e.key("g", "ka"); !jsonEq(k.Result, "done-a") {
		t.Fatalf("carried ack's result %+v", k)
	}
	results, err := e.c.AckBatch(e.ctx, e.topic, "g", "w", []onceq.AckItem{
		next.Messages[0].AckItem(nil), {Ref: onceq.Ref{Partition: 0, Offset: 999}}})
	if err != nil || len(results) != 2 || !results[0].OK() || results[1].OK() || results[1].Error == "" {
		t.Fatalf("batch ack %+v %v", results, err)
	}
}

func TestNackRedeliversWithTheReasonAndExtendMovesTheLease(t *testing.T) {
	e := newEnv(t, "nack")
	e.createTopic(onceq.TopicConfig{LeaseMS: 5000})
	e.produce("x", "k")
	d := e.consume("g", "w", 1, 2000)[0]
	exp, err := e.c.Extend(e.ctx, e.topic, "g", "w", onceq.ExtendItem{Ref: d.Ref(), LeaseMS: 60000})
	if err != nil || exp < d.LeaseExpiresAtMS+50000 {
		t.Fatalf("extend to %d from %d: %v", exp, d.LeaseExpiresAtMS, err)
	}
	if err := e.c.Nack(e.ctx, e.topic, "g", "w", onceq.NackItem{Ref: d.Ref(), Reason: "gateway timeout",
		DelayMS: onceq.Ptr(int64(0))}); err != nil {
		t.Fatal(err)
	}
	again := e.consume("g", "w", 1, 2000)
	if len(again) != 1 || again[0].Attempts != 2 || again[0].LastError != "gateway timeout" ||
		again[0].FencingToken <= d.FencingToken {
		t.Fatalf("redelivery %+v", again)
	}
	// GetKey with WaitMS returns once another request commits the key.
	go func() {
		time.Sleep(200 * time.Millisecond)
		_ = e.c.Ack(context.Background(), e.topic, "g", "w", again[0].AckItem("late"))
	}()
	k, err := e.c.GetKey(e.ctx, e.topic, "g", "k", onceq.KeyOptions{WaitMS: 10000})
	if err != nil || !k.Committed() || !jsonEq(k.Result, "late") {
		t.Fatalf("waited key %+v %v", k, err)
	}
}

func TestStreamDeliversAsMessagesCome(t *testing.T) {
	e := newEnv(t, "stream")
	e.createTopic(onceq.TopicConfig{})
	s, err := e.c.Stream(e.ctx, e.topic, "g", "streamer", 10000)
	if err != nil {
		t.Fatal(err)
	}
	e.produce("one", "")
	e.produce("two", "")
	var values []string
	for len(values) < 2 && s.Next() {
		d := s.Delivery()
		values = append(values, d.Value)
		if err := e.c.Ack(e.ctx, e.topic, "g", "streamer", d.AckItem(nil)); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Logf("close: %v", err)
	}
	if s.Err() != nil || strings.Join(values, ",") != "one,two" {
		t.Fatalf("stream %v %v", values, s.Err())
	}
	if _, err := e.c.Stream(e.ctx, unique("missing"), "g", "o", 0); err == nil {
		t.Fatal("a stream of an unknown topic opened")
	}
}

func TestDeadLettersAreRedrivenAndTheKeyHistoryAndReplayTellWhatHappened(t *testing.T) {
	e := newEnv(t, "dlq")
	e.createTopic(onceq.TopicConfig{MaxAttempts: 1, KeyHistory: true, ReplayWindowMS: 600000})
	e.produce("x", "k")
	d := e.consume("g", "w", 1, 2000)[0]
	if err := e.c.Nack(e.ctx, e.topic, "g", "w", onceq.NackItem{Ref: d.Ref(), Reason: "broken"}); err != nil {
		t.Fatal(err)
	}
	if !waitUntil(5*time.Second, func() bool { return e.group("g").DeadLettered == 1 }) {
		t.Fatalf("not dead-lettered: %+v", e.group("g"))
	}
	events, err := e.c.KeyHistory(e.ctx, e.topic, "g", "k", "")
	if err != nil || len(events) < 2 || events[0].Event != "leased" || events[0].Owner != "w" {
		t.Fatalf("history %+v %v", events, err)
	}
	moved, err := e.c.Redrive(e.ctx, e.topic, 0)
	if err != nil || moved != 1 {
		t.Fatalf("redrive %d %v", moved, err)
	}
	back := e.consume("g", "w", 1, 2000)
	if len(back) != 1 || back[0].Value != "x" {
		t.Fatalf("after redrive %+v", back)
	}
	if err := e.c.Ack(e.ctx, e.topic, "g", "w", back[0].AckItem("ok")); err != nil {
		t.Fatal(err)
	}
	e.produce("no key", "")
	plain := e.consume("g", "w", 1, 2000)[0]
	if err := e.c.Ack(e.ctx, e.topic, "g", "w", plain.AckItem(nil)); err != nil {
		t.Fatal(err)
	}
	page, err := e.c.Replay(e.ctx, onceq.ReplayRequest{Topic: e.topic, Group: "g",
		Partition: onceq.Ptr(0), FromOffset: onceq.Ptr(int64(0)), ToOffset: onceq.Ptr(int64(100))})
	if err != nil || !page.DryRun || page.Replayed != 0 || page.Next != "" || page.Summary["would_deliver"] != 1 ||
		page.Summary["already_committed"] != 1 {
		t.Fatalf("replay dry run %+v %v", page, err)
	}
	applied, err := e.c.Replay(e.ctx, onceq.ReplayRequest{Topic: e.topic, Group: "g", Apply: true,
		Partition: onceq.Ptr(0), FromOffset: onceq.Ptr(int64(0)), ToOffset: onceq.Ptr(int64(100))})
	if err != nil || applied.DryRun || applied.Replayed != 1 {
		t.Fatalf("replay %+v %v", applied, err)
	}
	if again := e.consume("g", "w", 5, 2000); len(again) != 1 || again[0].Value != "no key" {
		t.Fatalf("replayed %+v", again)
	}
}

func TestTokensAreSentAndRefusalsTyped(t *testing.T) {
	dir := t.TempDir()
	auth := filepath.Join(dir, "auth.json")
	if err := os.WriteFile(auth, []byte(`{"tokens":[
		{"name":"ops","token":"ops-secret","scopes":["admin","produce","consume","metrics"],"topics":["*"]},
		{"name":"reader","token":"reader-secret","scopes":["consume"],"topics":["*"]}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	s := startOwnServer(t, "--auth-file", auth)
	ctx := context.Background()
	var un *onceq.Unauthorized
	if _, err := newClient(t, s.URL).ListTopics(ctx); !errors.As(err, &un) || un.Status != 401 {
		t.Fatalf("no token: %#v", err)
	}
	if _, err := newClient(t, s.URL, onceq.WithToken("wrong")).ListTopics(ctx); !errors.As(err, &un) {
		t.Fatalf("a wrong token: %#v", err)
	}
	ops := newClient(t, s.URL, onceq.WithToken("ops-secret"))
	if _, err := ops.CreateTopic(ctx, "audit", onceq.TopicConfig{}); err != nil {
		t.Fatal(err)
	}
	var fb *onceq.Forbidden
	if _, err := newClient(t, s.URL, onceq.WithToken("reader-secret")).Produce(ctx, "audit", "x"); !errors.As(err, &fb) || fb.Status != 403 {
		t.Fatalf("without the produce scope: %#v", err)
	}
	if _, err := ops.Produce(ctx, "audit", "x"); err != nil {
		t.Fatal(err)
	}
}

func TestHTTPSWithAPrivateCA(t *testing.T) {
	dir := t.TempDir()
	cert, key := selfSigned(t, dir)
	s := startOwnServer(t, "--tls-cert", cert, "--tls-key", key)
	ctx := context.Background()
	var te *onceq.TransportError
	if _, err := newClient(t, s.URL, onceq.WithRetries(0)).Version(ctx); !errors.As(err, &te) {
		t.Fatalf("an untrusted certificate: %#v", err)
	}
	c := newClient(t, s.URL, onceq.WithCAFile(cert))
	if _, err := c.CreateTopic(ctx, "tls", onceq.TopicConfig{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Produce(ctx, "tls", "over tls"); err != nil {
		t.Fatal(err)
	}
	got, err := c.Consume(ctx, "tls", "g", "w", onceq.ConsumeOptions{WaitMS: 1000})
	if err != nil || len(got.Messages) != 1 || got.Messages[0].Value != "over tls" {
		t.Fatalf("consume over TLS %+v %v", got, err)
	}
}

// selfSigned writes a certificate for 127.0.0.1 and its key; their paths.
func selfSigned(t *testing.T, dir string) (string, string) {
	priv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, IsCA: true, BasicConstraintsValid: true,
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &priv.PublicKey, priv)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	cert, key := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	write := func(path, kind string, b []byte) {
		if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: b}), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(cert, "CERTIFICATE", der)
	write(key, "PRIVATE KEY", keyDER)
	return cert, key
}
