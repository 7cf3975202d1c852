// The onceq console: polls the public API once a second and draws what it
// answers. No library, no build step. Text from the server only ever goes
// into textContent, never into HTML.
//
// Reads: GET /v1/version, GET /v1/topics, GET /v1/topics/{name}, /metrics,
// GET /v1/cluster
// (rates, produced, produce duplicates, oldest unacked age: optional, the
// page degrades without it), GET /v1/keys and GET /v1/keys/history (optional).
// Writes, only on a click: POST /v1/replay (replay.js), and in a cluster
// POST /v1/cluster/nodes/{id}/drain and POST /v1/cluster/rebalance.
// The bearer token lives in sessionStorage (this tab only), never in a URL.
'use strict';

(function () {
  const TOKEN_KEY = 'onceq.token';
  const REFRESH_MS = 1000;
  const CHART_POINTS = 60;  // one per refresh: the last minute
  const MAX_TOPICS = 200;   // topics fetched per refresh
  const KEY_FIELDS = ['topic', 'group', 'key', 'tenant_id'];

  const $ = (id) => document.getElementById(id);

  // el('td', {class: 'num', 'data-col': 'acked'}, '12')
  function el(tag, attrs, ...children) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v !== undefined && v !== null) e.setAttribute(k, String(v));
    }
    for (const c of children) {
      if (c === undefined || c === null) continue;
      e.append(c instanceof Node ? c : document.createTextNode(String(c)));
    }
    return e;
  }

  // ---- API ----------------------------------------------------------------

  function token() {
    return sessionStorage.getItem(TOKEN_KEY) || '';
  }

  // GET path, or POST post (an object) as JSON. Never throws for an HTTP
  // status; throws on a network failure.
  async function api(path, post) {
    const headers = {};
    const t = token();
    if (t) headers.Authorization = 'Bearer ' + t;
    const init = {headers, cache: 'no-store', credentials: 'omit'};
    if (post !== undefined) {
      init.method = 'POST';
      headers['Content-Type'] = 'application/json';
      init.body = JSON.stringify(post);
    }
    const res = await fetch(path, init);
    const text = await res.text();
    let body = null;
    if ((res.headers.get('Content-Type') || '').includes('json') && text) {
      try {
        body = JSON.parse(text);
      } catch (e) {
        body = null;
      }
    }
    return {status: res.status, ok: res.ok, body, text, retryAfter: res.headers.get('Retry-After')};
  }

  function describeError(res) {
    const again = res.retryAfter ? ' (retry after ' + res.retryAfter + ' s)' : '';
    if (res.body && res.body.error) return res.body.error + ': ' + (res.body.message || '') + again;
    return 'HTTP ' + res.status + again;
  }

  // Prometheus text -> [{name, labels, value}].
  function parseMetrics(text) {
    const out = [];
    const line_re = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)/;
    const label_re = /([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g;
    for (const line of text.split('\n')) {
      if (!line || line[0] === '#') continue;
      const m = line_re.exec(line);
      if (!m) continue;
      const labels = {};
      if (m[2]) {
        for (const l of m[2].matchAll(label_re)) {
          labels[l[1]] = l[2].replace(/\\(.)/g, (_, c) => (c === 'n' ? '\n' : c));
        }
      }
      out.push({name: m[1], labels, value: Number(m[3])});
    }
    return out;
  }

  // The per-topic and per-group numbers the page needs from /metrics.
  function indexMetrics(samples) {
    const m = {produced: {}, produceDuplicates: {}, delivered: 0, oldest: {}, totalProduced: 0};
    for (const s of samples) {
      const t = s.labels.topic;
      switch (s.name) {
        case 'onceq_produced_total':
          m.produced[t] = s.value;
          m.totalProduced += s.value;
          break;
        case 'onceq_produce_duplicates_total':
          m.produceDuplicates[t] = s.value;
          break;
        case 'onceq_delivered_total':
          m.delivered += s.value;
          break;
        case 'onceq_oldest_unacked_age_seconds':
          m.oldest[t + '\u0000' + s.labels.group] = s.value;
          break;
      }
    }
    return m;
  }

  // ---- formatting ---------------------------------------------------------

  function fmtCount(n) {
    if (n === undefined || n === null || Number.isNaN(n)) return '–';
    return Number(n).toLocaleString('en-US');
  }

  function fmtRate(r) {
    if (r === null || r === undefined) return '–';
    if (r >= 100) return Math.round(r).toLocaleString('en-US') + '/s';
    return r.toFixed(r >= 10 ? 1 : 2).replace(/\.?0+$/, '') + '/s';
  }

  function fmtAge(seconds) {
    if (seconds === undefined || seconds === null) return '–';
    if (seconds <= 0) return 'none';
    if (seconds < 60) return seconds.toFixed(seconds < 10 ? 1 : 0) + ' s';
    const s = Math.floor(seconds);
    if (s < 3600) return Math.floor(s / 60) + ' min ' + (s % 60) + ' s';
    if (s < 86400) return Math.floor(s / 3600) + ' h ' + Math.floor((s % 3600) / 60) + ' min';
    return Math.floor(s / 86400) + ' d ' + Math.floor((s % 86400) / 3600) + ' h';
  }

  function fmtTime(ms) {
    if (!ms) return '–';
    return new Date(ms).toISOString().replace('T', ' ').replace('Z', ' UTC');
  }

  function setStatus(state, text) {
    const s = $('status');
    s.dataset.state = state;
    s.textContent = text;
  }

  // ---- rates and chart ----------------------------------------------------

  const series = {produce: [], deliver: [], ack: []};
  let lastSample = null;

  // counters: {produce, deliver, ack}, each a number or null (unknown).
  function recordRates(counters) {
    const now = performance.now();
    const rates = {};
    for (const k of Object.keys(series)) {
      let r = null;
      if (lastSample && counters[k] !== null && lastSample.c[k] !== null) {
        const dt = (now - lastSample.t) / 1000;
        // A counter that went down (topic deleted, server restarted) says
        // nothing about the rate.
        r = dt > 0 ? Math.max(0, counters[k] - lastSample.c[k]) / dt : null;
      }
      rates[k] = r;
      series[k].push(r);
      if (series[k].length > CHART_POINTS) series[k].shift();
      $('rate-' + k).textContent = fmtRate(r);
    }
    lastSample = {t: now, c: counters};
    drawChart();
  }

  const SVG = 'http://www.w3.org/2000/svg';
  function svg(tag, attrs) {
    const e = document.createElementNS(SVG, tag);
    for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, String(v));
    return e;
  }

  function niceMax(v) {
    if (v <= 1) return 1;
    const p = Math.pow(10, Math.floor(Math.log10(v)));
    for (const f of [1, 2, 5, 10]) {
      if (v <= f * p) return f * p;
    }
    return 10 * p;
  }

  function drawChart() {
    const chart = $('chart');
    // Drawn at the element's own size, so that text is not stretched.
    const W = Math.max(200, Math.round(chart.getBoundingClientRect().width) || 600);
    const H = 140, top = 8, bottom = 4, left = 0;
    chart.setAttribute('viewBox', '0 0 ' + W + ' ' + H);
    let max = 0;
    for (const k of Object.keys(series)) {
      for (const v of series[k]) if (v !== null && v > max) max = v;
    }
    max = niceMax(max);
    chart.replaceChildren();
    for (const f of [0.25, 0.5, 0.75, 1]) {
      const y = H - bottom - f * (H - top - bottom);
      chart.append(svg('line', {x1: 0, x2: W, y1: y, y2: y, class: 'grid'}));
    }
    const label = svg('text', {x: W - 4, y: top + 10, class: 'axis', 'text-anchor': 'end'});
    label.textContent = fmtRate(max);
    chart.append(label);
    const step = (W - left) / (CHART_POINTS - 1);
    for (const k of Object.keys(series)) {
      const pts = series[k];
      const offset = CHART_POINTS - pts.length;
      let d = '';
      let pen = false;
      pts.forEach((v, i) => {
        if (v === null) {
          pen = false;
          return;
        }
        const x = left + (offset + i) * step;
        const y = H - bottom - (v / max) * (H - top - bottom);
        d += (pen ? 'L' : 'M') + x.toFixed(1) + ' ' + y.toFixed(1);
        pen = true;
      });
      if (d) chart.append(svg('path', {d, class: 'line', 'data-series': k}));
    }
  }

  // ---- topics -------------------------------------------------------------

  function dlqSummary(name, infos, metrics) {
    const info = infos.get('dlq.' + name);
    if (!info) return {text: '0', title: 'no dead-lettered message yet (dlq.' + name + ' does not exist)'};
    const produced = metrics ? metrics.produced['dlq.' + name] : undefined;
    const groups = Object.values(info.groups || {});
    // Nobody consumes the DLQ yet: everything in it is waiting.
    const waiting = groups.length
      ? Math.max(...groups.map((g) => g.backlog + g.inflight))
      : produced;
    const text = produced === undefined ? fmtCount(waiting) : fmtCount(waiting) + ' / ' + fmtCount(produced);
    return {text, title: 'dlq.' + name + ': ' + fmtCount(waiting) + ' waiting' +
      (produced === undefined ? '' : ', ' + fmtCount(produced) + ' produced')};
  }

  function renderTopics(names, infos, metrics) {
    const body = $('topics-body');
    const rows = [];
    const shown = names.filter((n) => !(n.startsWith('dlq.') && infos.has(n.slice(4))));
    for (const name of shown) {
      const info = infos.get(name);
      if (!info) continue;
      const produced = metrics ? metrics.produced[name] : undefined;
      const produceDups = metrics ? metrics.produceDuplicates[name] || 0 : 0;
      const dlq = dlqSummary(name, infos, metrics);
      const groups = Object.entries(info.groups || {}).sort((a, b) => (a[0] < b[0] ? -1 : 1));
      const topicCells = (first) => [
        el('td', {'data-col': 'topic', class: first ? 'topic' : 'topic repeat', title: info.partitions + ' partition(s)'}, name),
        el('td', {'data-col': 'produced', class: 'num'}, first ? fmtCount(produced) : ''),
      ];
      if (groups.length === 0) {
        rows.push(el('tr', {'data-topic': name, 'data-group': ''},
          ...topicCells(true),
          el('td', {'data-col': 'group', class: 'muted', colspan: 6}, 'no consumer group yet'),
          el('td', {'data-col': 'dlq', class: 'num', title: dlq.title}, dlq.text),
          el('td', {'data-col': 'replay'})));
        continue;
      }
      groups.forEach(([group, g], i) => {
        const oldest = g.oldest_unacked_age_ms !== undefined
          ? g.oldest_unacked_age_ms / 1000
          : metrics ? metrics.oldest[name + '\u0000' + group] : undefined;
        const dups = g.duplicates_suppressed !== undefined ? g.duplicates_suppressed : g.auto_acked + produceDups;
        const dupsTitle = g.duplicates_suppressed !== undefined ? '' :
          'auto-acked ' + fmtCount(g.auto_acked) + ' + produce duplicates ' + fmtCount(produceDups);
        rows.push(el('tr', {'data-topic': name, 'data-group': group},
          ...topicCells(i === 0),
          el('td', {'data-col': 'group'}, group),
          el('td', {'data-col': 'backlog', class: 'num'}, fmtCount(g.backlog)),
          el('td', {'data-col': 'inflight', class: 'num'}, fmtCount(g.inflight)),
          el('td', {'data-col': 'oldest', class: 'num' + (oldest > 60 ? ' warn' : '')}, fmtAge(oldest)),
          el('td', {'data-col': 'acked', class: 'num'}, fmtCount(g.acked)),
          el('td', {'data-col': 'duplicates', class: 'num', title: dupsTitle}, fmtCount(dups)),
          el('td', {'data-col': 'dlq', class: 'num' + (dlq.text !== '0' ? ' warn' : ''),
                    title: dlq.title + '; this group dead-lettered ' + fmtCount(g.dead_lettered)}, dlq.text),
          el('td', {'data-col': 'replay'},
            el('button', {type: 'button', class: 'replay', 'data-topic': name, 'data-group': group,
                          title: 'replay a time range of ' + name + ' for ' + group}, 'replay'))));
      });
    }
    body.replaceChildren(...rows);
    $('topics-empty').hidden = rows.length > 0;
    $('topics-count').textContent = names.length ? '(' + names.length + ')' : '';
  }

  // ---- refresh loop -------------------------------------------------------

  let busy = false;

  async function refresh() {
    if (busy) return;  // a slow server: skip a tick rather than pile up
    busy = true;
    try {
      const list = await api('/v1/topics');
      if (list.status === 401) {
        setStatus('auth', 'token needed: enter one above');
        return;
      }
      if (!list.ok) {
        setStatus('error', 'GET /v1/topics: ' + describeError(list));
        return;
      }
      const names = (list.body.topics || []).slice(0, MAX_TOPICS);
      const [answers, metricsRes] = await Promise.all([
        Promise.all(names.map((n) => api('/v1/topics/' + encodeURIComponent(n)))),
        api('/metrics'),
      ]);
      const infos = new Map();
      answers.forEach((a, i) => {
        if (a.ok && a.body) infos.set(names[i], a.body);  // deleted meanwhile: skip
      });
      const metrics = metricsRes.ok ? indexMetrics(parseMetrics(metricsRes.text)) : null;
      const note = $('rates-note');
      note.hidden = metrics !== null;
      note.textContent = metrics ? '' :
        'GET /metrics answered ' + metricsRes.status + ' (the token needs the metrics scope): ' +
        'produce and deliver rates, produced counts and oldest unacked ages are not shown.';

      let acked = 0;
      for (const info of infos.values()) {
        for (const g of Object.values(info.groups || {})) acked += g.acked;
      }
      recordRates({
        produce: metrics ? metrics.totalProduced : null,
        deliver: metrics ? metrics.delivered : null,
        ack: acked,
      });
      renderTopics(names, infos, metrics);
      await refreshCluster();
      setStatus('live', 'live · updated ' + new Date().toLocaleTimeString('en-GB'));
    } catch (e) {
      setStatus('error', 'cannot reach onceqd: ' + e.message);
    } finally {
      busy = false;
    }
  }

  // A node of a cluster: its nodes and each shard's leader and indexes
  // (GET /v1/cluster; a single node answers 404 and the card stays hidden).
  async function refreshCluster() {
    const res = await api('/v1/cluster');
    const card = $('cluster-card');
    if (!res.ok || !res.body) {
      card.hidden = true;
      return;
    }
    card.hidden = false;
    const c = res.body;
    $('cluster-node').textContent = 'answered by ' + c.node;
    const nodes = $('cluster-nodes-body');
    nodes.replaceChildren(...(c.nodes || []).map((n) => el('tr', {},
      el('td', {}, n.id), el('td', {}, n.http), el('td', {}, n.raft),
      el('td', {}, n.reachable ? 'yes' : 'no'))));
    const shards = $('cluster-shards-body');
    shards.replaceChildren(...(c.shards || []).map((s) => el('tr', {},
      el('td', {}, String(s.shard)), el('td', {}, s.leader || '(electing)'),
      el('td', {class: 'num'}, fmtCount(s.term)), el('td', {class: 'num'}, fmtCount(s.commit_index)),
      el('td', {class: 'num'}, fmtCount(s.applied_index)),
      el('td', {}, (s.topics || []).join(', ') + (s.failure ? ' · failed: ' + s.failure : '')))));
    renderPlacement(c);
  }

  // ---- cluster placement --------------------------------------------------

  let clusterBusy = false;  // a drain or rebalance is on its way

  // "n1 → n5 adding (drain)"; a copy added with none leaving has from null.
  function fmtMove(m) {
    if (!m) return '–';
    return (m.from || '(none)') + ' → ' + (m.to || '?') + ' ' + (m.state || '') +
      (m.reason ? ' (' + m.reason + ')' : '');
  }

  function fmtMeta(m) {
    const parts = ['meta leader ' + (m.leader || '(none)') + ' (term ' + fmtCount(m.term) + ')',
      m.placed ? 'placed' : 'not placed yet'];
    if (m.replicas !== undefined) parts.push(fmtCount(m.replicas) + ' replicas per shard');
    if (m.rebalancing) parts.push('rebalancing');
    parts.push('moves: ' + fmtCount(m.moves_started) + ' started, ' + fmtCount(m.moves_finished) +
      ' finished, ' + fmtCount(m.moves_cancelled) + ' cancelled');
    return parts.join(' · ');
  }

  // The placement part of the card, from a server that places shards (its
  // GET /v1/cluster has "meta"; an older one's answer hides it). Fields it
  // lacks show as "–".
  function renderPlacement(c) {
    const box = $('cluster-placement');
    if (!c.meta) {
      box.hidden = true;
      return;
    }
    box.hidden = false;
    $('cluster-meta').textContent = fmtMeta(c.meta);
    const rebalance = $('cluster-rebalance');
    rebalance.disabled = clusterBusy || !!c.meta.rebalancing;
    $('cluster-placement-nodes-body').replaceChildren(...(c.nodes || []).map((n) => {
      // draining: asked already; drained: nothing left to move.
      const done = n.state === 'draining' || n.state === 'drained';
      return el('tr', {'data-node': n.id},
        el('td', {'data-col': 'node'}, n.id),
        el('td', {'data-col': 'state', class: n.state === 'active' || !n.state ? '' : 'warn'},
          n.state || '–'),
        el('td', {'data-col': 'replicas', class: 'num'}, fmtCount(n.replicas)),
        el('td', {'data-col': 'leads', class: 'num'}, fmtCount(n.leads)),
        el('td', {'data-col': 'drain'},
          el('button', {type: 'button', class: 'drain', 'data-node': n.id,
                        disabled: clusterBusy || done ? '' : undefined,
                        title: done ? n.id + ' is ' + n.state : 'drain ' + n.id}, 'Drain')));
    }));
    $('cluster-placement-shards-body').replaceChildren(...(c.shards || []).map((s) => el('tr', {},
      el('td', {'data-col': 'shard'}, String(s.shard)),
      el('td', {'data-col': 'replicas',
                title: s.config_version !== undefined ? 'configuration version ' + s.config_version : undefined},
        s.replicas && s.replicas.length ? s.replicas.join(', ') : '–'),
      el('td', {'data-col': 'move', class: s.moving ? 'warn' : ''}, fmtMove(s.moving)))));
  }

  // POST path and show its answer (or error) in the card.
  async function clusterAction(path, done) {
    const out = $('cluster-result');
    clusterBusy = true;
    $('cluster-rebalance').disabled = true;
    for (const b of document.querySelectorAll('button.drain')) b.disabled = true;
    out.replaceChildren(el('p', {class: 'muted'}, 'POST ' + path + '…'));
    try {
      const res = await api(path, {});
      out.replaceChildren(res.ok
        ? el('p', {'data-field': 'cluster-answer'}, done(res.body || {}))
        : el('p', {class: 'error', 'data-field': 'cluster-error'}, 'POST ' + path + ': ' + describeError(res)));
    } catch (e) {
      out.replaceChildren(el('p', {class: 'error', 'data-field': 'cluster-error'},
        'cannot reach onceqd: ' + e.message));
    } finally {
      clusterBusy = false;
    }
    refresh();
  }

  function setupCluster() {
    $('cluster-placement-nodes-body').addEventListener('click', (ev) => {
      const b = ev.target.closest('button.drain');
      if (!b || b.disabled) return;
      const node = b.getAttribute('data-node');
      if (!confirm('Drain node ' + node + '? Its replicas and shard leaderships move to the ' +
                   'other nodes, and it gets no new ones.')) return;
      clusterAction('/v1/cluster/nodes/' + encodeURIComponent(node) + '/drain',
        (a) => 'node ' + (a.node || node) + ': ' + (a.state || 'draining'));
    });
    $('cluster-rebalance').addEventListener('click', () => {
      clusterAction('/v1/cluster/rebalance', (a) => a.status || 'rebalancing');
    });
  }

  async function showVersion() {
    try {
      const v = await api('/v1/version');
      if (v.ok && v.body) $('version').textContent = 'v' + v.body.version + ' · ' + v.body.commit;
    } catch (e) {
      // The refresh loop reports an unreachable server.
    }
  }

  // ---- key lookup ---------------------------------------------------------

  // Parameters from the page's own URL: "#topic=a&group=b&key=c" or the
  // same as a query string, so that a link opens on a key.
  function urlParams() {
    const out = {};
    for (const src of [location.search.slice(1), location.hash.slice(1)]) {
      for (const [k, v] of new URLSearchParams(src)) {
        if (KEY_FIELDS.includes(k)) out[k] = v;
      }
    }
    return out;
  }

  function keyQuery(p) {
    const q = new URLSearchParams();
    for (const k of KEY_FIELDS) if (p[k]) q.set(k, p[k]);
    return q.toString();
  }

  function definition(list, term, value, field) {
    list.append(el('dt', {}, term), el('dd', {'data-field': field}, value));
  }

  async function lookupKey(p) {
    const out = $('key-result');
    const hist = $('key-history');
    out.replaceChildren(el('p', {class: 'muted'}, 'looking up…'));
    hist.replaceChildren();
    const q = keyQuery(p);
    let res;
    try {
      res = await api('/v1/keys?' + q);
    } catch (e) {
      out.replaceChildren(el('p', {class: 'error'}, 'cannot reach onceqd: ' + e.message));
      return;
    }
    if (!res.ok) {
      out.replaceChildren(el('p', {class: 'error', 'data-field': 'error'}, describeError(res)));
      return;
    }
    const k = res.body;
    const dl = el('dl', {});
    definition(dl, 'state', k.state, 'state');
    if (k.owner !== undefined) definition(dl, 'owner', k.owner, 'owner');
    if (k.partition !== undefined) {
      definition(dl, 'message', 'partition ' + k.partition + ', offset ' + k.offset, 'position');
    }
    if (k.attempts !== undefined) definition(dl, 'attempts', k.attempts, 'attempts');
    if (k.lease_expires_at_ms !== undefined) {
      definition(dl, 'lease expires', fmtTime(k.lease_expires_at_ms), 'lease_expires_at');
    }
    if (k.committed_at_ms !== undefined) {
      definition(dl, 'committed', fmtTime(k.committed_at_ms), 'committed_at');
    }
    if (k.expires_at_ms !== undefined) {
      definition(dl, 'expires', k.expires_at_ms ? fmtTime(k.expires_at_ms) : 'never', 'expires_at');
    }
    if (k.result !== undefined) {
      definition(dl, 'result', el('pre', {}, JSON.stringify(k.result, null, 2)), 'result');
    }
    out.replaceChildren(dl);
    await lookupHistory(q, hist);
  }

  // GET /v1/keys/history may not exist on this server: say so and go on.
  async function lookupHistory(q, hist) {
    let res;
    try {
      res = await api('/v1/keys/history?' + q);
    } catch (e) {
      return;
    }
    const title = el('h3', {}, 'History');
    if (res.status === 404 && res.body && /^no route/.test(res.body.message || '')) {
      hist.replaceChildren(title, el('p', {class: 'muted', 'data-field': 'history'},
        'not available on this server'));
      return;
    }
    if (!res.ok) {
      hist.replaceChildren(title, el('p', {class: 'muted', 'data-field': 'history'}, describeError(res)));
      return;
    }
    const b = res.body;
    const entries = Array.isArray(b) ? b
      : b && Array.isArray(b.history) ? b.history
      : b && Array.isArray(b.events) ? b.events
      : null;
    if (!entries) {
      hist.replaceChildren(title, el('pre', {'data-field': 'history'}, JSON.stringify(b, null, 2)));
      return;
    }
    if (entries.length === 0) {
      hist.replaceChildren(title, el('p', {class: 'muted', 'data-field': 'history'}, 'no events'));
      return;
    }
    const cols = [...new Set(entries.flatMap((e) => Object.keys(e)))];
    const cell = (v, c) => (c.endsWith('_ms') && v > 1e12 ? fmtTime(v)
      : typeof v === 'object' ? JSON.stringify(v) : v);
    const table = el('table', {'data-field': 'history'},
      el('thead', {}, el('tr', {}, ...cols.map((c) => el('th', {}, c)))),
      el('tbody', {}, ...entries.map((e) =>
        el('tr', {}, ...cols.map((c) => el('td', {}, e[c] === undefined ? '' : cell(e[c], c)))))));
    // A workflow step: the messages the committing ack produced, each a
    // link to the next step's topic.
    const made = entries.filter((e) => e.event === 'produced');
    const next = made.length === 0 ? [] : [
      el('h3', {}, 'Next steps'),
      el('ul', {'data-field': 'produced'}, ...made.map((e) =>
        el('li', {}, el('a', {href: '#topic=' + encodeURIComponent(e.topic)}, e.topic),
          ' partition ' + e.partition + ', offset ' + e.offset))),
    ];
    hist.replaceChildren(title, el('div', {class: 'scroll'}, table), ...next);
  }

  // ---- wiring -------------------------------------------------------------

  function setupToken() {
    const input = $('token');
    const show = () => {
      input.value = '';
      input.placeholder = token() ? 'token set for this tab' : 'only when auth is on';
    };
    $('token-form').addEventListener('submit', (ev) => {
      ev.preventDefault();
      if (input.value) sessionStorage.setItem(TOKEN_KEY, input.value.trim());
      show();
      refresh();
    });
    $('token-forget').addEventListener('click', () => {
      sessionStorage.removeItem(TOKEN_KEY);
      show();
      refresh();
    });
    show();
  }

  function setupKeyForm() {
    const form = $('key-form');
    const p = urlParams();
    for (const k of KEY_FIELDS) if (p[k]) form.elements[k].value = p[k];
    form.addEventListener('submit', (ev) => {
      ev.preventDefault();
      const q = {};
      for (const k of KEY_FIELDS) q[k] = form.elements[k].value.trim();
      // A link to this lookup (the fragment never reaches the server).
      history.replaceState(null, '', location.pathname + '#' + keyQuery(q));
      lookupKey(q);
    });
    if (p.topic && p.group && p.key) lookupKey(p);
  }

  setupToken();
  setupKeyForm();
  setupCluster();
  // replay.js, loaded first: the replay dialog, given what it uses of ours.
  window.onceqSetupReplay({$, el, api, describeError, fmtCount});
  showVersion();
  drawChart();
  window.addEventListener('resize', drawChart);
  refresh();
  setInterval(refresh, REFRESH_MS);
})();
