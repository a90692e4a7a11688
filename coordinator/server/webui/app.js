// Deltafin web UI: chat over POST /v1/chat/completions (server-sent events) and a cluster
// dashboard over GET /v1/cluster. Plain browser JavaScript, no framework and no build step:
// this file is served as written (compiled into the binary, coordinator/server/webui/).
// State kept in this browser (localStorage): the API key, the conversations, the settings.
'use strict';
(() => {
  const $ = (id) => document.getElementById(id);
  const STORE = { key: 'deltafin.apiKey', convs: 'deltafin.conversations',
                  current: 'deltafin.current', settings: 'deltafin.settings' };
  const POLL_MS = 1000;
  const MAX_TOKENS_CAP = 4096; // the default max_tokens: half the context, at most this
  const MAX_TOKENS_FALLBACK = 256; // ... or this while the context is not known

  // An HTTP header carries Latin-1 at most and fetch() throws on anything else; the server's
  // keys are ASCII text, so anything else is refused at the dialog (and ignored when stored).
  const validKey = (k) => /^[\x20-\x7e]*$/.test(k);
  let apiKey = localStorage.getItem(STORE.key) || '';
  if (!validKey(apiKey)) {
    apiKey = '';
    localStorage.removeItem(STORE.key);
  }
  let modelId = null;
  let ctxLen = null; // the served model's context (max_model_len of /v1/models)
  let keyNeeded = false; // the server refused the key we have (or its absence): 401
  let probed = false; // the first GET /v1/models has answered
  let busy = null; // the AbortController of the answer being streamed

  // ---- small helpers ------------------------------------------------------------------

  function el(tag, attrs, ...kids) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (k === 'class') e.className = v;
      else if (k === 'text') e.textContent = v;
      else if (k === 'style') e.style.cssText = v; // CSSOM: allowed by the page's CSP
      else if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
      else e.setAttribute(k, v);
    }
    for (const k of kids) if (k != null) e.append(k);
    return e;
  }

  function readJSON(key, fallback) {
    try {
      const v = JSON.parse(localStorage.getItem(key));
      return v == null ? fallback : v;
    } catch (e) {
      return fallback;
    }
  }

  function writeJSON(key, v) {
    try {
      localStorage.setItem(key, JSON.stringify(v));
    } catch (e) { /* full or disabled storage: the page still works, unsaved */ }
  }

  function authHeaders(extra) {
    const h = Object.assign({}, extra);
    if (apiKey) h.Authorization = 'Bearer ' + apiKey;
    return h;
  }

  function bytes(n) {
    if (!n) return '0';
    const u = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
    let i = 0;
    while (n >= 1024 && i < u.length - 1) { n /= 1024; i++; }
    return (i ? n.toFixed(1) : String(n)) + ' ' + u[i];
  }

  async function copyText(text, button) {
    try {
      await navigator.clipboard.writeText(text);
    } catch (e) { // not a secure context (plain http on a LAN address): the old way
      const t = el('textarea', { style: 'position:fixed;opacity:0' });
      t.value = text;
      document.body.append(t);
      t.select();
      document.execCommand('copy');
      t.remove();
    }
    const was = button.textContent;
    button.textContent = 'copied';
    setTimeout(() => { button.textContent = was; }, 1000);
  }

  function copyButton(get) {
    const b = el('button', { class: 'copy', type: 'button', title: 'copy to the clipboard', text: 'copy' });
    b.addEventListener('click', () => copyText(get(), b));
    return b;
  }

  // ---- API key ------------------------------------------------------------------------

  const dialog = $('key-dialog');

  function askKey(message) {
    $('key-error').textContent = message || '';
    $('key-input').value = apiKey;
    if (!dialog.open) dialog.showModal();
    $('key-input').focus();
  }

  $('key-button').addEventListener('click', () => askKey(''));
  $('key-form').addEventListener('submit', (ev) => {
    const k = $('key-input').value.trim();
    if (!validKey(k)) { // the dialog stays open
      ev.preventDefault();
      $('key-error').textContent = 'An API key is ASCII text: this one has other characters.';
      $('key-input').focus();
      return;
    }
    apiKey = k;
    if (apiKey) localStorage.setItem(STORE.key, apiKey);
    else localStorage.removeItem(STORE.key);
    keyNeeded = false;
    probe().then(() => poll());
  });
  $('key-forget').addEventListener('click', () => {
    apiKey = '';
    localStorage.removeItem(STORE.key);
    $('key-input').value = '';
  });

  // The served model's id (GET /v1/models); asks for the key when the server wants one.
  async function probe() {
    try {
      const r = await fetch('/v1/models', { headers: authHeaders() });
      if (r.status === 401) {
        modelId = null;
        keyNeeded = true;
        $('model-name').textContent = 'API key needed';
        askKey(apiKey ? 'The server refused this key.' : '');
        return false;
      }
      keyNeeded = false;
      const j = await r.json();
      const m = j.data && j.data.length ? j.data[0] : null;
      modelId = m ? m.id : null;
      ctxLen = m && m.max_model_len > 0 ? m.max_model_len : null;
      $('max-tokens').placeholder = 'default ' + defaultMaxTokens() +
        (ctxLen ? ' (context ' + ctxLen + ')' : '');
      $('model-name').textContent = modelId || '(no model)';
      document.body.dataset.ready = modelId ? '1' : '0';
      return !!modelId;
    } catch (e) {
      $('model-name').textContent = 'server unreachable';
      return false;
    } finally {
      probed = true;
    }
  }

  // ---- conversations ------------------------------------------------------------------

  let convs = readJSON(STORE.convs, []);
  if (!Array.isArray(convs)) convs = [];
  for (const c of convs) // an answer that was streaming when the page went away
    for (const m of c.messages || []) if (m.state === 'streaming') m.state = 'stopped';
  let currentId = localStorage.getItem(STORE.current);

  function newConv() {
    const c = { id: Date.now().toString(36) + Math.random().toString(36).slice(2, 6),
                title: 'New chat', messages: [] };
    convs.unshift(c);
    currentId = c.id;
    saveConvs();
    return c;
  }

  function current() {
    return convs.find((c) => c.id === currentId) || convs[0] || newConv();
  }

  function saveConvs() {
    writeJSON(STORE.convs, convs);
    if (currentId) localStorage.setItem(STORE.current, currentId);
  }

  function renderConvList() {
    const ul = $('conversations');
    ul.textContent = '';
    const cur = current();
    for (const c of convs) {
      const del = el('button', { type: 'button', title: 'delete this conversation', text: '×' });
      del.addEventListener('click', (ev) => {
        ev.stopPropagation();
        if (busy && c === cur) return;
        convs = convs.filter((x) => x !== c);
        if (c.id === currentId) currentId = convs.length ? convs[0].id : null;
        saveConvs();
        renderAll();
      });
      const li = el('li', { class: c === cur ? 'current' : '' }, el('span', { text: c.title }), del);
      li.addEventListener('click', () => {
        if (busy) return;
        currentId = c.id;
        saveConvs();
        renderAll();
      });
      ul.append(li);
    }
  }

  function statsText(m) {
    const s = m.stats;
    if (!s) return '';
    const parts = [];
    if (s.tokens != null) parts.push(s.tokens + ' tokens');
    if (s.tokS != null) parts.push(s.tokS.toFixed(1) + ' tok/s');
    if (s.firstMs != null) parts.push('first token ' + Math.round(s.firstMs) + ' ms');
    if (s.draft) parts.push('draft acceptance ' + (100 * s.draft.accepted_tokens / s.draft.draft_tokens).toFixed(0) +
                            '% (' + s.draft.accepted_tokens + '/' + s.draft.draft_tokens + ')');
    else if (s.tokens != null) parts.push('no draft');
    if (s.finish) parts.push('finish: ' + s.finish);
    return parts.join(' · ');
  }

  // One message's element; its parts are updated in place while it streams.
  function messageEl(m) {
    const role = el('div', { class: 'role' }, el('span', { text: m.role === 'user' ? 'You' : 'Assistant' }),
                    copyButton(() => m.content));
    const box = el('div', { class: 'msg ' + m.role }, role);
    box.dataset.state = m.state || 'done';
    if (m.role === 'assistant') {
      const rs = el('details', { class: 'reasoning' }, el('summary', { text: 'Reasoning' }),
                    el('div', { class: 'text' }));
      rs.hidden = !m.reasoning;
      box.append(rs);
    }
    box.append(el('div', { class: 'content' }));
    if (m.role === 'assistant') box.append(el('div', { class: 'stats' }), el('div', { class: 'error' }));
    updateMessageEl(box, m);
    return box;
  }

  function updateMessageEl(box, m) {
    box.dataset.state = m.state || 'done';
    box.classList.toggle('dropped', !!m.dropped);
    box.title = m.dropped ? 'left out of the requests: the conversation outgrew the context' : '';
    box.querySelector('.content').textContent = m.content;
    if (m.role !== 'assistant') return;
    const rs = box.querySelector('.reasoning');
    rs.hidden = !m.reasoning;
    rs.querySelector('.text').textContent = m.reasoning || '';
    box.querySelector('.stats').textContent = statsText(m);
    box.querySelector('.error').textContent = m.error ? m.error : m.state === 'stopped' ? 'stopped' : '';
  }

  function renderMessages() {
    const box = $('messages');
    box.textContent = '';
    for (const m of current().messages) box.append(messageEl(m));
    box.scrollTop = box.scrollHeight;
  }

  function renderAll() {
    renderConvList();
    renderMessages();
  }

  // ---- settings -----------------------------------------------------------------------

  const FIELDS = { system: 'system', temperature: 'temperature', top_p: 'top-p',
                   max_tokens: 'max-tokens', seed: 'seed' };
  const saved = readJSON(STORE.settings, {});
  for (const [k, id] of Object.entries(FIELDS)) {
    if (saved[k] != null) $(id).value = saved[k];
    $(id).addEventListener('change', () => {
      const s = {};
      for (const [k2, id2] of Object.entries(FIELDS)) s[k2] = $(id2).value;
      writeJSON(STORE.settings, s);
    });
  }

  const num = (id) => ($(id).value.trim() === '' ? null : Number($(id).value));

  // The request's sampling fields: only those set (empty = the server's default). max_tokens
  // is apart (maxTokens).
  function sampling() {
    const o = {};
    const t = num('temperature'), p = num('top-p'), s = num('seed');
    if (t != null) o.temperature = t;
    if (p != null) o.top_p = p;
    if (s != null) o.seed = Math.round(s);
    return o;
  }

  // Without max_tokens the server lets a chat answer run to the end of the context, which
  // leaves no room for the next turn: an empty field sends half the context instead.
  function defaultMaxTokens() {
    return ctxLen ? Math.max(1, Math.min(MAX_TOKENS_CAP, Math.floor(ctxLen / 2))) : MAX_TOKENS_FALLBACK;
  }
  function userMaxTokens() {
    const n = num('max-tokens');
    return n != null && n >= 1 ? Math.round(n) : null;
  }

  // ---- sending ------------------------------------------------------------------------

  function setBusy(controller) {
    busy = controller;
    $('send').disabled = !!controller;
    $('stop').disabled = !controller;
  }

  function setStatus(text, error) {
    $('chat-status').textContent = text || '';
    $('chat-status').className = 'status' + (error ? ' error' : '');
  }

  // Which earlier messages go to the server as history: not those left out for the context,
  // not a failed answer, and not the user turn that failed with it (never sent again).
  function included(msgs, i) {
    const m = msgs[i], next = msgs[i + 1];
    if (m.dropped || m.error || m.state === 'error' || m.content === '') return false;
    return !(m.role === 'user' && next && next.role === 'assistant' && next.state === 'error');
  }

  // Leaves the oldest turn (a user message and its answer) out of the requests; false when
  // there is none before `upto`.
  function dropOldest(conv, upto) {
    const msgs = conv.messages, end = msgs.indexOf(upto);
    for (let i = 0; i < end; i++) {
      if (!included(msgs, i)) continue;
      msgs[i].dropped = true;
      for (let k = i + 1; k < end && msgs[k].role !== 'user'; k++) msgs[k].dropped = true;
      return true;
    }
    return false;
  }

  async function send(text) {
    if (busy) return;
    const controller = new AbortController();
    setBusy(controller); // also while probing: one send at a time
    setStatus('');
    if (!modelId && !(await probe())) { // the text stays in the box
      setBusy(null);
      if (keyNeeded) askKey(apiKey ? 'The server refused this key.' : 'Enter the API key to send.');
      setStatus(keyNeeded ? 'Not sent: this server needs an API key.'
                          : 'Not sent: ' + $('model-name').textContent + '.', true);
      return;
    }
    $('prompt').value = '';
    const conv = current();
    const user = { role: 'user', content: text };
    const a = { role: 'assistant', content: '', reasoning: '', state: 'streaming' };
    const titled = !conv.messages.length;
    if (titled) conv.title = text.slice(0, 48);
    conv.messages.push(user, a);
    saveConvs();
    renderConvList();
    const list = $('messages');
    const ubox = messageEl(user);
    list.append(ubox);
    const box = messageEl(a);
    list.append(box);
    list.scrollTop = list.scrollHeight;

    const requested = userMaxTokens();
    let maxTokens = requested != null ? requested : defaultMaxTokens();
    let dropped = 0;
    const t0 = performance.now();
    let tFirst = null, tLast = null, usage = null, finish = null;
    const onEvent = (data) => {
      if (data === '[DONE]') return;
      const o = JSON.parse(data);
      if (o.error) throw new Error(o.error.message || 'the server failed');
      if (o.usage) usage = o.usage;
      const ch = o.choices && o.choices[0];
      if (!ch) return;
      const d = ch.delta || {};
      if (d.content || d.reasoning_content) {
        tLast = performance.now();
        if (tFirst == null) tFirst = tLast;
      }
      if (d.content) a.content += d.content;
      if (d.reasoning_content) a.reasoning += d.reasoning_content;
      if (ch.finish_reason) finish = ch.finish_reason;
    };
    try {
      let r;
      for (;;) {
        const system = $('system').value;
        const history = conv.messages.slice(0, -2).filter((m, i, all) => included(all, i))
          .map((m) => ({ role: m.role, content: m.content }));
        const messages = (system.trim() ? [{ role: 'system', content: system }] : [])
          .concat(history, [{ role: 'user', content: text }]);
        const body = Object.assign({ model: modelId, messages, stream: true,
                                     stream_options: { include_usage: true } }, sampling());
        if (maxTokens != null) body.max_tokens = maxTokens;
        r = await fetch('/v1/chat/completions', {
          method: 'POST', headers: authHeaders({ 'Content-Type': 'application/json' }),
          body: JSON.stringify(body), signal: controller.signal });
        if (r.ok) break;
        const j = await r.json().catch(() => null);
        const err = (j && j.error) || {};
        if (r.status === 400 && err.code === 'context_length_exceeded') {
          // too long for the context: leave the oldest turn out and try again, and at last,
          // with nothing left to leave out and no max_tokens of the user's, let the answer
          // have the rest of the context
          if (dropOldest(conv, user)) { dropped++; continue; }
          if (requested == null && maxTokens != null && err.param === 'max_tokens') { maxTokens = null; continue; }
        }
        if (r.status === 401) {
          keyNeeded = true;
          askKey('The server refused this key.');
        }
        throw new Error(err.message || 'HTTP ' + r.status);
      }
      if (dropped) {
        Array.from(list.children).forEach((e, i) => updateMessageEl(e, conv.messages[i]));
        const left = conv.messages.filter((m) => m.dropped).length;
        setStatus('The conversation no longer fits the model\'s context' + (ctxLen ? ' (' + ctxLen + ' tokens)' : '') +
                  ': ' + left + ' earlier message' + (left === 1 ? ' is' : 's are') +
                  ' left out of the requests (faded above). "New chat" starts afresh.');
      }
      const reader = r.body.getReader();
      const dec = new TextDecoder();
      let buf = '';
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buf += dec.decode(value, { stream: true }).replace(/\r\n/g, '\n');
        let i;
        while ((i = buf.indexOf('\n\n')) >= 0) {
          const ev = buf.slice(0, i);
          buf = buf.slice(i + 2);
          const data = ev.split('\n').filter((l) => l.startsWith('data:'))
            .map((l) => l.slice(5).replace(/^ /, '')).join('\n');
          if (data) onEvent(data); // lines starting with ':' are keep-alive comments
        }
        updateMessageEl(box, a);
        list.scrollTop = list.scrollHeight;
      }
      a.state = 'done';
    } catch (e) {
      if (e.name === 'AbortError') a.state = 'stopped';
      else {
        a.state = 'error';
        a.error = e.message;
      }
    }
    if (a.state === 'error' && !a.content && !a.reasoning) {
      // nothing came back: the turn is taken out of the conversation (it is never sent again)
      // and its text goes back into the box, to be changed or sent again
      conv.messages.splice(conv.messages.indexOf(user), 2);
      if (titled) conv.title = 'New chat';
      ubox.remove();
      box.remove();
      const p = $('prompt');
      p.value = p.value.trim() ? text + '\n\n' + p.value : text;
      setStatus('Not sent: ' + a.error + (/[.!?]$/.test(a.error) ? '' : '.') +
                ' Your message is back in the box.', true);
      saveConvs();
      renderConvList();
      setBusy(null);
      return;
    }
    const n = usage ? usage.completion_tokens : null;
    let tokS = null;
    if (n != null && n > 1 && tLast > tFirst) tokS = (n - 1) / ((tLast - tFirst) / 1000);
    else if (n != null && tLast > t0) tokS = n / ((tLast - t0) / 1000);
    a.stats = { tokens: n, tokS, firstMs: tFirst != null ? tFirst - t0 : null,
                draft: usage && usage.speculative && usage.speculative.draft_tokens > 0 ? usage.speculative : null,
                finish };
    updateMessageEl(box, a);
    saveConvs();
    setBusy(null);
  }

  $('composer').addEventListener('submit', (ev) => {
    ev.preventDefault();
    const text = $('prompt').value;
    if (!text.trim() || busy) return;
    send(text); // it empties the box once the message is on its way
  });
  $('prompt').addEventListener('keydown', (ev) => {
    if (ev.key === 'Enter' && !ev.shiftKey && !ev.isComposing) {
      ev.preventDefault();
      $('composer').requestSubmit();
    }
  });
  $('stop').addEventListener('click', () => { if (busy) busy.abort(); });
  $('new-chat').addEventListener('click', () => {
    if (busy) return;
    newConv();
    setStatus('');
    renderAll();
    $('prompt').focus();
  });

  // ---- views --------------------------------------------------------------------------

  function show(view) {
    for (const b of document.querySelectorAll('.tabs button')) {
      const on = b.dataset.view === view;
      b.setAttribute('aria-selected', on ? 'true' : 'false');
      $('view-' + b.dataset.view).hidden = !on;
    }
    if (location.hash !== '#' + view) history.replaceState(null, '', '#' + view);
    if (view !== 'cluster') $('live').textContent = '– tok/s'; // measured by the dashboard's polls
    poll();
  }
  for (const b of document.querySelectorAll('.tabs button')) b.addEventListener('click', () => show(b.dataset.view));

  // ---- cluster dashboard --------------------------------------------------------------

  const history_ = []; // tokens/s, one a poll
  let lastDraft = null; // the previous poll's draft counts
  let lastDoc = null;

  function nodeColor(i) {
    return 'hsl(' + ((i * 137.508 + 210) % 360).toFixed(0) + ' 62% 52%)';
  }
  const COORD_COLOR = '#8a8a92';
  const RAMP = [[27, 31, 59], [90, 42, 130], [192, 57, 43], [243, 156, 18], [255, 245, 176]];
  function heatColor(v) { // v in [0, 1]
    const x = Math.max(0, Math.min(1, v)) * (RAMP.length - 1), i = Math.min(Math.floor(x), RAMP.length - 2);
    const f = x - i, c = RAMP[i].map((a, k) => Math.round(a + (RAMP[i + 1][k] - a) * f));
    return 'rgb(' + c.join(',') + ')';
  }

  function drawSpark() {
    const cv = $('toks-spark'), g = cv.getContext('2d');
    g.clearRect(0, 0, cv.width, cv.height);
    const max = Math.max(1, ...history_);
    g.strokeStyle = getComputedStyle(document.documentElement).getPropertyValue('--accent') || '#2857c5';
    g.lineWidth = 1.5;
    g.beginPath();
    history_.forEach((v, i) => {
      const x = cv.width - (history_.length - 1 - i) * (cv.width / 119), y = cv.height - 2 - (v / max) * (cv.height - 4);
      if (i) g.lineTo(x, y); else g.moveTo(x, y);
    });
    g.stroke();
  }

  // Rows are layers, columns experts; a layer without routed experts stays empty.
  function drawGrid(cv, rows, nExperts, colorOf) {
    const cell = Math.max(3, Math.min(18, Math.floor(720 / Math.max(1, nExperts))));
    cv.width = nExperts * cell;
    cv.height = rows.length * cell;
    cv.dataset.cell = cell;
    const g = cv.getContext('2d');
    g.clearRect(0, 0, cv.width, cv.height);
    rows.forEach((row, l) => {
      if (!row) return;
      row.forEach((v, e) => {
        g.fillStyle = colorOf(v);
        g.fillRect(e * cell, l * cell, cell - (cell > 4 ? 1 : 0), cell - (cell > 4 ? 1 : 0));
      });
    });
  }

  function gridTip(cv, ev) {
    const tip = $('grid-tip');
    const d = lastDoc, cell = Number(cv.dataset.cell || 0);
    if (!d || !d.placement || !cell) { tip.hidden = true; return; }
    const r = cv.getBoundingClientRect(), sx = cv.width / r.width, sy = cv.height / r.height;
    const e = Math.floor((ev.clientX - r.left) * sx / cell), l = Math.floor((ev.clientY - r.top) * sy / cell);
    const row = d.placement[l];
    if (!row || e < 0 || e >= row.length) { tip.hidden = true; return; }
    const h = row[e], who = h < 0 ? 'coordinator' : (d.nodes[h] ? d.nodes[h].name : 'node ' + h);
    tip.textContent = 'layer ' + l + ', expert ' + e + ': ' + who + ', ' + d.heat[l][e] + ' rows';
    tip.style.left = ev.clientX + 12 + 'px';
    tip.style.top = ev.clientY + 12 + 'px';
    tip.hidden = false;
  }
  for (const id of ['placement', 'heat']) {
    $(id).addEventListener('mousemove', (ev) => gridTip($(id), ev));
    $(id).addEventListener('mouseleave', () => { $('grid-tip').hidden = true; });
  }

  function renderCluster(d) {
    const prev = lastDoc;
    lastDoc = d;
    const gen = d.generation;
    // live: tokens generated since the previous poll (the server's own figure is averaged
    // over 5 s windows of work)
    let rate = gen.tokens_per_second;
    if (prev && d.time > prev.time && gen.completion_tokens >= prev.generation.completion_tokens)
      rate = (gen.completion_tokens - prev.generation.completion_tokens) / ((d.time - prev.time) / 1000);
    $('c-mode').textContent = d.mode === 'cluster' ? 'cluster' : 'local';
    $('c-toks').textContent = rate.toFixed(1);
    $('live').textContent = rate.toFixed(1) + ' tok/s';
    history_.push(rate);
    if (history_.length > 120) history_.shift();
    drawSpark();
    const dr = gen.draft;
    let acc = '–';
    if (lastDraft && dr.draft_tokens > lastDraft.draft_tokens) {
      acc = (100 * (dr.accepted_tokens - lastDraft.accepted_tokens) /
             (dr.draft_tokens - lastDraft.draft_tokens)).toFixed(0) + '% now';
    } else if (dr.acceptance != null) acc = (100 * dr.acceptance).toFixed(0) + '% overall';
    else if (!dr.enabled) acc = 'no draft';
    lastDraft = dr;
    $('c-accept').textContent = acc;
    $('c-requests').textContent = gen.running + ' running, ' + gen.queued + ' queued';

    const tb = $('nodes');
    tb.textContent = '';
    const ready = d.nodes.filter((n) => n.health === 'ready').length;
    const live = d.nodes.filter((n) => n.health !== 'dropped').length;
    $('node-count').textContent = d.mode === 'cluster' ? ready + ' / ' + live : 'local';
    $('node-count').dataset.ready = String(ready);
    if (d.mode !== 'cluster') {
      tb.append(el('tr', {}, el('td', { colspan: '10', class: 'hint',
        text: 'Local mode: this process runs every expert. Start `deltafin serve --cluster` and join df-node machines to see them here.' })));
    }
    for (const n of d.nodes) {
      const gone = n.health === 'dropped'; // its last figures are stale
      const tr = el('tr', { 'data-health': n.health, 'data-name': n.name },
        el('td', {}, el('span', { class: 'swatch', style: 'background:' + nodeColor(n.index) }), n.name),
        el('td', {}, el('code', { text: n.key_fingerprint })),
        el('td', {}, el('span', { class: 'health ' + n.health, text: n.health })),
        el('td', { class: 'num', text: n.rtt_us && !gone ? (n.rtt_us / 1000).toFixed(2) + ' ms' : '–' }),
        el('td', { class: 'num', text: bytes(n.budget) + (n.device ? ' (' + bytes(n.device) + ' GPU)' : '') }),
        el('td', { class: 'num', text: gone ? '–' : bytes(n.held) }),
        el('td', { class: 'num', text: gone ? '–' : String(n.experts) }),
        el('td', { class: 'num', text: String(n.routed) }),
        el('td', { class: 'num', text: String(n.served) }),
        el('td', { class: 'num', text: String(n.errors) }));
      tb.append(tr);
    }
    const co = d.coordinator;
    $('coord-line').textContent = co
      ? 'Coordinator ' + co.key_fingerprint + ' on ' + co.endpoint + ' · ' + co.pairs + ' expert pairs, ' +
        co.pairs_on_coordinator + ' run by the coordinator · ' + co.round_trips + ' round trips, ' +
        bytes(co.bytes_tx) + ' sent, ' + bytes(co.bytes_rx) + ' received · ' + co.nodes_dropped + ' nodes dropped'
      : '';

    const grids = document.querySelector('.grids');
    grids.hidden = !d.placement;
    if (!d.placement) return;
    drawGrid($('placement'), d.placement, d.experts, (h) => (h < 0 ? COORD_COLOR : nodeColor(h)));
    let max = 0;
    for (const row of d.heat) if (row) for (const v of row) if (v > max) max = v;
    const lm = Math.log1p(max) || 1;
    drawGrid($('heat'), d.heat, d.experts, (v) => heatColor(Math.log1p(v) / lm));
    $('heat-max').textContent = 'max ' + max + ' rows (log scale)';
    const lg = $('placement-legend');
    lg.textContent = '';
    lg.append(el('span', {}, el('span', { class: 'swatch', style: 'background:' + COORD_COLOR }), 'coordinator'));
    for (const n of d.nodes) if (n.health !== 'dropped')
      lg.append(el('span', {}, el('span', { class: 'swatch', style: 'background:' + nodeColor(n.index) }), n.name));
  }

  // Polled only while the dashboard is on screen, and not while the server has refused the
  // key we have (or its absence): a new key starts it again.
  let polling = false;
  async function poll() {
    if (polling || !probed || $('view-cluster').hidden || document.visibilityState === 'hidden') return;
    const needKey = () => {
      $('c-status').textContent = 'The dashboard needs the API key (button at the top right).';
      $('c-status').className = 'status error';
    };
    if (keyNeeded) return needKey();
    polling = true;
    try {
      const r = await fetch('/v1/cluster', { headers: authHeaders(), cache: 'no-store' });
      if (r.status === 401) {
        keyNeeded = true;
        return needKey();
      }
      if (!r.ok) throw new Error('HTTP ' + r.status);
      renderCluster(await r.json());
      $('c-status').textContent = 'updated ' + new Date().toLocaleTimeString();
      $('c-status').className = 'status';
    } catch (e) {
      $('c-status').textContent = 'cannot reach the server: ' + e.message;
      $('c-status').className = 'status error';
    } finally {
      polling = false;
    }
  }

  // ---- start --------------------------------------------------------------------------

  renderAll();
  show(location.hash === '#cluster' ? 'cluster' : 'chat');
  probe().then(() => poll()); // the dashboard waits for it: it tells whether a key is needed
  setInterval(poll, POLL_MS);
  document.addEventListener('visibilitychange', poll);
})();
