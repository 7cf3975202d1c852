package onceq

import (
	"encoding/json"
	"fmt"
)

// Typed requests and answers, one per shape of docs/API.md. Fields a newer
// server adds are ignored, so it does not break an older client. Durations
// and timestamps keep the API's units: *MS fields are milliseconds, *AtMS
// fields Unix epoch milliseconds.

// Ptr returns a pointer to v, for the optional fields where zero means
// something (TopicConfig.KeyTTLMS: 0 is "forever"; NackItem.DelayMS: 0 is
// "now").
func Ptr[T any](v T) *T { return &v }

// Health is GET /v1/healthz: OK on 200; on 503 Reason says why (and Shards
// which shards cannot write).
type Health struct {
	OK     bool         `json:"-"`
	Status string       `json:"status"`
	Reason string       `json:"reason"`
	Shards []ShardFault `json:"shards"`
}

// ShardFault is a shard whose storage cannot write.
type ShardFault struct {
	Shard  int    `json:"shard"`
	Reason string `json:"reason"`
}

// ServerVersion is GET /v1/version.
type ServerVersion struct {
	Version    string `json:"version"`
	Commit     string `json:"commit"`
	WALEnabled bool   `json:"wal_enabled"`
}

// TopicConfig is the body of POST /v1/topics, less the name. Zero fields
// are left out (the server's default applies); the pointer fields are
// those where 0 is a value of its own (KeyTTLMS 0: keys live forever;
// RetentionMS 0: no age limit; the limits 0: unlimited).
type TopicConfig struct {
	Partitions                 int      `json:"partitions,omitempty"`
	LeaseMS                    int64    `json:"lease_ms,omitempty"`
	MaxAttempts                int      `json:"max_attempts,omitempty"`
	BackoffMS                  int64    `json:"backoff_ms,omitempty"`
	MaxBackoffMS               int64    `json:"max_backoff_ms,omitempty"`
	KeyTTLMS                   *int64   `json:"key_ttl_ms,omitempty"`
	DedupWindowMS              *int64   `json:"dedup_window_ms,omitempty"`
	RetentionMS                *int64   `json:"retention_ms,omitempty"`
	MaxBacklogMessages         *int64   `json:"max_backlog_messages,omitempty"`
	MaxBacklogBytes            *int64   `json:"max_backlog_bytes,omitempty"`
	MaxInflight                *int64   `json:"max_inflight,omitempty"`
	IdempotencyKeyFields       []string `json:"idempotency_key_fields,omitempty"`
	IdempotencyKeyIncludeTopic bool     `json:"idempotency_key_include_topic,omitempty"`
	IdempotencyKeyOptional     bool     `json:"idempotency_key_optional,omitempty"`
	DedupByContent             bool     `json:"dedup_by_content,omitempty"`
	KeyConflict                string   `json:"key_conflict,omitempty"` // "hold" or "supersede"
	KeyHistory                 bool     `json:"key_history,omitempty"`
	ReplayWindowMS             int64    `json:"replay_window_ms,omitempty"`
	// Ordering "key": within a group, at most one message per key is
	// leased at a time, in offset order. "" or "none": no such order.
	Ordering string `json:"ordering,omitempty"`
	// Extra holds settings this client does not name yet; they are sent as
	// given, next to the others.
	Extra map[string]any `json:"-"`
}

// body is the request body: the named fields, Extra and the name.
func (t TopicConfig) body(name string) (map[string]any, error) {
	body, err := jsonFields(t)
	if err != nil {
		return nil, err
	}
	for k, v := range t.Extra {
		if _, named := body[k]; named || k == "name" {
			return nil, fmt.Errorf("onceq: TopicConfig.Extra[%q] repeats a named field", k)
		}
		body[k] = v
	}
	body["name"] = name
	return body, nil
}

// TopicCreated is the answer to POST /v1/topics.
type TopicCreated struct {
	Status     string `json:"status"`
	Name       string `json:"name"`
	Partitions int    `json:"partitions"`
}

// TopicInfo is GET /v1/topics/{name}: the topic's settings and per-group
// counters.
type TopicInfo struct {
	Name       string                   `json:"name"`
	Partitions int                      `json:"partitions"`
	Settings   TopicSettings            `json:"settings"`
	Groups     map[string]GroupCounters `json:"groups"`
}

// TopicSettings are a topic's settings as the server reports them.
type TopicSettings struct {
	LeaseMS                    int64    `json:"lease_ms"`
	MaxAttempts                int      `json:"max_attempts"`
	BackoffMS                  int64    `json:"backoff_ms"`
	MaxBackoffMS               int64    `json:"max_backoff_ms"`
	KeyTTLMS                   int64    `json:"key_ttl_ms"`
	DedupWindowMS              int64    `json:"dedup_window_ms"`
	RetentionMS                int64    `json:"retention_ms"`
	MaxBacklogMessages         int64    `json:"max_backlog_messages"`
	MaxBacklogBytes            int64    `json:"max_backlog_bytes"`
	MaxInflight                int64    `json:"max_inflight"`
	IdempotencyKeyFields       []string `json:"idempotency_key_fields"`
	IdempotencyKeyIncludeTopic bool     `json:"idempotency_key_include_topic"`
	IdempotencyKeyOptional     bool     `json:"idempotency_key_optional"`
	DedupByContent             bool     `json:"dedup_by_content"`
	KeyConflict                string   `json:"key_conflict"`
	KeyHistory                 bool     `json:"key_history"`
	ReplayWindowMS             int64    `json:"replay_window_ms"`
	Ordering                   string   `json:"ordering"` // "none" or "key" ("" from a server without it)
	// Raw has every setting the server reported, those named above included.
	Raw map[string]json.RawMessage `json:"-"`
}

// UnmarshalJSON fills the named fields and Raw.
func (s *TopicSettings) UnmarshalJSON(b []byte) error {
	type plain TopicSettings
	if err := json.Unmarshal(b, (*plain)(s)); err != nil {
		return err
	}
	return json.Unmarshal(b, &s.Raw)
}

// GroupCounters are one group's counters of a topic.
type GroupCounters struct {
	Backlog      int64 `json:"backlog"`
	Inflight     int64 `json:"inflight"`
	Acked        int64 `json:"acked"`
	AutoAcked    int64 `json:"auto_acked"`
	Redelivered  int64 `json:"redelivered"`
	DeadLettered int64 `json:"dead_lettered"`
	Superseded   int64 `json:"superseded"`
}

// ProduceResult is the answer for one produced message.
//
// Status is "produced" (Partition and Offset set; Duplicate when the
// dedup window answered an earlier copy) or "already_committed" (nothing
// stored; Committed holds each skip-if-committed group's commit with its
// Result). MsgID is the dedup id the client sent, the same on every retry
// ("" WithoutDedup).
type ProduceResult struct {
	Status    string            `json:"status"`
	Topic     string            `json:"topic"`
	Partition int               `json:"partition"`
	Offset    int64             `json:"offset"`
	Duplicate bool              `json:"duplicate"`
	Committed map[string]Commit `json:"committed"`
	MsgID     string            `json:"-"`
}

// AlreadyCommitted tells that nothing was stored: the message's key is
// committed in every group of WithSkipIfCommitted.
func (r ProduceResult) AlreadyCommitted() bool { return r.Status == "already_committed" }

// Commit is one group's commit of an idempotency key.
type Commit struct {
	CommittedAtMS int64           `json:"committed_at_ms"`
	Owner         string          `json:"owner"`
	Result        json.RawMessage `json:"result"`
}

// Message is one message of Client.ProduceBatch, or one that an ack
// produces (a workflow step's next message: AckItem.Produce, Complete,
// Job.Produce), which needs its Topic. A Value that is not a string or
// []byte is sent as its JSON text. Envelope holds any other envelope field
// (tenant_id, delay_ms, headers, step_id, ...).
type Message struct {
	Topic          string // an ack's messages: the target topic; ProduceBatch: "" or its topic
	Key            string
	Value          any
	IdempotencyKey string
	MsgID          string
	Envelope       map[string]any
}

// MarshalJSON is the message as the API spells it: a single POST
// /v1/produce body (topic if set, key, value, envelope), as in an ack's
// produce list. No dedup id is added: for an ack's messages the ack is the
// step's once-only guard.
func (m Message) MarshalJSON() ([]byte, error) {
	text, err := valueText(m.Value)
	if err != nil {
		return nil, fmt.Errorf("%w (a message for %q)", err, m.Topic)
	}
	out := map[string]any{"value": text}
	if m.Topic != "" {
		out["topic"] = m.Topic
	}
	if m.Key != "" {
		out["key"] = m.Key
	}
	env := make(map[string]any, len(m.Envelope)+2)
	for k, v := range m.Envelope {
		env[k] = v
	}
	if m.IdempotencyKey != "" {
		env["idempotency_key"] = m.IdempotencyKey
	}
	if m.MsgID != "" {
		env["msg_id"] = m.MsgID
	}
	if len(env) > 0 {
		out["envelope"] = env
	}
	return json.Marshal(out)
}

// Ref names one delivery: the message (Partition, Offset) and, as fences,
// the delivery's Attempts and FencingToken (0: not checked).
type Ref struct {
	Partition    int   `json:"partition"`
	Offset       int64 `json:"offset"`
	Attempts     int   `json:"attempts,omitempty"`
	FencingToken int64 `json:"fencing_token,omitempty"`
}

// Delivery is one consumed message: every field of the consume answer.
type Delivery struct {
	Topic            string         `json:"topic"`
	Partition        int            `json:"partition"`
	Offset           int64          `json:"offset"`
	Attempts         int            `json:"attempts"`
	Key              string         `json:"key"`
	Value            string         `json:"value"`
	LastError        string         `json:"last_error"`
	Envelope         map[string]any `json:"envelope"`
	LeaseExpiresAtMS int64          `json:"lease_expires_at_ms"`
	FencingToken     int64          `json:"fencing_token"`
	// IdempotencyKey is the envelope's idempotency_key ("" if none).
	IdempotencyKey string `json:"-"`
}

// Ref names this delivery, fenced on its attempt and token.
func (d Delivery) Ref() Ref {
	return Ref{Partition: d.Partition, Offset: d.Offset, Attempts: d.Attempts, FencingToken: d.FencingToken}
}

// AckItem acks this delivery with result (nil: no result), fenced.
func (d Delivery) AckItem(result any) AckItem { return AckItem{Ref: d.Ref(), Result: result} }

// envelopeString is a string field of the envelope ("" if absent).
func (d Delivery) envelopeString(name string) string {
	s, _ := d.Envelope[name].(string)
	return s
}

// AckItem is one ack: of POST /v1/ack, of its batch form, or carried on a
// consume (ConsumeOptions.Acks). Result (any JSON; nil: none) is committed
// with the message's idempotency key.
//
// Produce (workflow steps, docs/CLIENTS.md) holds messages stored in the
// same atomic step as the ack, both or neither (at most 1000; each needs
// its Topic). Client.AckStep and Client.AckBatch take it; the acks carried
// on a consume do not.
type AckItem struct {
	Ref
	Result  any       `json:"result,omitempty"`
	Produce []Message `json:"produce,omitempty"`
}

// checkProduce tells why messages cannot go on an ack: a message without
// its Topic, a Value that is not JSON.
func checkProduce(msgs []Message) error {
	for i, m := range msgs {
		if m.Topic == "" {
			return fmt.Errorf("onceq: message %d of an ack's produce has no Topic", i)
		}
		if _, err := valueText(m.Value); err != nil {
			return fmt.Errorf("%w (message %d of an ack's produce, for %s)", err, i, m.Topic)
		}
	}
	return nil
}

// AckResult is one item's outcome: Status "acked", or "error" with the code
// in Error ("FAILED_PRECONDITION": refused, stale). Produced says where the
// item's Produce messages went, in order (none if it carried none, or
// repeats an ack whose message had no idempotency key).
type AckResult struct {
	Partition int        `json:"partition"`
	Offset    int64      `json:"offset"`
	Status    string     `json:"status"`
	Error     string     `json:"error"`
	Produced  []Produced `json:"produced"`
}

// Produced is where one message an ack produced went. Status "produced":
// Partition and Offset are set (Duplicate when the target topic's dedup
// window answered an earlier copy). Status "pending": its target shard
// could not take it yet and the broker's outbox delivers it later (no
// position yet). Either way it is stored with the ack.
type Produced struct {
	Topic     string `json:"topic"`
	Status    string `json:"status"`
	Partition int    `json:"partition"`
	Offset    int64  `json:"offset"`
	Duplicate bool   `json:"duplicate"`
}

// Pending tells that the message waits in the broker's outbox.
func (p Produced) Pending() bool { return p.Status == "pending" }

// UnmarshalJSON fills the fields. Status is "pending" or "produced": a
// stored message's answer has no status of its own (or another word for
// it, such as "stored").
func (p *Produced) UnmarshalJSON(b []byte) error {
	type plain Produced
	if err := json.Unmarshal(b, (*plain)(p)); err != nil {
		return err
	}
	if p.Status != "pending" {
		p.Status = "produced"
	}
	return nil
}

// OK tells that the item was acked.
func (r AckResult) OK() bool { return r.Status == "acked" }

// NackItem is POST /v1/nack's delivery, reason and delay (nil: the topic's
// backoff; Ptr(int64(0)): redeliver now).
type NackItem struct {
	Ref
	Reason  string `json:"reason,omitempty"`
	DelayMS *int64 `json:"delay_ms,omitempty"`
}

// ExtendItem is POST /v1/extend's delivery and its new lease, from now.
type ExtendItem struct {
	Ref
	LeaseMS int64 `json:"lease_ms"`
}

// ConsumeOptions are a long-poll consume's parameters; zero fields are
// left out.
type ConsumeOptions struct {
	MaxMessages int   // 1..1000; default 1
	WaitMS      int   // 0..60000: how long to wait for the first message
	LeaseMS     int64 // default: the topic's lease_ms
	DeadlineMS  int64 // epoch ms: nothing is delivered at or after it
	Acks        []AckItem
}

// ConsumeResult is a long-poll batch: the messages in order, and the
// results of the acks carried on the request (none when none were).
type ConsumeResult struct {
	Messages []Delivery
	Acks     []AckResult
}

// KeyOptions are GET /v1/keys's optional parameters.
type KeyOptions struct {
	TenantID string // the messages' envelope tenant_id, if they had one
	WaitMS   int    // wait up to this long for the key to be committed
}

// KeyState is GET /v1/keys: State is "none", "leased", "committed" or
// "failed"; the other fields are set as they apply to it (zero otherwise).
type KeyState struct {
	State            string          `json:"state"`
	Owner            string          `json:"owner"`
	Partition        int             `json:"partition"`
	Offset           int64           `json:"offset"`
	Attempts         int             `json:"attempts"`
	FencingToken     int64           `json:"fencing_token"`
	LeaseExpiresAtMS int64           `json:"lease_expires_at_ms"`
	CommittedAtMS    int64           `json:"committed_at_ms"`
	ExpiresAtMS      int64           `json:"expires_at_ms"`
	Result           json.RawMessage `json:"result"`
}

// Committed tells that the key is committed.
func (k KeyState) Committed() bool { return k.State == "committed" }

// KeyEvent is one event of GET /v1/keys/history.
type KeyEvent struct {
	Event        string `json:"event"`
	AtMS         int64  `json:"at_ms"`
	Owner        string `json:"owner"`
	Partition    int    `json:"partition"`
	Offset       int64  `json:"offset"`
	Attempts     int    `json:"attempts"`
	FencingToken int64  `json:"fencing_token"`
	Reason       string `json:"reason"`
	ResultBytes  int    `json:"result_bytes"`
}

// ReplayRequest is POST /v1/replay. Give one range: FromMS/ToMS (produce
// time), or Partition with FromOffset/ToOffset. It is a dry run unless
// Apply.
type ReplayRequest struct {
	Topic       string `json:"topic"`
	Group       string `json:"group"`
	FromMS      *int64 `json:"from_ms,omitempty"`
	ToMS        *int64 `json:"to_ms,omitempty"`
	Partition   *int   `json:"partition,omitempty"`
	FromOffset  *int64 `json:"from_offset,omitempty"`
	ToOffset    *int64 `json:"to_offset,omitempty"`
	Apply       bool   `json:"-"`
	MaxMessages int    `json:"max_messages,omitempty"`
	Cursor      string `json:"cursor,omitempty"` // the previous page's Next
}

// ReplayResult is one page of a replay: Next is "" at the end of the
// range, else the Cursor of the next page.
type ReplayResult struct {
	DryRun   bool            `json:"dry_run"`
	Messages []ReplayMessage `json:"messages"`
	Next     string          `json:"next"`
	Replayed int             `json:"replayed"`
	Summary  map[string]int  `json:"summary"`
}

// ReplayMessage is one message of a replay page and its outcome
// ("already_committed", "would_deliver", "in_flight", "pending",
// "dead_lettered", "superseded", "gone").
type ReplayMessage struct {
	Partition      int             `json:"partition"`
	Offset         int64           `json:"offset"`
	Outcome        string          `json:"outcome"`
	Attempts       int             `json:"attempts"`
	IdempotencyKey string          `json:"idempotency_key"`
	ProducedAtMS   int64           `json:"produced_at_ms"`
	CommittedAtMS  int64           `json:"committed_at_ms"`
	Owner          string          `json:"owner"`
	Result         json.RawMessage `json:"result"`
}

// ClusterStatus is GET /v1/cluster: the cluster as the asked node sees it.
type ClusterStatus struct {
	Node   string         `json:"node"`
	Nodes  []ClusterNode  `json:"nodes"`
	Shards []ClusterShard `json:"shards"`
}

// ClusterNode is one node of the cluster file.
type ClusterNode struct {
	ID        string `json:"id"`
	HTTP      string `json:"http"`
	Raft      string `json:"raft"`
	Reachable bool   `json:"reachable"`
}

// ClusterShard is one shard's Raft state on the asked node.
type ClusterShard struct {
	Shard        int      `json:"shard"`
	Leader       string   `json:"leader"`
	Term         uint64   `json:"term"`
	CommitIndex  uint64   `json:"commit_index"`
	AppliedIndex uint64   `json:"applied_index"`
	LastIndex    uint64   `json:"last_index"`
	Topics       []string `json:"topics"`
	Failure      string   `json:"failure"`
}
