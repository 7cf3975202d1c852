#pragma once

// Asio adapters over a shard (shard/shard.hpp): each starts a shard call and completes
// the caller's handler (e.g. a coroutine's use_awaitable) on the handler's
// own executor, with the shard's result. The shard's done callbacks run on
// its loop or its store's syncer thread; they only post here, never block.
//
// While a call is pending, the handler's executor counts outstanding work,
// so an io_context::run() does not return under it.

#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include <boost/asio/associated_executor.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/post.hpp>

#include "shard/shard.hpp"

namespace onceq::http {

namespace asio = boost::asio;

// Calls start(done) with a copyable done(R) callback that completes the
// token's handler with R on the handler's executor.
template <class R, class Start, class Token>
auto async_bridge(Start start, Token&& token) {
  return asio::async_initiate<Token, void(R)>(
      [](auto handler, Start start_fn) {
        using handler_t = decltype(handler);
        using executor_t = asio::associated_executor_t<handler_t>;
        struct pending {
          handler_t handler;
          asio::executor_work_guard<executor_t> work;
        };
        auto ex = asio::get_associated_executor(handler);
        auto p = std::make_shared<pending>(pending{std::move(handler), asio::make_work_guard(ex)});
        start_fn([p](R r) {
          auto target = p->work.get_executor();
          asio::post(target, [p, r = std::move(r)]() mutable {
            auto h = std::move(p->handler);
            p->work.reset();
            std::move(h)(std::move(r));
          });
        });
      },
      token, std::move(start));
}

// shard::execute: fn runs where the shard's broker lives; completes with
// result<T> once its writes are durable.
template <class T, class Token>
auto async_execute(shard& r, std::function<result<T>(broker&)> fn, Token&& token) {
  return async_bridge<result<T>>(
      [&r, fn = std::move(fn)](std::function<void(result<T>)> done) mutable {
        r.execute<T>(std::move(fn), std::move(done));
      },
      std::forward<Token>(token));
}

// shard::query: a read of this node's state (in a cluster, fresh on the
// leader or as this replica last applied it).
template <class T, class Token>
auto async_query(shard& r, bool fresh, std::function<result<T>(broker&)> fn, Token&& token) {
  return async_bridge<result<T>>(
      [&r, fresh, fn = std::move(fn)](std::function<void(result<T>)> done) mutable {
        r.query<T>(fresh, std::move(fn), std::move(done));
      },
      std::forward<Token>(token));
}

// shard::submit: the command itself crosses, typed (broker/dispatch.hpp).
template <class Cmd, class Token>
auto async_submit(shard& r, Cmd cmd, Token&& token) {
  using reply = typename command_traits<Cmd>::reply;
  return async_bridge<result<reply>>(
      [&r, cmd = std::move(cmd)](std::function<void(result<reply>)> done) mutable {
        r.submit(std::move(cmd), std::move(done));
      },
      std::forward<Token>(token));
}

// shard::consume with a long-poll of up to wait_ms.
template <class Token>
auto async_consume(shard& r, consume_cmd cmd, millis wait_ms, Token&& token) {
  using R = result<std::vector<delivery>>;
  return async_bridge<R>(
      [&r, cmd = std::move(cmd), wait_ms](std::function<void(R)> done) mutable {
        r.consume(std::move(cmd), wait_ms, std::move(done));
      },
      std::forward<Token>(token));
}

// shard::wait_key: the key's state, waiting up to wait_ms for a commit.
template <class Token>
auto async_wait_key(shard& r, key_query q, millis wait_ms, Token&& token) {
  using R = result<key_info>;
  return async_bridge<R>(
      [&r, q = std::move(q), wait_ms](std::function<void(R)> done) mutable {
        r.wait_key(std::move(q), wait_ms, std::move(done));
      },
      std::forward<Token>(token));
}

}  // namespace onceq::http
