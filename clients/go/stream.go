package onceq

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"sync/atomic"
)

// Stream is a streaming consume (GET /v1/consume without max_messages,
// DriftQ's mode): deliveries as they come, on one connection, until Close
// or the context ends. Each one must still be acked, nacked or extended.
//
//	s, err := client.Stream(ctx, "orders", "billing", "worker-1", 0)
//	defer s.Close()
//	for s.Next() {
//		d := s.Delivery()
//		...
//	}
//	err = s.Err()
//
// Not retried: an error or a dropped connection ends the stream. Next,
// Delivery and Err belong to one goroutine; Close (or cancelling the
// context) may come from another, to end a Next that waits.
type Stream struct {
	body    io.ReadCloser
	lines   *bufio.Scanner
	current Delivery
	err     error
	cancel  context.CancelFunc
	closed  atomic.Bool
}

// Stream opens a streaming consume; leaseMS 0 takes the topic's lease.
func (c *Client) Stream(ctx context.Context, topic, group, owner string, leaseMS int64) (*Stream, error) {
	if c.err != nil {
		return nil, c.err
	}
	q := url.Values{"topic": {topic}, "group": {group}, "owner": {owner}}
	if leaseMS > 0 {
		q.Set("lease_ms", strconv.FormatInt(leaseMS, 10))
	}
	k := call{method: http.MethodGet, path: "/v1/consume", query: q}
	ctx, cancel := context.WithCancel(ctx)
	req, err := c.newRequest(ctx, k, nil)
	if err != nil {
		cancel()
		return nil, err
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		cancel()
		return nil, &TransportError{Op: k.op(), Err: err}
	}
	if resp.StatusCode != http.StatusOK {
		defer cancel()
		defer resp.Body.Close()
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		return nil, errorOf(&response{resp.StatusCode, resp.Header, body})
	}
	lines := bufio.NewScanner(resp.Body)
	lines.Buffer(make([]byte, 64<<10), 16<<20)
	return &Stream{body: resp.Body, lines: lines, cancel: cancel}, nil
}

// Next waits for the next delivery; false at the end (see Err).
func (s *Stream) Next() bool {
	for s.err == nil && s.lines.Scan() {
		line := s.lines.Bytes()
		if len(line) == 0 {
			continue
		}
		s.current, s.err = parseDelivery(line)
		return s.err == nil
	}
	if s.err == nil {
		s.err = s.lines.Err()
		if s.err == nil {
			s.err = io.EOF
		}
	}
	return false
}

// Delivery is the delivery Next read.
func (s *Stream) Delivery() Delivery { return s.current }

// Err is why the stream ended: nil after Close, else the error (io.EOF if
// the server closed it; the context's error if it ended).
func (s *Stream) Err() error {
	if s.closed.Load() {
		return nil
	}
	if s.err != nil && !errors.Is(s.err, io.EOF) {
		return fmt.Errorf("onceq: stream: %w", s.err)
	}
	return s.err
}

// Close ends the stream (the server then stops delivering to it; what it
// delivered and was not acked comes back when its lease ends).
func (s *Stream) Close() error {
	s.closed.Store(true)
	s.cancel()
	return s.body.Close()
}
