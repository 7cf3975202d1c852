// The console's replay dialog (POST /v1/replay): pick a time range of a
// topic for a group, dry-run it, then apply exactly what the dry run showed.
// Loaded before app.js, which calls window.onceqSetupReplay once with the
// helpers it shares ($, el, api, describeError, fmtCount). Text from the
// server only ever goes into textContent, never into HTML.

window.onceqSetupReplay = function ({$, el, api, describeError, fmtCount}) {
  const REPLAY_OUTCOMES = ['already_committed', 'would_deliver', 'in_flight', 'pending',
    'dead_lettered', 'superseded', 'gone'];
  const REPLAY_MAX_PAGES = 100;  // 100 000 messages per click at most
  let replayTarget = null;       // {topic, group}
  let replayChecked = null;      // the request body the last dry run answered

  function toLocalInput(ms) {
    const d = new Date(ms - new Date(ms).getTimezoneOffset() * 60000);
    return d.toISOString().slice(0, 19);
  }

  function replayBody(dryRun) {
    const form = $('replay-form');
    return {
      topic: replayTarget.topic, group: replayTarget.group,
      from_ms: new Date(form.elements.from.value).getTime(),
      to_ms: new Date(form.elements.to.value).getTime(),
      dry_run: dryRun,
    };
  }

  // Every page of the range (each one its own transaction), summed.
  async function runReplay(body) {
    const total = {summary: {}, replayed: 0, more: false};
    for (const k of REPLAY_OUTCOMES) total.summary[k] = 0;
    let req = Object.assign({}, body);
    for (let page = 0; page < REPLAY_MAX_PAGES; ++page) {
      const res = await api('/v1/replay', req);
      if (!res.ok) return {error: 'POST /v1/replay: ' + describeError(res)};
      for (const k of REPLAY_OUTCOMES) total.summary[k] += res.body.summary[k] || 0;
      total.replayed += res.body.replayed || 0;
      if (typeof res.body.next !== 'string') return total;
      req = Object.assign({}, body, {cursor: res.body.next});
    }
    total.more = true;
    return total;
  }

  function showReplay(total, applied) {
    const out = $('replay-result');
    if (total.error) {
      out.replaceChildren(el('p', {class: 'warn', 'data-field': 'replay-error'}, total.error));
      return;
    }
    const rows = REPLAY_OUTCOMES.map((k) => el('tr', {},
      el('td', {}, k), el('td', {class: 'num', 'data-field': 'replay-' + k}, fmtCount(total.summary[k]))));
    const note = applied
      ? 'replayed ' + fmtCount(total.replayed) + ' message(s): they are pending for the group again.'
      : total.summary.would_deliver
        ? 'Apply delivers the ' + fmtCount(total.summary.would_deliver) + ' would_deliver message(s) again.'
        : 'Nothing to replay in this range.';
    out.replaceChildren(
      el('table', {'data-field': 'replay-summary'}, el('tbody', {}, ...rows)),
      el('p', {'data-field': applied ? 'replay-applied' : 'replay-note'}, note),
      total.more ? el('p', {class: 'warn'}, 'The range is larger than ' + REPLAY_MAX_PAGES +
        ' pages: run it again (pages already replayed are pending now).') : null);
  }

  // from_ms, to_ms: the range to show (default: the one shown last, or the
  // last hour).
  function openReplay(topic, group, fromMs, toMs) {
    replayTarget = {topic, group};
    replayChecked = null;
    $('replay-target').textContent = topic + ' · ' + group;
    const form = $('replay-form');
    const now = Date.now();
    if (fromMs !== undefined) form.elements.from.value = toLocalInput(fromMs);
    if (toMs !== undefined) form.elements.to.value = toLocalInput(toMs);
    if (!form.elements.from.value) form.elements.from.value = toLocalInput(now - 3600000);
    if (!form.elements.to.value) form.elements.to.value = toLocalInput(now);
    $('replay-apply').disabled = true;
    $('replay-result').replaceChildren();
    $('replay-dialog').showModal();
  }

  function setupReplay() {
    const form = $('replay-form');
    const apply = $('replay-apply');
    $('topics-body').addEventListener('click', (ev) => {
      const b = ev.target.closest('button.replay');
      if (b) openReplay(b.getAttribute('data-topic'), b.getAttribute('data-group'));
    });
    // Apply only what the dry run just showed.
    form.addEventListener('input', () => { apply.disabled = true; replayChecked = null; });
    const dryRun = async () => {
      const body = replayBody(true);
      const total = await runReplay(body);
      showReplay(total, false);
      replayChecked = total.error ? null : body;
      apply.disabled = !replayChecked || !total.summary.would_deliver;
    };
    form.addEventListener('submit', (ev) => {
      ev.preventDefault();
      dryRun();
    });
    apply.addEventListener('click', async () => {
      if (!replayChecked) return;
      apply.disabled = true;
      showReplay(await runReplay(Object.assign({}, replayChecked, {dry_run: false})), true);
      replayChecked = null;
    });
    $('replay-close').addEventListener('click', () => $('replay-dialog').close());
    // A link to a dry run (never to an apply):
    // #replay_topic=orders&replay_group=billing&replay_from_ms=...&replay_to_ms=...
    const p = new URLSearchParams(location.hash.slice(1) || location.search.slice(1));
    if (p.get('replay_topic') && p.get('replay_group')) {
      const ms = (k) => (p.get(k) ? Number(p.get(k)) : undefined);
      openReplay(p.get('replay_topic'), p.get('replay_group'), ms('replay_from_ms'),
        ms('replay_to_ms'));
      dryRun();
    }
  }

  setupReplay();
};
