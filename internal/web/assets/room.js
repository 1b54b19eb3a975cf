// Waiting room page (GET /e/{event_id}). Plain script, no build step, no dependencies; its words
// come from the catalogue in room-text.js, its wait range from eta-range.js, the pacing of its
// reconnects and retries from retry.js.
//
// The ticket id is kept in localStorage under "waitroom:<event_id>" so that reloads and other
// tabs keep the place. Updates arrive over WebSocket; after two failed connects the page falls
// back to Server-Sent Events, and when those cannot connect either, to polling the ticket as
// its poll_after_s says (trying the WebSocket again now and then). On admission the page goes
// to the event's redirect_url with ?waitroom_token=<admission token> appended, or, when there
// is none, says "It's your turn" with the person's number (the token only on request).
//
// The page heals by itself (docs/api.md, "Pages"): a push connection that says nothing for a
// few seconds (a WebSocket is asked with {"type":"ping"} after QUIET_MS of silence and must
// answer within PONG_WAIT_MS; an SSE stream carries a ping event every 5 s) is closed and
// opened again after a jittered back-off, so that behind a load balancer it reaches another
// instance (the back-off grows while connections keep dying within a minute of opening, and a
// 503 or 429's Retry-After is a floor: retry.js); every HTTP read gives up after FETCH_TIMEOUT_MS. A ticket that reads 404 after it
// was valid, or 503, is read again with back-off; after LOST_AFTER 404s in a row the store has
// lost it, and the page joins again by itself with the Idempotency-Key
// "rejoin-<this browser's secret>-<lost id>", the same in every tab and every retry, so that they
// all get one new place; the secret (random, kept in localStorage under "waitroom:secret") keeps
// the key out of reach of anyone who only knows the ticket id, such as a link's author.
//
// Behind the gate (internal/gateway) the page is opened as /e/{event_id}?ticket=<id>&return=<path>:
// the gate already joined, so the page adopts that ticket (and drops it from the address bar) —
// unless this browser holds a live place of its own already: a link never replaces it without the
// person's choice (a shared link must not move everyone who opens it onto one ticket), and a
// link's ticket that never reads is dropped, not rejoined;
// and on admission goes back to <path> on this site (the gate's cookie then lets the visitor in)
// instead of the redirect_url. A return that is not a path of this site is ignored.
(function () {
  'use strict';

  var QUIET_MS = 5000;         // WebSocket silence before the page asks with a ping
  var PONG_WAIT_MS = 4000;     // how long a ping may go unanswered
  var SSE_SILENCE_MS = 12000;  // SSE silence (the server's heartbeat is every 5 s)
  var OPEN_TIMEOUT_MS = 10000; // a connection that does not open in this time failed
  var FETCH_TIMEOUT_MS = 10000;
  var LOST_AFTER = 3;          // 404s in a row before the ticket counts as lost
  var UPGRADE_MS = 30000;      // while polling after failures, try the WebSocket again this often

  var text = window.waitroomText;
  var eventId = decodeURIComponent(location.pathname.split('/')[2] || '');
  var api = '/v1/events/' + encodeURIComponent(eventId);
  var storeKey = 'waitroom:' + eventId;
  var langKey = 'waitroom:lang';
  var params = new URLSearchParams(location.search);
  var returnTo = sameSitePath(params.get('return'));
  var returnURL = params.get('return_url'); // the site's page the gate middleware sent us from

  var info = null;       // GET /v1/events/{id}
  var ticket = null;     // {id, first}: first = the position when first seen (for the progress bar)
  var channel = null;    // the live connection: {close(), ws or es, since}
  var mode = 'ws';       // 'ws', then 'sse', then 'poll'
  var failures = 0;      // consecutive failed or stalled connects
  var openedAt = 0;      // when the live connection opened
  var retry = window.WaitroomRetry();
  var lost = 0;          // consecutive 404s of the ticket
  var retries = 0;       // consecutive reads of the ticket that got no answer (503, timeout)
  var upgrading = false; // trying the WebSocket again after falling back to polling
  var timer = 0;         // the pending reconnect or poll
  var pollSince = 0;     // when polling began after failures (for the WebSocket retry)
  var heard = 0;         // when the live connection last said anything
  var pinged = 0;        // when the page's unanswered ping was sent (0: none)
  var finished = false;  // a final state is shown (or we are leaving for the redirect)
  var admittedShown = false;
  var rejoining = false;
  var shown = {position: 0, waiting: -1};
  var eta = window.WaitroomETA();
  var clockSkew = 0;     // server time minus this clock (ms), from the Date header
  var lang = pickLanguage();

  // sameSitePath returns p when it is a path on this site ("/..."), else null.
  function sameSitePath(p) {
    if (!p || p.charAt(0) !== '/' || p.charAt(1) === '/' || p.charAt(1) === '\\' || /[\r\n\t]/.test(p)) return null;
    return p;
  }

  // handoffTarget is where an admitted person is sent with the token: the page of the site
  // they came from (?return_url=, which the Go middleware gate sends) when it is on the
  // redirect_url's own origin, else the redirect_url. Another origin is not followed: the
  // parameter is anyone's to write, and the token must go only where the event says.
  function handoffTarget(target) {
    if (!target || !returnURL) return target;
    try {
      var r = new URL(returnURL);
      var t = new URL(target, location.href);
      if ((r.protocol === 'https:' || r.protocol === 'http:') && r.origin === t.origin) return r.toString();
    } catch (e) { /* not a URL: the redirect_url */ }
    return target;
  }

  function $(id) { return document.getElementById(id); }
  function now() { return Date.now() + clockSkew; }

  // --- Words -------------------------------------------------------------------------------

  // pickLanguage: ?lang=, else the visitor's own choice, else what the server chose from
  // Accept-Language and the event's page.language (<html lang>), else English.
  function pickLanguage() {
    var q = params.get('lang');
    if (q && text[q]) return q;
    var stored = null;
    try { stored = localStorage.getItem(langKey); } catch (e) { /* private mode */ }
    if (stored && text[stored]) return stored;
    var h = document.documentElement.lang;
    return text[h] ? h : 'en';
  }

  // t returns the catalogue's string for key in the page's language, with {name} filled from vars.
  function t(key, vars) {
    var s = text[lang][key];
    if (s === undefined) s = text.en[key];
    if (s === undefined) return key;
    return s.replace(/\{(\w+)\}/g, function (m, k) { return vars && vars[k] !== undefined ? String(vars[k]) : m; });
  }
  // tn is t for a count: key_one or key_other as the language's plural rules say.
  function tn(key, n, vars) {
    var form = 'other';
    try { form = new Intl.PluralRules(lang).select(n); } catch (e) { /* old browser */ }
    var k = text[lang][key + '_' + form] !== undefined ? key + '_' + form : key + '_other';
    vars = vars || {};
    vars.n = num(n);
    return t(k, vars);
  }
  function num(n) { return n.toLocaleString(lang); }
  function time(d) { return d.toLocaleTimeString(lang); }

  // dyn holds the text of elements filled by the script, as functions, so that a change of
  // language redraws them.
  var dyn = {};
  function setText(id, fn) {
    dyn[id] = fn;
    $(id).textContent = fn();
  }
  function setKey(id, key, vars) { setText(id, function () { return t(key, vars); }); }

  function applyLanguage() {
    document.documentElement.lang = lang;
    Array.prototype.forEach.call(document.querySelectorAll('[data-t]'), function (el) {
      if (!dyn[el.id]) el.textContent = t(el.getAttribute('data-t'));
    });
    Array.prototype.forEach.call(document.querySelectorAll('[data-t-aria]'), function (el) {
      el.setAttribute('aria-label', t(el.getAttribute('data-t-aria')));
    });
    Object.keys(dyn).forEach(function (id) { $(id).textContent = dyn[id](); });
    document.title = info ? t('window_title', {name: title()}) : t('eyebrow');
  }

  function setupLanguages() {
    var sel = $('lang');
    Object.keys(text).forEach(function (code) {
      var o = document.createElement('option');
      o.value = code;
      o.lang = code;
      o.textContent = text[code].language_name;
      sel.appendChild(o);
    });
    sel.value = lang;
    sel.addEventListener('change', function () {
      lang = sel.value;
      try { localStorage.setItem(langKey, lang); } catch (e) { /* private mode */ }
      applyLanguage();
    });
  }

  // --- Durations and the wait range -----------------------------------------------------

  // dur says a duration of whole minutes: "5 min", "1 h", "1 h 20 min".
  function dur(min) {
    if (min < 60) return tn('dur_min', min);
    var h = Math.floor(min / 60), m = min % 60;
    return m ? t('dur_h_min', {h: num(h), m: num(m)}) : t('dur_h', {h: num(h)});
  }
  function durS(s) { return dur(Math.max(1, Math.round(s / 60))); }

  // rangeText says [P50, P90] (s): minutes rounded outwards, to 5 minutes past the hour.
  function rangeText(r) {
    if (!r) return t('eta_calculating');
    if (r[1] < 60) return r[0] < 5 ? t('eta_soon') : t('eta_under_minute');
    var step = r[1] >= 3600 ? 5 : 1;
    var lo = Math.floor(r[0] / 60 / step) * step, hi = Math.ceil(r[1] / 60 / step) * step;
    if (hi <= lo) hi = lo + step;
    if (lo < 1) return t('eta_under', {d: dur(hi)});
    if (hi < 60) return t('eta_range_min', {lo: num(lo), hi: num(hi)});
    return t('eta_range', {lo: dur(lo), hi: dur(hi)});
  }

  function untilOpen() {
    if (!info || !info.opens_at) return 0;
    return Math.max(0, (Date.parse(info.opens_at) - now()) / 1000);
  }

  // --- Views -------------------------------------------------------------------------------

  function show(view) {
    ['loading', 'join', 'wait', 'turn', 'end'].forEach(function (v) { $('view-' + v).hidden = v !== view; });
    document.body.setAttribute('data-view', view);
    $('about').hidden = view !== 'join' && view !== 'wait';
    tickClock();
  }

  function setConnection(live, key) {
    $('connection').classList.toggle('live', live);
    setKey('connection-text', key);
  }

  function load() {
    try { return JSON.parse(localStorage.getItem(storeKey)); } catch (e) { return null; }
  }
  function save() {
    try { localStorage.setItem(storeKey, JSON.stringify(ticket)); } catch (e) { /* private mode: the place lasts this tab */ }
  }
  function forget() {
    ticket = null;
    try { localStorage.removeItem(storeKey); } catch (e) { /* ignore */ }
  }

  // renderPosition shows the place in line. The live region (the position) changes only when
  // the place does, so a screen reader announces moves, not every ETA tick.
  function renderPosition(position, waiting, etaS) {
    if (!ticket) return;
    if (!position) { // a pre-queue whose places are drawn at the opening (docs/draw.md)
      show('wait');
      setText('position', function () { return '–'; });
      shown.position = 0;
      if (waiting >= 0) shown.waiting = waiting;
      setKey('ahead', 'drawn_at_opening');
      var drawn = shown.waiting;
      setText('behind', function () { return drawn >= 0 ? tn('in_draw', drawn) : '–'; });
      tickClock();
      return;
    }
    if (!ticket.first || position > ticket.first) { ticket.first = position; save(); }
    show('wait');
    if (position !== shown.position) {
      setText('position', function () { return num(position); });
      shown.position = position;
    }
    if (waiting >= 0) shown.waiting = Math.max(waiting, position);
    if (etaS !== undefined && etaS !== null) eta.update(now(), etaS, position, untilOpen());
    setText('ahead', function () { return tn('people', position - 1); });
    var behind = shown.waiting;
    setText('behind', function () { return behind >= 0 ? tn('people', behind - position) : '–'; });
    tickClock();
    var pct = Math.round(100 * (ticket.first - position + 1) / ticket.first);
    $('progress-bar').style.width = pct + '%';
    $('progress').setAttribute('aria-valuenow', String(pct));
  }

  // tickClock redraws what moves with the clock: the countdown to the opening and the wait
  // range. Run every second.
  function tickClock() {
    var cd = $('countdown');
    var view = document.body.getAttribute('data-view');
    var left = untilOpen();
    if (info && info.state === 'pre_queue' && left > 0 && (view === 'join' || view === 'wait')) {
      setText('countdown-time', function () { return countdown(left); });
      cd.hidden = false;
    } else {
      if (!cd.hidden && info && info.state === 'pre_queue') loadInfo(); // it just opened
      cd.hidden = true;
    }
    if (view === 'wait') {
      var r = eta.range(now());
      setText('eta', function () { return info && info.state === 'paused' ? t('eta_paused') : rangeText(r); });
    }
  }

  function countdown(s) {
    s = Math.ceil(s);
    var d = Math.floor(s / 86400), h = Math.floor(s % 86400 / 3600), m = Math.floor(s % 3600 / 60), x = s % 60;
    var two = function (v) { return (v < 10 ? '0' : '') + v; };
    var hms = two(h) + ':' + two(m) + ':' + two(x);
    return d > 0 ? t('countdown_days', {d: num(d), hms: hms}) : hms;
  }

  // admitted shows the person's turn. Behind the gate (returnTo) or with the event's
  // redirect_url the page sends them on with the token; without either it says "It's your
  // turn" and shows their number (to show at a counter, or to support), keeping the page open
  // (which keeps the session active); the token, a short-lived JWT of no use to a person, is
  // shown only on request, for a site that asks for it.
  function admitted(m) {
    admittedShown = true;
    var target = handoffTarget(m.redirect_url || (info && info.redirect_url));
    $('token').value = m.admission_token;
    if (returnTo) {
      leaving();
      location.assign(location.origin + returnTo);
      return;
    }
    var until = new Date(m.admitted_until);
    setText('turn-until', function () { return isNaN(until) ? '' : t('turn_until', {time: time(until)}); });
    if (!isNaN(until)) sessionEndWarning(until);
    if (target) {
      var u = null;
      try { u = new URL(target, location.href); } catch (e) { u = null; }
      if (u && (u.protocol === 'https:' || u.protocol === 'http:')) {
        u.searchParams.set('waitroom_token', m.admission_token);
        leaving();
        location.assign(u.toString());
        return;
      }
    }
    if (m.number) {
      var number = m.number;
      setText('turn-number', function () { return num(number); });
      $('turn-number-box').hidden = false;
    }
    var wasShown = document.body.getAttribute('data-view') === 'turn';
    show('turn');
    if (!wasShown) $('view-turn').querySelector('h2').focus();
    if (!isNaN(until)) renewOverSSE(Math.min(30, Math.max(1, (until.getTime() - Date.now()) / 3000)));
  }

  // renewOverSSE keeps an admitted page's session alive while it follows its ticket over SSE,
  // which carries nothing from the page (over a WebSocket the hub renews it while the page says
  // it is visible): while the page is visible it reads the ticket after wait seconds, and then
  // every poll_after_s (a third of the session's time left, at most 30 s); each read renews the
  // session. Hidden, it lets the session lapse, as a hidden WebSocket page does: the stream
  // says expired when it ends, and becoming visible again reads the ticket within a second.
  var renewTimer = 0;
  function renewOverSSE(wait) {
    clearTimeout(renewTimer);
    renewTimer = 0;
    if (finished || !admittedShown || mode !== 'sse' || !channel || document.hidden) return;
    renewTimer = setTimeout(function () {
      renewTimer = 0;
      check().then(function (res) { if (res.ok) renewOverSSE(res.wait); });
    }, Math.max(1, wait || 1) * 1000);
  }

  // leaving says the person is being sent on, and stops following the ticket.
  function leaving() {
    finished = true;
    stop();
    setKey('turn-text', 'turn_admitted');
    $('turn-here').hidden = true;
    $('token-box').hidden = true;
    $('turn-redirect').hidden = false;
    show('turn');
  }

  // sessionEndWarning warns a minute ahead of the admitted session's absolute end
  // (session_max_s): an admitted_until sooner than a fresh session_ttl_s from now is that end,
  // which no activity moves. The warning is a role="alert" paragraph, read out once.
  var warnTimer = null;
  function sessionEndWarning(until) {
    clearTimeout(warnTimer);
    var ttl = info && info.session_ttl_s ? info.session_ttl_s * 1000 : 0;
    var left = until.getTime() - Date.now();
    var note = $('turn-warning');
    if (!ttl || left >= ttl - 5000) { note.hidden = true; return; }
    var warn = function () {
      setKey('turn-warning', 'turn_warning', {time: time(until)});
      note.hidden = false;
    };
    if (left <= 60000) warn(); else warnTimer = setTimeout(warn, left - 60000);
  }

  function end(reason, again) {
    clearTimeout(warnTimer);
    finished = true;
    stop();
    forget();
    setKey('end-title', 'end_' + reason + '_title');
    setKey('end-text', 'end_' + reason + '_text');
    $('again').hidden = !again;
    show('end');
    $('end-title').focus();
  }

  // handle applies one message (from the push channel, or made from a ticket answer).
  function handle(m) {
    if (finished || !m || !m.type) return;
    switch (m.type) {
      case 'position': renderPosition(m.position, m.waiting, m.eta_s); break;
      case 'stats': if (shown.position && !admittedShown) renderPosition(shown.position, m.waiting); break;
      case 'admitted': admitted(m); break;
      case 'expired': end('expired', true); break;
      case 'sold_out': end('sold_out', false); break;
      case 'closed': end('closed', false); break;
      case 'completed': end('completed', false); break;
      case 'not_found': stop(); recheck(); break; // left, or the store lost it: find out which
      case 'reconnect': reconnectSoon(); break;
    }
  }

  // fromTicket turns a ticket answer of the HTTP API into a message.
  function fromTicket(tk) {
    switch (tk.status) {
      case 'QUEUED': return {type: 'position', position: tk.position, waiting: tk.waiting, eta_s: tk.eta_s};
      case 'ADMITTED': return {type: 'admitted', admission_token: tk.admission_token, admitted_until: tk.admitted_until, number: tk.number};
      case 'EXPIRED': return {type: 'expired'};
      case 'SOLD_OUT': return {type: 'sold_out'};
      case 'CLOSED': return {type: 'closed'};
      case 'COMPLETED': return {type: 'completed'};
    }
    return null;
  }

  // --- HTTP ----------------------------------------------------------------------------------

  // req is fetch with a deadline (FETCH_TIMEOUT_MS until the answer's headers) and no cache.
  function req(url, opts) {
    opts = opts || {};
    opts.cache = 'no-store';
    var ac = window.AbortController ? new AbortController() : null;
    var tm = 0;
    if (ac) {
      opts.signal = ac.signal;
      tm = setTimeout(function () { ac.abort(); }, FETCH_TIMEOUT_MS);
    }
    return fetch(url, opts).then(function (r) { clearTimeout(tm); return r; }, function (e) { clearTimeout(tm); throw e; });
  }

  function problem(r) { return r.json().catch(function () { return {}; }); }

  // backoff is a jittered delay (ms) for the n-th retry in a row: 0.5-1 s, doubling to 15-30 s.
  function backoff(n) { return retry.backoff(n); }

  // --- The live connection -------------------------------------------------------------------

  function stop() {
    clearTimeout(timer);
    timer = 0;
    clearTimeout(renewTimer);
    renewTimer = 0;
    if (channel) { var c = channel; channel = null; c.close(); }
  }

  function ticketURL() { return api + '/tickets/' + encodeURIComponent(ticket.id); }

  function connect() {
    stop();
    if (finished || !ticket) return;
    if (mode === 'ws' && 'WebSocket' in window) return openWebSocket();
    if (mode !== 'poll' && 'EventSource' in window) { mode = 'sse'; return openEventSource(); }
    if (mode !== 'poll') pollSince = Date.now();
    mode = 'poll';
    poll();
  }

  // retryLater reconnects after a live connection ended: after a back-off that grows while
  // connections keep ending within a minute of opening (retry.dropped).
  function retryLater() {
    clearTimeout(timer);
    timer = setTimeout(connect, retry.dropped(Date.now(), openedAt));
  }

  // reconnectSoon reconnects within 0.3-2 s: the instance is restarting and the others should
  // not all be hit in the same instant.
  function reconnectSoon() {
    stop();
    setConnection(false, 'conn_reconnecting');
    timer = setTimeout(connect, 300 + Math.random() * 1700);
  }

  // failed ends a connection that went silent, did not open or was refused. A silent one
  // (opened) is a network fault: connect again at once, after the back-off (a new connection
  // may reach another instance; its first message is the ticket's status). One that did not
  // open may have been refused for the ticket's sake: read the ticket first (recheck).
  function failed(opened) {
    stop();
    if (finished) return;
    failures++;
    if (upgrading) {
      upgrading = false; // the WebSocket still does not work: back to polling
      mode = 'poll';
      pollSince = Date.now();
    } else if (!opened && failures >= 2) {
      mode = mode === 'ws' ? 'sse' : 'poll';
    }
    setConnection(false, 'conn_reconnecting');
    if (opened) return retryLater();
    check().then(function (res) {
      if (!res.ok || finished || channel) return;
      clearTimeout(timer);
      timer = res.read ? setTimeout(connect, backoff(failures)) : setTimeout(recheck, res.wait * 1000);
    });
  }

  function hear() { heard = Date.now(); pinged = 0; }

  // watch runs every second: it asks a quiet WebSocket with a ping, and gives up on one that
  // does not answer, an SSE stream without its heartbeat, or a connection that does not open.
  function watch() {
    var c = channel;
    if (!c || finished) return;
    var at = Date.now();
    var opening = c.ws ? c.ws.readyState === 0 : c.es.readyState !== 1;
    if (opening) {
      if (at - c.since > OPEN_TIMEOUT_MS) failed(false);
      return;
    }
    if (c.ws) {
      if (pinged && at - pinged >= PONG_WAIT_MS) return failed(true);
      if (!pinged && at - heard >= QUIET_MS) {
        pinged = at;
        try { c.ws.send('{"type":"ping"}'); } catch (e) { /* closing: onclose follows */ }
      }
    } else if (at - heard >= SSE_SILENCE_MS) {
      failed(true);
    }
  }

  function sendVisibility() {
    if (channel && channel.ws && channel.ws.readyState === 1) {
      channel.ws.send(JSON.stringify({type: document.visibilityState === 'visible' ? 'visible' : 'hidden'}));
    }
  }

  function openWebSocket() {
    var ws = new WebSocket((location.protocol === 'https:' ? 'wss://' : 'ws://') + location.host + ticketURL() + '/ws');
    var opened = false;
    var me = {ws: ws, since: Date.now(), close: function () { ws.onclose = null; ws.close(); }};
    channel = me;
    ws.onopen = function () { opened = true; openedAt = Date.now(); failures = 0; upgrading = false; hear(); setConnection(true, 'conn_live'); sendVisibility(); };
    ws.onmessage = function (e) {
      hear();
      var m;
      try { m = JSON.parse(e.data); } catch (x) { return; }
      lost = 0;
      handle(m);
    };
    ws.onclose = function (e) {
      if (channel !== me) return;
      channel = null;
      if (finished) return;
      if (e.code === 1012) return reconnectSoon(); // the instance restarts: the others take over
      if (opened && e.code !== 1006) { setConnection(false, 'conn_reconnecting'); return retryLater(); }
      failed(opened);
    };
  }

  function openEventSource() {
    var es = new EventSource(ticketURL() + '/events');
    var me = {es: es, since: Date.now(), close: function () { es.close(); }};
    channel = me;
    es.onopen = function () { failures = 0; openedAt = Date.now(); hear(); setConnection(true, 'conn_live'); };
    es.addEventListener('ping', hear); // the server's heartbeat
    es.onmessage = function (e) {
      hear();
      var m;
      try { m = JSON.parse(e.data); } catch (x) { return; }
      if (m.type === 'reconnect') return; // the stream ends; EventSource reconnects by itself
      lost = 0;
      handle(m);
    };
    es.onerror = function () {
      if (channel !== me) return;
      if (es.readyState === 2) return failed(false); // CLOSED: the server refused (503, 404)
      me.since = Date.now(); // EventSource connects again by itself: give it OPEN_TIMEOUT_MS
      setConnection(false, 'conn_reconnecting');
    };
  }

  // check reads the ticket once and applies what it reads. It resolves to {ok, read, wait}:
  // ok is false when the page stops following the ticket (the event is gone, a final status,
  // or the ticket is lost and being replaced); read is true when the ticket was read; wait is
  // when to read it again (s): poll_after_s, or a back-off after a 404, a 503 or no answer.
  function check() {
    if (!ticket) return Promise.resolve({ok: false});
    var id = ticket.id;
    return req(ticketURL()).then(function (r) {
      if (!ticket || ticket.id !== id) return {ok: false};
      // 404: ticket_not_found, or event_not_found while a store that lost the line has not
      // been given the event back yet. A deleted event shows when the page joins again.
      if (r.status === 404) return gone(id);
      // 429, or a 503 (the store is away, the instance is overloaded): back off, never sooner
      // than Retry-After says.
      if (!r.ok) return {ok: true, wait: retry.after(Number(r.headers.get('Retry-After')), ++retries) / 1000};
      return r.json().then(function (tk) {
        lost = 0;
        retries = 0;
        if (ticket && ticket.link) { delete ticket.link; save(); } // it read: it is this visitor's now
        handle(fromTicket(tk));
        return {ok: !finished, read: true, wait: tk.poll_after_s};
      });
    }, function () { return {ok: true, wait: backoff(++retries) / 1000}; });
  }

  // gone counts a 404 of the ticket id (a 404 after a failover may be a replica behind: read
  // again); LOST_AFTER in a row and the place is taken again.
  function gone(id) {
    lost++;
    if (lost < LOST_AFTER) return {ok: true, wait: backoff(lost) / 1000};
    lost = 0;
    if (ticket && ticket.link) {
      // A link's ticket that never read is nobody's place to take back: drop it.
      forget();
      ticket = null;
      show('join');
      return {ok: false};
    }
    rejoin(id);
    return {ok: false};
  }

  // recheck reads the ticket until it reads (with back-off), then follows it live: at the
  // start, after a push channel said not_found, and after a failed connect.
  function recheck() {
    if (finished || !ticket) return;
    check().then(function (res) {
      if (!res.ok || finished || channel) return;
      clearTimeout(timer);
      if (!res.read) {
        setConnection(false, lost > 0 ? 'conn_recovering' : 'conn_reconnecting');
        timer = setTimeout(recheck, res.wait * 1000);
        return;
      }
      connect();
    });
  }

  // poll is the last fallback: read the ticket as often as the server asks. An admitted page
  // reads it only while visible (each read renews the session). After failures it tries the
  // WebSocket again every UPGRADE_MS.
  function poll() {
    if (finished || !ticket) return;
    if (admittedShown && document.hidden) return; // visibilitychange resumes it
    setConnection(false, 'conn_polling');
    check().then(function (res) {
      if (!res.ok || finished || mode !== 'poll' || channel) return;
      if (res.read && Date.now() - pollSince >= UPGRADE_MS && 'WebSocket' in window) {
        mode = 'ws';
        upgrading = true;
        return connect();
      }
      timer = setTimeout(poll, Math.max(1, res.wait || 1) * 1000);
    });
  }

  // --- Joining and leaving ---------------------------------------------------------------

  // joinKey names the join being attempted: sent as Idempotency-Key with every try until one
  // answers, so a try whose answer was lost (a timeout, a 503 after the join was made) takes
  // no second place when the person tries again.
  var joinKey = null;

  // browserSecret is this browser's random secret for the keys it derives (the rejoin's): made
  // once, kept in localStorage so that every tab derives the same key; a tab without storage
  // keeps its own.
  var secret = null;
  function browserSecret() {
    if (secret) return secret;
    try { secret = localStorage.getItem('waitroom:secret'); } catch (e) { /* private mode */ }
    if (!secret || !/^[0-9a-f]{32}$/.test(secret)) {
      secret = newJoinKey().replace(/-/g, '');
      try { localStorage.setItem('waitroom:secret', secret); } catch (e) { /* private mode */ }
    }
    return secret;
  }

  function newJoinKey() {
    if (window.crypto && crypto.randomUUID) return crypto.randomUUID();
    var b = new Uint8Array(16);
    crypto.getRandomValues(b);
    return Array.prototype.map.call(b, function (x) { return ('0' + x.toString(16)).slice(-2); }).join('');
  }

  // requestTicket makes one join try with joinKey. It resolves to {ticket} (a ticket answer),
  // {end: reason}, or {error: catalogue key, retry: true when trying again may work}. For an
  // event that asks joins for a proof of work it first solves one (prove), and sends it with
  // every try of the same joinKey: a retry of a join that used it gets its ticket back. A join
  // refused for its challenge gets a new one at once, at most three times in a row.
  function requestTicket(refused) {
    refused = refused || 0;
    return prove().then(function (res) {
      if (res) return res;
      var opts = {method: 'POST', headers: {'Idempotency-Key': joinKey}};
      if (proof) {
        opts.headers['Content-Type'] = 'application/json';
        opts.body = JSON.stringify(proof);
      }
      return req(api + '/tickets', opts).then(function (r) {
        if (r.status === 200 || r.status === 201) return r.json().then(function (tk) { return {ticket: tk}; });
        return problem(r).then(function (p) {
          if (p.code === 'challenge_required' || p.code === 'challenge_failed') {
            proof = null;
            needProof = true;
            if (refused < 3) return requestTicket(refused + 1);
            return {error: 'err_challenge', retry: true};
          }
          if (r.status === 410) return {end: p.code === 'sold_out' ? 'sold_out' : 'closed'};
          if (r.status === 404) return {error: 'err_no_event'};
          // The site's setting, not a busy line: a retry is refused the same way.
          if (p.code === 'origin_not_allowed') return {error: 'err_origin'};
          // The event takes only joins that name their user (the shop's signed-in customers),
          // which this page cannot make: a retry is refused the same way.
          if (p.code === 'identity_required') return {error: 'err_identity'};
          return {error: 'err_busy', retry: true};
        });
      }, function () { return {error: 'err_network', retry: true}; });
    });
  }

  // --- The challenge (docs/challenge.md) -----------------------------------------------------

  // proof is the solved challenge the joins of joinKey carry ({challenge, solution}); needProof
  // says the event asks for one (its configuration, or a join refused without one).
  var proof = null, needProof = false;

  // prove fetches a challenge and solves it in a Web Worker (/assets/pow-worker.js: the work
  // never blocks the page), showing the progress, when the event asks for one and there is no
  // proof yet. It resolves to nothing when the join may go, or to {error, retry}.
  function prove() {
    var pow = needProof || (info && info.challenge && info.challenge.type === 'pow');
    if (proof || !pow) return Promise.resolve(null);
    return req(api + '/challenge').then(function (r) {
      if (!r.ok) return {error: r.status === 404 ? 'err_no_event' : 'err_busy', retry: r.status !== 404};
      return r.json().then(function (c) {
        if (c.type === 'none') { needProof = false; return null; }
        if (c.type !== 'pow') return {error: 'err_challenge_external'};
        return solve(c.challenge).then(function (solution) {
          proof = {challenge: c.challenge, solution: solution};
          return null;
        }, function () { return {error: 'err_challenge', retry: true}; });
      });
    }, function () { return {error: 'err_network', retry: true}; });
  }

  // solve runs the worker on challenge and resolves to its solution. The bar shows the chance
  // that the work is done by now (1 - e^(-hashes/expected): the number of tries is geometric),
  // so it moves steadily and promises no finish time.
  function solve(challenge) {
    return new Promise(function (resolve, reject) {
      var w;
      try { w = new Worker('/assets/pow-worker.js'); } catch (e) { reject(e); return; }
      var bar = $('challenge-progress');
      var set = function (pct) {
        $('challenge-bar').style.width = pct + '%';
        bar.setAttribute('aria-valuenow', String(pct));
      };
      set(0);
      $('challenge').hidden = false;
      var done = function () { w.terminate(); $('challenge').hidden = true; };
      w.onmessage = function (e) {
        var m = e.data;
        if (m.type === 'progress') set(Math.min(99, Math.round(100 * (1 - Math.exp(-m.hashes / m.estimate)))));
        else if (m.type === 'solved') { set(100); done(); resolve(m.solution); }
        else if (m.type === 'error') { done(); reject(new Error(m.message)); }
      };
      w.onerror = function (e) { done(); reject(e); };
      w.postMessage({challenge: challenge});
    });
  }

  // follow takes a new ticket answer and follows it.
  // follow shows tk and follows it; replaced: the id of the lost ticket tk replaces (rejoin),
  // stored with it in the same write so that every other tab learns both at once.
  function follow(tk, replaced) {
    joinKey = null;
    proof = null;
    ticket = {id: tk.ticket_id, first: tk.position || 0};
    if (replaced) ticket.rejoined = replaced;
    save();
    finished = false;
    mode = 'ws';
    failures = 0;
    lost = 0;
    retries = 0;
    upgrading = false;
    shown = {position: 0, waiting: -1};
    eta.reset();
    handle(fromTicket(tk));
    if (!finished) connect();
  }

  function join() {
    var btn = $('join');
    btn.disabled = true;
    $('join-error').hidden = true;
    if (!joinKey) joinKey = newJoinKey();
    requestTicket().then(function (res) {
      btn.disabled = false;
      if (res.ticket) return follow(res.ticket);
      if (res.end) return end(res.end, false);
      setKey('join-error', res.error);
      $('join-error').hidden = false;
    });
  }

  // rejoin takes a new place for the lost ticket id, without a click: the key is the same for
  // every retry and every tab that lost the same ticket, so they all get the same new place.
  function rejoin(lostId) {
    if (rejoining) return;
    rejoining = true;
    stop();
    setConnection(false, 'conn_recovering');
    joinKey = 'rejoin-' + browserSecret() + '-' + lostId;
    var tries = 0;
    var attempt = function () {
      if (!ticket || ticket.id !== lostId) { rejoining = false; return; } // another tab did it
      requestTicket().then(function (res) {
        if (res.retry) { timer = setTimeout(attempt, backoff(++tries)); return; }
        rejoining = false;
        if (res.ticket) {
          follow(res.ticket, lostId); // the other tabs that followed lostId say so too (storage)
          showRejoined();
          return;
        }
        if (res.end) return end(res.end, false);
        forget();
        show('join');
        setKey('join-error', res.error);
        $('join-error').hidden = false;
      });
    };
    attempt();
  }

  function leave() {
    var url = ticket && ticketURL();
    stop();
    forget();
    admittedShown = false;
    shown = {position: 0, waiting: -1};
    eta.reset();
    $('notice').hidden = true;
    show('join');
    $('join').focus();
    if (url) req(url, {method: 'DELETE'}).catch(function () { /* the place expires anyway */ });
  }

  // --- The event -------------------------------------------------------------------------------

  function title() { return (info.page && info.page.title) || info.name || info.event_id; }

  function loadInfo() {
    return req(api).then(function (r) {
      var date = Date.parse(r.headers.get('Date'));
      if (!isNaN(date) && Math.abs(date - Date.now()) > 2000) clockSkew = date - Date.now(); // seconds only: big skews
      if (!r.ok) return;
      return r.json().then(function (e) {
        var first = !info;
        info = e;
        showEvent(first);
      });
    }).catch(function () { /* the page works without the name */ });
  }

  // showEvent draws the event's settings: title, page settings, pause, opening, stock, session.
  function showEvent(first) {
    var e = info, page = e.page || {};
    setText('event-name', title);
    document.title = t('window_title', {name: title()});
    if (first) brand(page);
    $('message').textContent = page.message || '';
    $('message').hidden = !page.message;
    // Paused by the operator: admissions wait, the line keeps its order; say why.
    $('paused').hidden = e.state !== 'paused';
    if (e.state === 'paused') setText('paused', function () { return e.pause_message || t('paused_default'); });
    if (e.state === 'pre_queue' && e.opens_at) {
      var opens = new Date(e.opens_at);
      setText('join-text', function () { return t('join_text_prequeue', {time: opens.toLocaleString(lang)}); });
    } else {
      setKey('join-text', 'join_text');
    }
    if (e.capacity !== null && e.capacity !== undefined) {
      var left = Math.max(0, e.capacity - (e.sold || 0));
      // page.unit names the units ("5,000 seats left"); one the catalogue lacks says "5,000 left".
      var unit = page.unit && text.en['stock_' + page.unit + '_other'] ? 'stock_' + page.unit : 'stock';
      setText('stock', function () { return left > 0 ? tn(unit, left) : t(unit + '_none'); });
      $('stock').hidden = false;
    } else {
      $('stock').hidden = true;
    }
    setKey('order', orderKey(e));
    if (e.session_max_s && e.session_ttl_s) {
      setText('session-note', function () { return t('session_note', {max: durS(e.session_max_s), idle: durS(e.session_ttl_s)}); });
      $('session-note').hidden = false;
    }
    tickClock();
  }

  // orderKey names how the line is ordered, for the foot: a drawn pre-queue (the places of
  // everyone who joined before opens_at are drawn, docs/draw.md), before or after the opening,
  // else first come, first served. The server writes the same on the page (web.go, orderKey).
  function orderKey(e) {
    if (e.prequeue_order === 'arrival' || !e.opens_at) return 'order_arrival';
    return untilOpen() > 0 ? 'order_draw_before' : 'order_draw_after';
  }

  // brand applies the operator's logo and colours (validated by the server: http(s) logo,
  // hex colours that keep AA contrast on the light palette, which the page then keeps to).
  function brand(page) {
    if (page.logo_url) {
      var img = $('logo');
      img.onload = function () { img.hidden = false; };
      img.src = page.logo_url;
    }
    var c = page.colors;
    if (!c) return;
    var root = document.documentElement;
    root.classList.add('branded');
    if (c.background) root.style.setProperty('--bg', c.background);
    if (c.text) root.style.setProperty('--text', c.text);
    if (c.accent) ['--primary', '--primary-hover', '--bar'].forEach(function (v) { root.style.setProperty(v, c.accent); });
  }

  function start() {
    var given = params.get('ticket');
    if (given) {
      params.delete('ticket');
      var q = params.toString();
      try { history.replaceState(null, '', location.pathname + (q ? '?' + q : '')); } catch (e) { /* ignore */ }
      var held = load();
      if (held && held.id && held.id !== given) return choose(held, given);
      if (!held || held.id !== given) { ticket = {id: given, first: 0, link: true}; save(); }
    }
    ticket = load();
    if (!ticket || !ticket.id) {
      if (info && info.state === 'closed') return end('closed_idle', false);
      show('join');
      return;
    }
    finished = false;
    recheck();
  }

  // choose settles a link that names a place other than the one this browser holds: the held
  // one is kept unless it no longer reads as waiting or admitted; if it does, the person
  // chooses (keeping it is the default). The link's ticket is then only adopted, never rejoined.
  function choose(held, given) {
    var adopt = function (id) {
      ticket = id === held.id ? held : {id: id, first: 0, link: true};
      save();
      ticket = load();
      finished = false;
      recheck();
    };
    req(api + '/tickets/' + encodeURIComponent(held.id)).then(function (r) {
      if (r.status === 404) return false;
      if (!r.ok) return true; // cannot tell (503, 429): keep what is held, and ask
      return r.json().then(function (tk) { return tk.status === 'QUEUED' || tk.status === 'ADMITTED'; });
    }, function () { return true; }).then(function (live) {
      if (!live) return adopt(given);
      var d = $('link-choice');
      $('link-keep').onclick = function () { d.close(); adopt(held.id); };
      $('link-take').onclick = function () { d.close(); adopt(given); };
      d.addEventListener('cancel', function () { adopt(held.id); }, {once: true});
      if (d.showModal) d.showModal(); else adopt(held.id);
    });
  }

  document.addEventListener('visibilitychange', function () {
    sendVisibility();
    if (!document.hidden && mode === 'poll' && admittedShown && !finished && !timer) poll();
    if (mode === 'sse' && admittedShown && !finished) renewOverSSE(1); // hidden: stops it
  });
  // Another tab joined or left the same event: follow it.
  window.addEventListener('storage', function (e) {
    if (e.key !== storeKey) return;
    var tk = load();
    if (!tk && ticket) { leaveShown(); } else if (tk && (!ticket || tk.id !== ticket.id)) {
      var was = ticket && ticket.id;
      stop(); rejoining = false; start();
      // Another tab took the new place of this tab's lost ticket (rejoin): tell the person here too.
      if (was && tk.rejoined === was) showRejoined();
    }
  });
  function showRejoined() {
    setKey('notice', 'rejoined');
    $('notice').hidden = false;
  }
  function leaveShown() { stop(); ticket = null; admittedShown = false; show('join'); }

  var dialog = $('leave-confirm');
  $('join').addEventListener('click', join);
  $('leave').addEventListener('click', function () {
    if (dialog.showModal) dialog.showModal(); else leave();
  });
  $('leave-stay').addEventListener('click', function () { dialog.close(); });
  $('leave-yes').addEventListener('click', function () { dialog.close(); leave(); });
  $('again').addEventListener('click', function () { finished = false; show('join'); join(); });
  $('view-turn').querySelector('h2').setAttribute('tabindex', '-1');
  $('end-title').setAttribute('tabindex', '-1');

  // --- Preview: /e/{event_id}?preview=1 in the operator console's event form ---------------
  // The page as a person waiting in line sees it (an example place), drawn from the settings
  // the console posts — its draft, saved or not — in the shape of GET /v1/events/{id}: no
  // join, no ticket, no connection, nothing stored, nothing clickable. Only messages of a
  // parent of this origin are read; the page says it is ready once it listens.
  function startPreview() {
    document.body.inert = true;
    ticket = {id: 'preview', first: 5000};
    var root = document.documentElement;
    window.addEventListener('message', function (ev) {
      if (ev.origin !== location.origin || ev.source !== window.parent || !ev.data || ev.data.type !== 'waitroom-preview') return;
      info = ev.data.event;
      root.classList.remove('branded');
      ['--bg', '--text', '--primary', '--primary-hover', '--bar'].forEach(function (v) { root.style.removeProperty(v); });
      $('logo').hidden = true;
      $('logo').removeAttribute('src');
      showEvent(true);
      renderPosition(1234, 5000, 1500);
    });
    setInterval(tickClock, 1000);
    if (window.parent !== window) window.parent.postMessage({type: 'waitroom-preview-ready', lang: lang}, location.origin);
  }

  setupLanguages();
  applyLanguage();
  if (params.get('preview') === '1') { startPreview(); return; }
  loadInfo().then(start);
  setInterval(tickClock, 1000);
  setInterval(watch, 1000);
  // The event's state (paused or not, its name, the stock) is read again now and then.
  setInterval(function () { if (!document.hidden) loadInfo(); }, 15000);
})();
