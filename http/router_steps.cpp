// POST /v1/ack with produce: a workflow step (docs/API.md, "Workflow steps
// (ext)"). The ack and the messages it produces are one command on the
// ack's shard; messages for topics on other shards go through its outbox
// (shard/outbox_relay.hpp), and the answer waits for one relay pass so
// that it can say where each was stored.

#include <algorithm>
#include <map>
#include <memory>
#include <mutex>
#include <utility>
#include <variant>

#include <fmt/format.h>

#include "http/codec.hpp"
#include "http/router.hpp"
#include "http/router_internal.hpp"

namespace onceq::http {

using namespace detail;
using bhttp::status;

namespace {

// Every message of the ack (single or batch form), in order.
template <class Fn>
void each_step(const ack_request& ar, Fn&& fn) {
  if (const auto* single = std::get_if<ack_cmd>(&ar)) {
    for (const auto& m : single->produce) fn(m);
    return;
  }
  for (const auto& a : std::get<ack_batch_cmd>(ar).acks)
    for (const auto& m : a.produce) fn(m);
}

// The outbox sequences an answer waits for.
std::vector<std::uint64_t> pending_of(const std::vector<ack_outcome>& outs) {
  std::vector<std::uint64_t> seqs;
  for (const auto& o : outs)
    if (o.produced)
      for (const auto& p : *o.produced)
        if (p.pending) seqs.push_back(p.outbox_seq);
  return seqs;
}

// The relay's outcomes put in place of the pending entries.
void settle_pending(std::vector<ack_outcome>& outs,
                    const std::map<std::uint64_t, step_produced>& got) {
  for (auto& o : outs) {
    if (!o.produced) continue;
    for (auto& p : *o.produced) {
      if (!p.pending) continue;
      auto it = got.find(p.outbox_seq);
      if (it == got.end() || it->second.pending) continue;
      auto topic = std::move(p.topic);
      p = it->second;
      p.topic = std::move(topic);
    }
  }
}

}  // namespace

void router::ack_steps(pending_ptr p, ack_request ar, shard& owner) {
  call& c = p->c;
  std::optional<error> denied;
  // Messages for topics of other shards, per topic: checked there first.
  std::map<std::string, produce_cmd> remote;
  each_step(ar, [&](const step_message& m) {
    if (!denied) denied = deny_produce(c, m.topic);
    // A single node's placement knows every topic: a name no shard holds
    // is unknown. A cluster places names by hash and knows none: each
    // target is checked on its shard, the ack's own included.
    if (cluster_ == nullptr) {
      if (!denied && !shards_.placed_on(m.topic))
        denied = make_error(errc::not_found, fmt::format("topic '{}' not found", m.topic));
      if (shards_.of(m.topic).id() == owner.id()) return;
    }
    auto& cmd = remote[m.topic];
    cmd.topic = m.topic;
    if (cmd.messages.size() < k_max_batch) cmd.messages.push_back(m.message);
  });
  if (denied) return finish(std::move(p), error_reply(*denied, c));

  const bool single = std::holds_alternative<ack_cmd>(ar);
  // The ack, then the wait for its other shards' messages, then the answer.
  auto run_ack = [this, single, source = owner.id()](pending_ptr p, ack_request ar, shard& owner) {
    auto answer = answer_with<result<std::vector<ack_outcome>>>(
        std::move(p), [this, single](result<std::vector<ack_outcome>> r, const call& c) {
          if (!r.ok()) return error_reply(r.err(), c);
          if (single) return json_text_reply(status::ok, ack_produced_json(r->front()));
          return json_text_reply(status::ok, ack_outcomes_json(*r));
        });
    auto settle = [this, source,
                   answer = std::move(answer)](result<std::vector<ack_outcome>> r) mutable {
      if (!r.ok()) return answer(std::move(r));
      auto seqs = pending_of(*r);
      if (seqs.empty()) return answer(std::move(r));
      relay_->flush(source, std::move(seqs),
                    [outs = std::move(*r), answer = std::move(answer)](
                        std::map<std::uint64_t, step_produced> got) mutable {
                      settle_pending(outs, got);
                      answer(std::move(outs));
                    });
    };
    if (single) {
      owner.submit(std::move(std::get<ack_cmd>(ar)),
                   [settle = std::move(settle)](result<ack_outcome> r) mutable {
                     if (!r.ok()) return settle(std::move(r).err());
                     settle(std::vector<ack_outcome>{std::move(*r)});
                   });
    } else {
      owner.submit(std::move(std::get<ack_batch_cmd>(ar)), std::move(settle));
    }
  };
  if (remote.empty()) return run_ack(std::move(p), std::move(ar), owner);

  // Each target checks its messages (unknown topic: 404; a bad message:
  // 400; a full topic: 429) before the ack writes them to the outbox.
  struct checks {
    std::mutex mu;
    std::size_t waiting = 0;
    std::optional<error> failed;
    pending_ptr p;
    ack_request ar;
  };
  auto st = std::make_shared<checks>();
  st->waiting = remote.size();
  st->p = std::move(p);
  st->ar = std::move(ar);
  for (auto& [topic, cmd] : remote) {
    // A cluster's replica may lag its leader (right after a restart it has
    // not applied the topic's creation yet): there the check reads on the
    // target shard's leader, and a node that does not lead it answers
    // unavailable, which skips the check rather than refuse the ack.
    shards_.of(topic).query<void>(
        cluster_ != nullptr, [cmd = std::move(cmd)](broker& b) { return b.check_produce(cmd); },
        [this, st, run_ack, owner = &owner](result<void> r) mutable {
          {
            std::lock_guard lock(st->mu);
            // A target that cannot write now (disk full, no leader) does not
            // refuse the ack: its messages wait in the outbox ("pending").
            if (!r.ok() && r.code() != errc::unavailable && r.code() != errc::would_block &&
                !st->failed)
              st->failed = std::move(r).err();
            if (--st->waiting != 0) return;
          }
          if (st->failed) {
            auto fail = answer_with<result<void>>(
                std::move(st->p),
                [this](result<void> e, const call& c) { return error_reply(e.err(), c); });
            return fail(std::move(*st->failed));
          }
          run_ack(std::move(st->p), std::move(st->ar), *owner);
        });
  }
}

}  // namespace onceq::http
