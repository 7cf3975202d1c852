package onceq

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"
)

// Version is this client's version, sent in its User-Agent.
const Version = "0.1.0"

// Client is a client of one onceqd server (or of any node of a cluster):
// one method per endpoint of docs/API.md.
//
// A Client is safe for concurrent use by any number of goroutines; it keeps
// its connections alive (net/http's pool).
//
// Retries: 429 and 503 answers are retried up to WithRetries times after the
// server's Retry-After (at most WithMaxRetryWait each); so are network
// errors, except on a produce sent WithoutDedup (without a dedup id a
// retried produce could be stored twice). Every other error is returned at
// once, as its type (*NotFound, *Fenced, ...: see APIError).
type Client struct {
	base         string // scheme://host[:port][/prefix], no trailing slash
	hc           *http.Client
	token        string
	timeout      time.Duration
	retries      int
	maxRetryWait time.Duration
	err          error // a URL or option NewClient could not use (Err)
}

// Option configures NewClient.
type Option func(*clientOptions)

type clientOptions struct {
	token        string
	tlsConfig    *tls.Config
	caFile       string
	httpClient   *http.Client
	timeout      time.Duration
	retries      int
	maxRetryWait time.Duration
}

// WithToken sends "Authorization: Bearer <token>" on every request (a
// server started with --auth-file; docs/SECURITY.md).
func WithToken(token string) Option { return func(o *clientOptions) { o.token = token } }

// WithTLSConfig sets the TLS configuration of https:// URLs (a private CA in
// RootCAs, a client certificate, ...). Not with WithHTTPClient: configure
// that client's transport instead.
func WithTLSConfig(cfg *tls.Config) Option { return func(o *clientOptions) { o.tlsConfig = cfg } }

// WithCAFile trusts the PEM certificates of path (a private CA, or the
// server's self-signed certificate) for https:// URLs, in addition to
// WithTLSConfig's RootCAs if any.
func WithCAFile(path string) Option { return func(o *clientOptions) { o.caFile = path } }

// WithHTTPClient sends every request through hc (your transport, proxy,
// tracing, TLS). The client sets its own per-request timeouts through the
// request's context; hc.Timeout, if set, must exceed the longest long poll.
func WithHTTPClient(hc *http.Client) Option { return func(o *clientOptions) { o.httpClient = hc } }

// WithTimeout bounds each attempt of a request, on top of its long-poll
// wait (consume's WaitMS, GetKey's WaitMS). Default: 30 s. Streams
// (Client.Stream) have none.
func WithTimeout(d time.Duration) Option { return func(o *clientOptions) { o.timeout = d } }

// WithRetries sets how many times a 429, a 503 or a network error is
// retried before it is returned. Default: 3; 0 retries nothing.
func WithRetries(n int) Option { return func(o *clientOptions) { o.retries = n } }

// WithMaxRetryWait caps the wait before each retry. Default: 5 s.
func WithMaxRetryWait(d time.Duration) Option {
	return func(o *clientOptions) { o.maxRetryWait = d }
}

// NewClient makes a client of the server at baseURL ("http://127.0.0.1:8080",
// "https://onceq.internal"; a path prefix is kept). It connects to nothing
// yet: the first request does.
//
// A URL or option it cannot use does not panic: the client answers every
// call with an *InvalidArgument naming it, and Err returns it at once, for
// programs that want to fail at start:
//
//	client := onceq.NewClient(url, onceq.WithCAFile("ca.pem"))
//	if err := client.Err(); err != nil {
//		log.Fatal(err)
//	}
func NewClient(baseURL string, opts ...Option) *Client {
	c, err := newClient(baseURL, opts...)
	if err != nil {
		return &Client{hc: http.DefaultClient, err: &InvalidArgument{APIError{
			Code: "INVALID_ARGUMENT", Message: err.Error()}}}
	}
	return c
}

// Err is the reason NewClient could not use its URL or options (an
// *InvalidArgument), or nil for a usable client.
func (c *Client) Err() error { return c.err }

func newClient(baseURL string, opts ...Option) (*Client, error) {
	o := clientOptions{timeout: 30 * time.Second, retries: 3, maxRetryWait: 5 * time.Second}
	for _, opt := range opts {
		opt(&o)
	}
	u, err := url.Parse(baseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("onceq: expected an http:// or https:// URL, got %q", baseURL)
	}
	if o.retries < 0 || o.timeout <= 0 {
		return nil, errors.New("onceq: WithRetries needs n >= 0 and WithTimeout d > 0")
	}
	hc := o.httpClient
	if hc != nil && (o.tlsConfig != nil || o.caFile != "") {
		return nil, errors.New("onceq: WithTLSConfig/WithCAFile and WithHTTPClient: set TLS on your http.Client's transport")
	}
	if hc == nil {
		tlsConfig, err := o.tls()
		if err != nil {
			return nil, err
		}
		t := http.DefaultTransport.(*http.Transport).Clone()
		// A worker runs a long poll, its handlers' acks and its extends
		// at once: keep more than net/http's two idle connections.
		t.MaxIdleConnsPerHost = 64
		t.TLSClientConfig = tlsConfig
		hc = &http.Client{Transport: t}
	}
	return &Client{
		base:         strings.TrimRight(u.Scheme+"://"+u.Host+u.EscapedPath(), "/"),
		hc:           hc,
		token:        o.token,
		timeout:      o.timeout,
		retries:      o.retries,
		maxRetryWait: o.maxRetryWait,
	}, nil
}

func (o *clientOptions) tls() (*tls.Config, error) {
	if o.caFile == "" {
		return o.tlsConfig, nil
	}
	pem, err := os.ReadFile(o.caFile)
	if err != nil {
		return nil, fmt.Errorf("onceq: WithCAFile: %w", err)
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if o.tlsConfig != nil {
		cfg = o.tlsConfig.Clone()
	}
	if cfg.RootCAs == nil {
		cfg.RootCAs = x509.NewCertPool()
	}
	if !cfg.RootCAs.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("onceq: WithCAFile: no PEM certificate in %s", o.caFile)
	}
	return cfg, nil
}

// CloseIdleConnections closes the kept-alive connections that are idle;
// the client stays usable.
func (c *Client) CloseIdleConnections() { c.hc.CloseIdleConnections() }

// URL is the base URL the client sends its requests to.
func (c *Client) URL() string { return c.base }

// call is one request of the API.
type call struct {
	method, path string
	query        url.Values
	body         any           // sent as JSON; nil: no body
	wait         time.Duration // the long poll's wait, added to the timeout
	noRetryNet   bool          // a network error may have stored it: not retried
}

func (k *call) op() string { return k.method + " " + k.path }

// response is an answer of any status, its body read.
type response struct {
	status int
	header http.Header
	body   []byte
}

// do sends the call, retrying 429, 503 and network errors, and returns a
// 2xx answer or the typed error.
func (c *Client) do(ctx context.Context, k call) (*response, error) {
	if c.err != nil {
		return nil, c.err
	}
	var data []byte
	if k.body != nil {
		var err error
		if data, err = json.Marshal(k.body); err != nil {
			return nil, fmt.Errorf("onceq: %s: the body is not JSON: %w", k.op(), err)
		}
	}
	for attempt := 0; ; attempt++ {
		resp, err := c.once(ctx, k, data)
		if err != nil {
			if ctx.Err() != nil {
				return nil, fmt.Errorf("onceq: %s: %w", k.op(), ctx.Err())
			}
			if k.noRetryNet || attempt >= c.retries {
				return nil, &TransportError{Op: k.op(), Err: err}
			}
			if err := sleep(ctx, backoff(attempt)); err != nil {
				return nil, fmt.Errorf("onceq: %s: %w", k.op(), err)
			}
			continue
		}
		if resp.status < 300 {
			return resp, nil
		}
		apiErr := errorOf(resp)
		var un *Unavailable
		if !errors.As(apiErr, &un) || attempt >= c.retries {
			return nil, apiErr
		}
		wait := un.RetryAfter
		if b := backoff(attempt); wait < b {
			wait = b
		}
		if wait > c.maxRetryWait {
			wait = c.maxRetryWait
		}
		if err := sleep(ctx, wait); err != nil {
			return nil, apiErr
		}
	}
}

// once sends one attempt and reads the whole answer.
func (c *Client) once(ctx context.Context, k call, data []byte) (*response, error) {
	ctx, cancel := context.WithTimeout(ctx, c.timeout+k.wait)
	defer cancel()
	req, err := c.newRequest(ctx, k, data)
	if err != nil {
		return nil, err
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	return &response{resp.StatusCode, resp.Header, body}, nil
}

func (c *Client) newRequest(ctx context.Context, k call, data []byte) (*http.Request, error) {
	target := c.base + k.path
	if len(k.query) > 0 {
		target += "?" + k.query.Encode()
	}
	var body io.Reader
	if data != nil {
		body = bytes.NewReader(data)
	}
	req, err := http.NewRequestWithContext(ctx, k.method, target, body)
	if err != nil {
		return nil, err
	}
	if data != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	req.Header.Set("User-Agent", "onceq-go/"+Version)
	return req, nil
}

// errorOf makes the typed error of a non-2xx answer.
func errorOf(r *response) error {
	var doc struct {
		Error        string `json:"error"`
		Message      string `json:"message"`
		RetryAfterMS *int64 `json:"retry_after_ms"`
	}
	base := APIError{Status: r.status, RequestID: r.header.Get("X-Request-Id")}
	if json.Unmarshal(r.body, &doc) == nil {
		base.Code, base.Message = doc.Error, doc.Message
	} else {
		base.Message = string(r.body)
		if len(base.Message) > 200 {
			base.Message = base.Message[:200]
		}
	}
	if base.Message == "" {
		base.Message = "HTTP " + strconv.Itoa(r.status)
	}
	retryAfter := time.Second
	if doc.RetryAfterMS != nil {
		retryAfter = time.Duration(*doc.RetryAfterMS) * time.Millisecond
	} else if s, err := strconv.Atoi(r.header.Get("Retry-After")); err == nil {
		retryAfter = time.Duration(s) * time.Second
	}
	return newAPIError(base, retryAfter)
}

// backoff is the wait before retry attempt+1 after a network error:
// 50 ms doubling up to 2 s, with jitter.
func backoff(attempt int) time.Duration {
	d := 50 * time.Millisecond << attempt
	if d > 2*time.Second || d <= 0 {
		d = 2 * time.Second
	}
	jitter := time.Duration(time.Now().UnixNano() % int64(d/2))
	return d/2 + jitter
}

// sleep waits d or until ctx is done (its error).
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// decode reads a JSON answer into v.
func decode[T any](r *response, k call) (T, error) {
	var v T
	if err := json.Unmarshal(r.body, &v); err != nil {
		return v, fmt.Errorf("onceq: %s: unexpected answer %.200q: %w", k.op(), r.body, err)
	}
	return v, nil
}

// get runs a call and decodes its JSON answer.
func get[T any](ctx context.Context, c *Client, k call) (T, error) {
	r, err := c.do(ctx, k)
	if err != nil {
		var zero T
		return zero, err
	}
	return decode[T](r, k)
}
