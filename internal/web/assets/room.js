// Waiting room page (GET /e/{event_id}). Plain script, no build step, no dependencies.
//
// The ticket id is kept in localStorage under "waitroom:<event_id>" so that reloads and other
// tabs keep the place. Updates arrive over WebSocket; after two failed connects the page falls
// back to Server-Sent Events, and when those cannot connect either, to polling the ticket as
// its poll_after_s says. On admission the page goes to the event's redirect_url with
// ?waitroom_token=<admission token> appended, or shows the token when there is none.
//
// Behind the gate (internal/gateway) the page is opened as /e/{event_id}?ticket=<id>&return=<path>:
// the gate already joined, so the page adopts that ticket (and drops it from the address bar),
// and on admission goes back to <path> on this site (the gate's cookie then lets the visitor in)
// instead of the redirect_url. A return that is not a path of this site is ignored.
(function () {
  'use strict';

  var eventId = decodeURIComponent(location.pathname.split('/')[2] || '');
  var api = '/v1/events/' + encodeURIComponent(eventId);
  var storeKey = 'waitroom:' + eventId;

  var info = null;       // GET /v1/events/{id}: name, state, redirect_url
  var ticket = null;     // {id, first}: first = the position when first seen (for the progress bar)
  var channel = null;    // the live connection: {close()}
  var mode = 'ws';       // 'ws', then 'sse', then 'poll'
  var failures = 0;      // consecutive failed connects
  var timer = 0;         // the pending reconnect or poll
  var finished = false;  // a final state is shown (or we are leaving for the redirect)
  var admittedShown = false;
  var shown = {position: 0, waiting: -1, eta: undefined};
  var params = new URLSearchParams(location.search);
  var returnTo = sameSitePath(params.get('return'));

  // sameSitePath returns p when it is a path on this site ("/..."), else null.
  function sameSitePath(p) {
    if (!p || p.charAt(0) !== '/' || p.charAt(1) === '/' || p.charAt(1) === '\\' || /[\r\n\t]/.test(p)) return null;
    return p;
  }

  function $(id) { return document.getElementById(id); }

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

  function show(view) {
    ['loading', 'join', 'wait', 'turn', 'end'].forEach(function (v) { $('view-' + v).hidden = v !== view; });
    document.body.setAttribute('data-view', view);
  }

  function setConnection(live, text) {
    $('connection').classList.toggle('live', live);
    $('connection-text').textContent = text;
  }

  function plural(n, one, many) { return n.toLocaleString() + ' ' + (n === 1 ? one : many); }

  function etaText(s) {
    if (s === null || s === undefined) return 'Calculating…';
    if (s < 60) return 'Under a minute';
    var m = Math.round(s / 60);
    if (m < 60) return 'About ' + m + ' min';
    return 'About ' + Math.floor(m / 60) + ' h ' + (m % 60) + ' min';
  }

  // renderPosition shows the place in line. The live region (the position) changes only when
  // the place does, so a screen reader announces moves, not every ETA tick.
  function renderPosition(position, waiting, eta) {
    if (!ticket) return;
    if (!ticket.first || position > ticket.first) { ticket.first = position; save(); }
    show('wait');
    if (position !== shown.position) {
      $('position').textContent = position.toLocaleString();
      shown.position = position;
    }
    if (waiting >= 0) shown.waiting = Math.max(waiting, position);
    if (eta !== undefined) shown.eta = eta;
    $('ahead').textContent = plural(position - 1, 'person', 'people');
    $('behind').textContent = shown.waiting >= 0 ? plural(shown.waiting - position, 'person', 'people') : '–';
    $('eta').textContent = etaText(shown.eta);
    var pct = Math.round(100 * (ticket.first - position + 1) / ticket.first);
    $('progress-bar').style.width = pct + '%';
    $('progress').setAttribute('aria-valuenow', String(pct));
  }

  function admitted(m) {
    admittedShown = true;
    var target = m.redirect_url || (info && info.redirect_url);
    $('token').value = m.admission_token;
    if (returnTo) {
      finished = true;
      stop();
      $('turn-text').textContent = 'You have been admitted.';
      $('turn-redirect').hidden = false;
      show('turn');
      location.assign(location.origin + returnTo);
      return;
    }
    var until = new Date(m.admitted_until);
    $('turn-until').textContent = isNaN(until) ? '' : 'Valid until ' + until.toLocaleTimeString() + ' if you stay active.';
    if (!isNaN(until)) sessionEndWarning(until);
    if (target) {
      var u = null;
      try { u = new URL(target, location.href); } catch (e) { u = null; }
      if (u && (u.protocol === 'https:' || u.protocol === 'http:')) {
        u.searchParams.set('waitroom_token', m.admission_token);
        finished = true;
        stop();
        $('turn-text').textContent = 'You have been admitted.';
        $('turn-redirect').hidden = false;
        show('turn');
        location.assign(u.toString());
        return;
      }
    }
    var wasShown = document.body.getAttribute('data-view') === 'turn';
    show('turn');
    if (!wasShown) $('view-turn').querySelector('h2').focus();
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
      note.textContent = 'Your session ends at ' + until.toLocaleTimeString() +
        ', in less than a minute, however active you are. Finish what you are doing now.';
      note.hidden = false;
    };
    if (left <= 60000) warn(); else warnTimer = setTimeout(warn, left - 60000);
  }

  function end(title, text, again) {
    clearTimeout(warnTimer);
    finished = true;
    stop();
    forget();
    $('end-title').textContent = title;
    $('end-text').textContent = text;
    $('again').hidden = !again;
    show('end');
    $('end-title').focus();
  }

  function released(note) {
    stop();
    forget();
    finished = false;
    admittedShown = false;
    $('join-error').textContent = note;
    $('join-error').hidden = false;
    show('join');
  }

  // handle applies one message (from the push channel, or made from a ticket answer).
  function handle(m) {
    if (finished || !m || !m.type) return;
    switch (m.type) {
      case 'position': renderPosition(m.position, m.waiting, m.eta_s); break;
      case 'stats': if (shown.position && !admittedShown) renderPosition(shown.position, m.waiting); break;
      case 'admitted': admitted(m); break;
      case 'expired': end('Your turn has passed', 'You were admitted but did not continue in time, so your place went to the next person.', true); break;
      case 'sold_out': end('Sold out', 'Everything was sold while you were waiting. Sorry!', false); break;
      case 'closed': end('This event is closed', 'The event closed while you were waiting.', false); break;
      case 'completed': end('All done', 'Your visit is complete. Thank you!', false); break;
      case 'not_found': released('Your place in line was released. Join again to get a new place.'); break;
      case 'reconnect': reconnectSoon(); break;
    }
  }

  // fromTicket turns a ticket answer of the HTTP API into a message.
  function fromTicket(t) {
    switch (t.status) {
      case 'QUEUED': return {type: 'position', position: t.position, waiting: t.waiting, eta_s: t.eta_s};
      case 'ADMITTED': return {type: 'admitted', admission_token: t.admission_token, admitted_until: t.admitted_until};
      case 'EXPIRED': return {type: 'expired'};
      case 'SOLD_OUT': return {type: 'sold_out'};
      case 'CLOSED': return {type: 'closed'};
      case 'COMPLETED': return {type: 'completed'};
    }
    return null;
  }

  function stop() {
    clearTimeout(timer);
    timer = 0;
    if (channel) { var c = channel; channel = null; c.close(); }
  }

  function ticketURL() { return api + '/tickets/' + encodeURIComponent(ticket.id); }

  function connect() {
    stop();
    if (finished || !ticket) return;
    if (mode === 'ws' && 'WebSocket' in window) return openWebSocket();
    if (mode !== 'poll' && 'EventSource' in window) { mode = 'sse'; return openEventSource(); }
    mode = 'poll';
    poll();
  }

  // retryLater reconnects after a growing, jittered delay (1 s doubling to 30 s).
  function retryLater() {
    clearTimeout(timer);
    var d = Math.min(30000, 1000 * Math.pow(2, Math.min(failures, 5)));
    timer = setTimeout(connect, d / 2 + Math.random() * d / 2);
  }

  // reconnectSoon reconnects within 0.3-2 s: the instance is restarting and the others should
  // not all be hit in the same instant.
  function reconnectSoon() {
    stop();
    setConnection(false, 'Reconnecting…');
    timer = setTimeout(connect, 300 + Math.random() * 1700);
  }

  function sendVisibility() {
    if (channel && channel.ws && channel.ws.readyState === 1) {
      channel.ws.send(JSON.stringify({type: document.visibilityState === 'visible' ? 'visible' : 'hidden'}));
    }
  }

  function openWebSocket() {
    var ws = new WebSocket((location.protocol === 'https:' ? 'wss://' : 'ws://') + location.host + ticketURL() + '/ws');
    var opened = false;
    var me = {ws: ws, close: function () { ws.onclose = null; ws.close(); }};
    channel = me;
    ws.onopen = function () { opened = true; failures = 0; setConnection(true, 'Live updates'); sendVisibility(); };
    ws.onmessage = function (e) {
      var m;
      try { m = JSON.parse(e.data); } catch (x) { return; }
      handle(m);
    };
    ws.onclose = function (e) {
      if (channel !== me) return;
      channel = null;
      if (finished) return;
      setConnection(false, 'Reconnecting…');
      if (e.code === 1012 || e.code === 1008) return reconnectSoon(); // restart, or too slow
      if (!opened || e.code === 1006) failures++;
      if (!opened && failures >= 2) mode = 'sse';
      retryLater();
    };
  }

  function openEventSource() {
    var es = new EventSource(ticketURL() + '/events');
    var me = {close: function () { es.close(); }};
    channel = me;
    es.onopen = function () { failures = 0; setConnection(true, 'Live updates'); };
    es.onmessage = function (e) {
      var m;
      try { m = JSON.parse(e.data); } catch (x) { return; }
      if (m.type === 'reconnect') return; // the stream ends; EventSource reconnects by itself
      handle(m);
    };
    es.onerror = function () {
      if (channel !== me) return;
      if (es.readyState === 2) { // CLOSED: the server refused (503, 404): poll instead
        channel = null;
        mode = 'poll';
        connect();
      } else {
        setConnection(false, 'Reconnecting…');
      }
    };
  }

  // check reads the ticket once. It returns false when the ticket is gone.
  function check() {
    return fetch(ticketURL(), {cache: 'no-store'}).then(function (r) {
      if (r.status === 404) { handle({type: 'not_found'}); return {ok: false}; }
      if (!r.ok) return {ok: true, wait: 2};
      return r.json().then(function (t) {
        handle(fromTicket(t));
        return {ok: true, wait: t.poll_after_s};
      });
    }, function () { return {ok: true, wait: 2}; });
  }

  // poll is the last fallback: read the ticket as often as the server asks. An admitted page
  // reads it only while visible (each read renews the session).
  function poll() {
    if (finished || !ticket) return;
    if (admittedShown && document.hidden) return; // visibilitychange resumes it
    setConnection(false, 'Updating every few seconds');
    check().then(function (res) {
      if (!res.ok || finished || mode !== 'poll') return;
      timer = setTimeout(poll, Math.max(1, res.wait || 1) * 1000);
    });
  }

  // joinKey names the join being attempted: sent as Idempotency-Key with every try until one
  // answers, so a try whose answer was lost (a timeout, a 503 after the join was made) takes
  // no second place when the person tries again.
  var joinKey = null;

  function newJoinKey() {
    if (window.crypto && crypto.randomUUID) return crypto.randomUUID();
    var b = new Uint8Array(16);
    crypto.getRandomValues(b);
    return Array.prototype.map.call(b, function (x) { return ('0' + x.toString(16)).slice(-2); }).join('');
  }

  function join() {
    var btn = $('join');
    btn.disabled = true;
    $('join-error').hidden = true;
    if (!joinKey) joinKey = newJoinKey();
    fetch(api + '/tickets', {method: 'POST', cache: 'no-store', headers: {'Idempotency-Key': joinKey}}).then(function (r) {
      if (r.status === 200 || r.status === 201) {
        return r.json().then(function (t) {
          joinKey = null;
          ticket = {id: t.ticket_id, first: t.position || 0};
          save();
          finished = false;
          mode = 'ws';
          failures = 0;
          handle(fromTicket(t));
          if (!finished) connect();
        });
      }
      return r.json().catch(function () { return {}; }).then(function (p) {
        if (r.status === 410) handle({type: p.code === 'sold_out' ? 'sold_out' : 'closed'});
        else if (r.status === 404) joinError('This event does not exist.');
        else joinError('The waiting room is busy right now. Please try again in a moment.');
      });
    }, function () {
      joinError('Could not reach the waiting room. Check your connection and try again.');
    }).then(function () { btn.disabled = false; });
  }

  function joinError(text) {
    $('join-error').textContent = text;
    $('join-error').hidden = false;
  }

  function leave() {
    var url = ticket && ticketURL();
    stop();
    forget();
    admittedShown = false;
    shown = {position: 0, waiting: -1, eta: undefined};
    show('join');
    if (url) fetch(url, {method: 'DELETE'}).catch(function () { /* the place expires anyway */ });
  }

  function loadInfo() {
    return fetch(api, {cache: 'no-store'}).then(function (r) {
      if (!r.ok) return;
      return r.json().then(function (e) {
        info = e;
        var name = e.name || e.event_id;
        $('event-name').textContent = name;
        document.title = name + ' – waiting room';
        // Paused by the operator: admissions wait, the line keeps its order; say why.
        $('paused').hidden = e.state !== 'paused';
        if (e.state === 'paused') {
          $('paused').textContent = e.pause_message ||
            'Admissions are paused for a moment. You keep your place in line; this page goes on by itself.';
        }
        if (e.state === 'pre_queue' && e.opens_at) {
          $('join-text').textContent = 'The sale opens at ' + new Date(e.opens_at).toLocaleString() +
            '. Join now to get your place in line; keep this page open.';
        }
      });
    }).catch(function () { /* the page works without the name */ });
  }

  function start() {
    var given = params.get('ticket');
    if (given) {
      ticket = {id: given, first: 0};
      save();
      params.delete('ticket');
      var q = params.toString();
      try { history.replaceState(null, '', location.pathname + (q ? '?' + q : '')); } catch (e) { /* ignore */ }
    }
    ticket = load();
    if (!ticket || !ticket.id) {
      if (info && info.state === 'closed') return end('This event is closed', 'The event is no longer taking people in.', false);
      show('join');
      return;
    }
    finished = false;
    check().then(function (res) { if (res.ok && !finished) connect(); });
  }

  document.addEventListener('visibilitychange', function () {
    sendVisibility();
    if (!document.hidden && mode === 'poll' && admittedShown && !finished && !timer) poll();
  });
  // Another tab joined or left the same event: follow it.
  window.addEventListener('storage', function (e) {
    if (e.key !== storeKey) return;
    var t = load();
    if (!t && ticket) { leaveShown(); } else if (t && (!ticket || t.id !== ticket.id)) { stop(); start(); }
  });
  function leaveShown() { stop(); ticket = null; admittedShown = false; show('join'); }

  $('join').addEventListener('click', join);
  $('leave').addEventListener('click', leave);
  $('again').addEventListener('click', function () { finished = false; show('join'); join(); });
  $('view-turn').querySelector('h2').setAttribute('tabindex', '-1');
  $('end-title').setAttribute('tabindex', '-1');

  loadInfo().then(start);
  // The event's state (paused or not, its name) is read again now and then.
  setInterval(function () { if (!document.hidden) loadInfo(); }, 15000);
})();
