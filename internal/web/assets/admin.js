// Operator console (GET /admin). Reads, with the admin key:
//   GET /v1/events, GET /v1/events/{id}          the events and their live counters
//   GET /v1/events/{id}/history?since=           samples of the last hour, rates, forecast,
//                                                the measured figures (time in line, ...)
//   GET /v1/events/{id}/history?resolution_s=    the long history (a day of minutes, a month
//                                                of ten minutes) when the span needs it
//   GET /v1/campaigns, /v1/campaigns/{id}/history coupon campaigns
//   GET /v1/instances                            the instances alive
//   GET /v1/audit?event_id=                      the event's audit trail
//   GET /v1/events/{id}/report?format=           the report after the sale (html, csv), shown
//                                                in a frame without scripts, or saved
// and acts, each after a confirmation: PATCH /v1/events/{id} (max_active, admit_rate, paused;
// with If-Match, so a change made meanwhile is not overwritten), POST .../close, POST .../extend.
// The event form (event-form.js) creates events (PUT with If-None-Match: *) and edits every
// setting (PATCH with If-Match), with a preview of the waiting page.
// The history is kept by the service (see docs/api.md, "Console"); this page only draws it, as
// SVG, without any library. The admin key is kept in sessionStorage: it lasts this tab and is
// never written to disk. The chosen event or campaign is in the address (#event=id,
// #campaign=id), so a reload or a shared link opens it again.
(function () {
  'use strict';
  var keyName = 'waitroom:admin-key';
  var refreshMS = 2000;
  var timer = 0;
  var running = false;
  // State of what is shown.
  var events = [];     // the list, with live counters
  var campaigns = [];
  var hist = {};       // 'e:id' / 'c:id' -> {samples: [], forecast: {}, interval_s, window_s}
  var current = null;  // {kind: 'event'|'campaign', id: '...', ev: live event view}
  var spanChoice = 'auto'; // the charts' time span: 'auto' or seconds
  var spans = [60, 300, 900, 3600];

  function $(id) { return document.getElementById(id); }
  function key() { try { return sessionStorage.getItem(keyName) || ''; } catch (e) { return ''; } }
  function forget() { try { sessionStorage.removeItem(keyName); } catch (e) { /* ignore */ } }

  // ---- API ----

  // api calls the API with the admin key; it resolves to {status, body, etag} (body: parsed JSON
  // or null), and shows the login again on 401.
  function api(method, path, body, headers) {
    var h = {'Authorization': 'Bearer ' + key()};
    var k;
    for (k in headers || {}) h[k] = headers[k];
    var init = {method: method, headers: h, cache: 'no-store'};
    if (body !== undefined) {
      h['Content-Type'] = 'application/json';
      init.body = JSON.stringify(body);
    }
    return fetch(path, init).then(function (r) {
      if (r.status === 401) {
        forget();
        showLogin('That admin key was not accepted.');
        throw new Error('unauthorized');
      }
      var etag = r.headers.get('ETag');
      return r.text().then(function (t) {
        var b = null;
        try { b = t ? JSON.parse(t) : null; } catch (e) { b = null; }
        return {status: r.status, body: b, etag: etag};
      });
    });
  }

  function problem(res) {
    var b = res.body || {};
    return (b.detail || b.title || ('HTTP ' + res.status)) + (b.code ? ' (' + b.code + ')' : '');
  }

  // ---- formatting ----

  function num(n) { return typeof n === 'number' ? n.toLocaleString() : '–'; }

  // rate formats a rate per second so that a slow, steady one never reads 0.0.
  function rate(r) {
    if (typeof r !== 'number' || isNaN(r)) return '–';
    var a = Math.abs(r);
    if (a === 0) return '0';
    if (a >= 100) return Math.round(r).toLocaleString();
    if (a >= 10) return r.toFixed(1);
    if (a >= 1) return r.toFixed(2);
    return r.toPrecision(2);
  }

  function duration(s) {
    if (s === null || s === undefined || s < 0) return '–';
    if (s === 0) return 'now';
    if (s < 60) return s + ' s';
    var m = Math.round(s / 60);
    if (m < 60) return m + ' min';
    var h = Math.floor(m / 60);
    if (h < 48) return h + ' h ' + (m % 60) + ' min';
    return Math.round(h / 24) + ' days';
  }

  // secs says a duration given in seconds (with a decimal under a minute).
  function secs(s) {
    if (typeof s !== 'number') return '–';
    if (s < 10) return s.toFixed(1) + ' s';
    return duration(Math.round(s));
  }

  function share(n, of) {
    if (!(of > 0)) return '–';
    var p = 100 * n / of;
    return (p < 10 ? p.toFixed(1) : Math.round(p)) + ' %';
  }

  // The kinds of refusal of the line's rules (docs/api.md, "Console"), in order.
  var refusalKinds = ['rate_limit', 'challenge', 'identity', 'shared_admission'];
  var refusalNames = {rate_limit: 'rate limits', challenge: 'challenge', identity: 'identity', shared_admission: 'shared admission'};

  // perSecond turns a running total of the samples into a rate per second between samples (a
  // total that falls counts from 0 again).
  function perSecond(s, get) {
    var out = [];
    for (var i = 1; i < s.length; i++) {
      var dt = (Date.parse(s[i].at) - Date.parse(s[i - 1].at)) / 1000;
      var d = get(s[i]) - get(s[i - 1]);
      if (d < 0) d = get(s[i]);
      if (dt > 0) out.push([Date.parse(s[i].at), d / dt]);
    }
    return out;
  }

  function windowText(s) {
    if (!s) return '';
    return s < 60 ? 'over ' + Math.round(s) + ' s' : 'over ' + Math.round(s / 60) + ' min';
  }

  function el(tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined) e.textContent = text;
    return e;
  }

  function cell(tr, label, text, cls) {
    var td = el('td', cls, text);
    td.setAttribute('data-label', label);
    tr.appendChild(td);
    return td;
  }

  // ---- views ----

  function showLogin(error) {
    clearTimeout(timer);
    running = false;
    $('view-console').hidden = true;
    $('top-side').hidden = true;
    $('instance-list').hidden = true;
    $('view-login').hidden = false;
    $('login-error').hidden = !error;
    $('login-error').textContent = error || '';
    $('key').focus();
  }

  function showConsole() {
    $('view-login').hidden = true;
    $('view-console').hidden = false;
    $('top-side').hidden = false;
    select(fromHash());
    if (!running) {
      running = true;
      tick();
    }
  }

  function fromHash() {
    var m = /^#(event|campaign)=([a-z0-9][a-z0-9_-]{0,63})$/.exec(location.hash);
    return m ? {kind: m[1], id: m[2]} : null;
  }

  // select shows an event or a campaign (null: none).
  function select(sel, stay) {
    var same = current && sel && current.kind === sel.kind && current.id === sel.id;
    if (same) return;
    current = sel ? {kind: sel.kind, id: sel.id, ev: null} : null;
    $('detail').hidden = !current;
    $('action-result').hidden = true;
    if (!current) return;
    $('detail-title').textContent = current.id;
    $('detail-sub').textContent = '';
    $('stats').textContent = '';
    $('charts').textContent = '';
    $('audit-list').textContent = '';
    $('actions').hidden = current.kind !== 'event';
    $('audit').hidden = current.kind !== 'event';
    $('event-links').hidden = current.kind !== 'event';
    $('page-link').href = '/e/' + encodeURIComponent(current.id);
    $('report').hidden = current.kind !== 'event';
    $('report-frame').hidden = true;
    $('report-frame').removeAttribute('srcdoc');
    $('report-view').setAttribute('aria-expanded', 'false');
    $('report-view').textContent = 'View the report';
    $('report-status').textContent = '';
    var h = '#' + sel.kind + '=' + sel.id;
    if (location.hash !== h) history.replaceState(null, '', h);
    refreshDetail().then(function () { if (!stay) $('detail').scrollIntoView({block: 'start'}); });
  }

  // ---- refresh ----

  function tick() {
    clearTimeout(timer);
    Promise.all([refreshList(), refreshCampaigns(), refreshInstances(), refreshDetail()]).catch(function () { /* shown where it failed */ })
      .then(function () {
        if (running) timer = setTimeout(tick, refreshMS);
      });
  }

  // loadHistory fetches the samples after the last one known and keeps the hour (one request at
  // a time per event or campaign: the list and the chosen one share it).
  var inflight = {};
  function loadHistory(kind, id) {
    var k = (kind === 'event' ? 'e:' : 'c:') + id;
    if (!inflight[k]) {
      inflight[k] = fetchHistory(kind, id, k).then(function (h) { delete inflight[k]; return h; },
        function (err) { delete inflight[k]; throw err; });
    }
    return inflight[k];
  }

  function fetchHistory(kind, id, k) {
    var h = hist[k] || {samples: []};
    var last = h.samples.length ? h.samples[h.samples.length - 1].at : '';
    var path = '/v1/' + (kind === 'event' ? 'events/' : 'campaigns/') + encodeURIComponent(id) + '/history' +
      (last ? '?since=' + encodeURIComponent(last) : '');
    return api('GET', path).then(function (r) {
      if (r.status !== 200) throw new Error(problem(r));
      var b = r.body;
      var samples = h.samples.concat(b.samples);
      if (samples.length) {
        var cut = Date.parse(samples[samples.length - 1].at) - b.window_s * 1000;
        while (samples.length && Date.parse(samples[0].at) < cut) samples.shift();
      }
      h = {samples: samples, forecast: b.forecast, interval_s: b.interval_s, window_s: b.window_s, measured: b.measured};
      hist[k] = h;
      return h;
    });
  }

  function refreshList() {
    return api('GET', '/v1/events').then(function (r) {
      if (r.status !== 200) throw new Error(problem(r));
      return Promise.all(r.body.events.map(function (e) {
        return Promise.all([
          api('GET', '/v1/events/' + encodeURIComponent(e.event_id)).then(function (x) { return x.status === 200 ? x.body : e; }),
          loadHistory('event', e.event_id).catch(function () { return null; })
        ]).then(function (both) { return {ev: both[0], h: both[1]}; });
      }));
    }).then(function (list) {
      events = list;
      drawList();
      $('events-error').hidden = true;
      $('updated').textContent = 'Updated ' + new Date().toLocaleTimeString();
    }).catch(function (err) {
      if (err.message === 'unauthorized') return;
      $('events-error').textContent = 'Could not load the events: ' + err.message;
      $('events-error').hidden = false;
    });
  }

  function drawList() {
    var rows = $('rows');
    rows.textContent = '';
    events.forEach(function (x) {
      var e = x.ev, f = x.h ? x.h.forecast : null;
      var tr = el('tr');
      if (current && current.kind === 'event' && current.id === e.event_id) tr.className = 'chosen';
      var td = el('td');
      td.setAttribute('data-label', 'Event');
      var b = el('button', 'link', e.name ? e.name + ' (' + e.event_id + ')' : e.event_id);
      b.type = 'button';
      b.setAttribute('data-event', e.event_id);
      b.addEventListener('click', function () { select({kind: 'event', id: e.event_id}); drawList(); });
      td.appendChild(b);
      tr.appendChild(td);
      cell(tr, 'State', e.state || '–', 'state ' + (e.state || ''));
      cell(tr, 'Waiting', num(e.waiting));
      cell(tr, 'Active / max', num(e.active) + ' / ' + num(e.max_active));
      cell(tr, 'Rate /s', f ? rate(f.admission_rate) : '–');
      cell(tr, 'Clears in', f ? duration(f.clear_s) : '–');
      rows.appendChild(tr);
    });
    if (events.length === 0) {
      var tr = el('tr');
      var td = cell(tr, '', 'No events yet: "New event" creates one.');
      td.colSpan = 6;
      rows.appendChild(tr);
    }
  }

  function refreshCampaigns() {
    return api('GET', '/v1/campaigns').then(function (r) {
      if (r.status !== 200) return;
      return Promise.all(r.body.campaigns.map(function (c) {
        return loadHistory('campaign', c.campaign_id).catch(function () { return null; })
          .then(function (h) { return {c: c, h: h}; });
      })).then(function (list) {
        campaigns = list;
        drawCampaigns();
      });
    }).catch(function () { /* the events' error says enough */ });
  }

  function drawCampaigns() {
    $('campaigns-panel').hidden = campaigns.length === 0;
    var rows = $('campaign-rows');
    rows.textContent = '';
    campaigns.forEach(function (x) {
      var c = x.c, f = x.h ? x.h.forecast : null;
      var tr = el('tr');
      if (current && current.kind === 'campaign' && current.id === c.campaign_id) tr.className = 'chosen';
      var td = el('td');
      td.setAttribute('data-label', 'Campaign');
      var b = el('button', 'link', c.campaign_id);
      b.type = 'button';
      b.addEventListener('click', function () { select({kind: 'campaign', id: c.campaign_id}); drawCampaigns(); });
      td.appendChild(b);
      tr.appendChild(td);
      cell(tr, 'Issued / stock', num(c.issued) + ' / ' + num(c.stock));
      cell(tr, 'Entries', num(c.entries));
      cell(tr, 'Pending', num(c.pending));
      cell(tr, 'Entries /s', f ? rate(f.entry_rate) : '–');
      rows.appendChild(tr);
    });
  }

  function refreshInstances() {
    return api('GET', '/v1/instances').then(function (r) {
      if (r.status !== 200) return;
      var list = r.body.instances;
      var b = $('instances');
      b.textContent = list.length + (list.length === 1 ? ' instance alive' : ' instances alive');
      b.className = 'pill ' + (list.length > 0 ? 'ok' : 'bad');
      var ul = $('instance-list');
      ul.textContent = '';
      // What any instance found wrong with its setup (a load balancer missing from
      // --trusted-proxies), once each.
      var warn = $('setup-warnings');
      warn.textContent = '';
      var said = {};
      list.forEach(function (i) {
        (i.warnings || []).forEach(function (w) {
          if (said[w]) return;
          said[w] = true;
          warn.appendChild(el('p', '', (i.name ? i.name + ': ' : '') + w));
        });
      });
      warn.hidden = warn.childNodes.length === 0;
      list.forEach(function (i) {
        var li = el('li');
        li.appendChild(el('strong', '', i.name + (i.addr ? ' ' + i.addr : '')));
        li.appendChild(document.createTextNode(' ' + i.version + ', up since ' + new Date(i.started_at).toLocaleString() +
          (i.sampler ? ' · takes the samples' : '') + (i.self ? ' · answered this page' : '')));
        ul.appendChild(li);
      });
    }).catch(function () { /* shown by the events' error */ });
  }

  function refreshDetail() {
    if (!current) return Promise.resolve();
    var sel = current;
    if (sel.kind === 'campaign') {
      return Promise.all([api('GET', '/v1/campaigns/' + encodeURIComponent(sel.id)), loadHistory('campaign', sel.id)]).then(function (x) {
        if (current !== sel) return;
        if (x[0].status !== 200) throw new Error(problem(x[0]));
        drawCampaign(x[0].body, x[1]);
      }).catch(function (err) { showResult(false, 'Could not load ' + sel.id + ': ' + err.message); });
    }
    return Promise.all([
      api('GET', '/v1/events/' + encodeURIComponent(sel.id)),
      loadHistory('event', sel.id),
      api('GET', '/v1/audit?limit=20&event_id=' + encodeURIComponent(sel.id)),
      api('GET', '/v1/events/' + encodeURIComponent(sel.id) + '/auto?since_s=900')
    ]).then(function (x) {
      if (current !== sel) return;
      if (x[0].status !== 200) throw new Error(problem(x[0]));
      sel.ev = x[0].body;
      sel.etag = x[0].etag;
      drawAuto(sel.ev, x[3].status === 200 ? x[3].body : null);
      if (x[2].status === 200) drawAudit(x[2].body.entries);
      var res = resolutionOf(sel.ev, x[1]);
      return (res ? loadLong(sel.id, res) : Promise.resolve(null)).then(function (long) {
        if (current !== sel) return;
        drawEvent(sel.ev, x[1], long);
      });
    }).catch(function (err) {
      if (err.message !== 'unauthorized') showResult(false, 'Could not load ' + sel.id + ': ' + err.message);
    });
  }

  // ---- the chosen event ----

  // noRedirectWarning says, above the event's figures, that an event without redirect_url
  // sends its admitted people nowhere (issue 21, item 10).
  function noRedirectWarning(e) {
    var p = $('no-redirect');
    if (!p) {
      p = el('p', 'setup-warnings', 'redirect_url is not set: admitted people are sent nowhere. Their page says ' +
        '"It\'s your turn" with their number and nothing more. Set redirect_url to the shop\'s page (it gets ' +
        '?waitroom_token=…), or put the event behind the gate, which sends them back by itself.');
      p.id = 'no-redirect';
      $('stats').parentNode.insertBefore(p, $('stats'));
    }
    p.hidden = !!e.redirect_url;
  }

  function stat(dl, label, value, note, id) {
    var d = el('div');
    if (id) d.id = id;
    d.appendChild(el('dt', '', label));
    d.appendChild(el('dd', '', value));
    if (note) d.appendChild(el('dd', 'note', note));
    dl.appendChild(d);
  }

  function drawEvent(e, h, long) {
    var f = h.forecast || {};
    $('detail-title').textContent = e.name ? e.name + ' (' + e.event_id + ')' : e.event_id;
    $('detail-sub').textContent = 'State: ' + e.state + ' · version ' + e.version + ' · samples every ' + h.interval_s + ' s';
    noRedirectWarning(e);
    var dl = $('stats');
    dl.textContent = '';
    stat(dl, 'Waiting', num(e.waiting), null, 'stat-waiting');
    stat(dl, 'Active / max_active', num(e.active) + ' / ' + num(e.max_active), null, 'stat-active');
    stat(dl, 'Admissions /s', rate(f.admission_rate), windowText(f.admission_rate_window_s), 'stat-rate');
    stat(dl, 'Joins /s', rate(f.join_rate), windowText(f.join_rate_window_s), 'stat-joins');
    var clear = duration(f.clear_s);
    var clearNote = e.state === 'paused' ? 'paused' : (f.join_rate > f.admission_rate && e.waiting > 0 ? 'line growing' : 'if nobody else joined');
    stat(dl, 'Line clears in', clear, clearNote, 'stat-clear');
    stat(dl, 'admit_rate', e.admit_rate ? rate(e.admit_rate) + ' /s' : 'none', null, 'stat-admit-rate');
    // Measured, not estimated (docs/api.md, "Console"): the time in line of the admissions,
    // who gave up, and the refusals by kind.
    var m = h.measured;
    if (m) {
      var til = m.time_in_line;
      stat(dl, 'Time in line p50 / p90', til.count ? secs(til.p50_s) + ' / ' + secs(til.p90_s) : '–',
        num(til.count) + ' admissions measured', 'stat-time-in-line');
      stat(dl, 'Left while waiting', num(m.left_waiting), share(m.left_waiting, e.last_number) + ' of joins', 'stat-left');
      stat(dl, 'Admitted, never came', num(m.unclaimed), 'their admission lapsed unclaimed', 'stat-unclaimed');
      var kinds = refusalKinds.map(function (k) { return refusalNames[k] + ' ' + num(m.refusals[k]); }).join(' · ');
      stat(dl, 'Refused', num(refusalKinds.reduce(function (a, k) { return a + m.refusals[k]; }, 0)), kinds, 'stat-refused');
    }
    if (f.sale) {
      stat(dl, 'Sold / capacity', num(e.sold) + ' / ' + num(e.capacity), num(f.sale.units_left) + ' left', 'stat-sold');
      stat(dl, 'Sells out in', e.sold_out ? 'sold out' : duration(f.sale.sell_out_s),
        f.sale.sales_rate ? rate(f.sale.sales_rate) + ' units/s ' + windowText(f.sale.sales_rate_window_s) : 'nothing sells', 'stat-sellout');
    }

    var v = eventView(e, h, long);
    var s = v.samples;
    var charts = $('charts');
    charts.textContent = '';
    var span = v.span;
    $('span-note').textContent = v.note;
    function pts(get) { return s.map(function (x) { return [Date.parse(x.at), get(x)]; }); }
    chart(charts, v.res ? 'Waiting (longest line of each ' + (v.res === 60 ? 'minute' : '10 minutes') + ')' : 'Waiting', span,
      [{name: 'waiting', cls: 'c0', points: pts(function (x) { return x.waiting_max !== undefined ? x.waiting_max : x.waiting; })}]);
    chart(charts, 'Active against max_active', span, [
      {name: 'active', cls: 'c1', points: pts(function (x) { return x.active; })},
      {name: 'max_active', cls: 'limit', points: pts(function (x) { return x.max_active; })}]);
    chart(charts, 'Admissions and joins per second', span, [
      {name: 'admissions/s', cls: 'c0', points: pts(function (x) { return x.admissions_per_s; }), fmt: rate},
      {name: 'joins/s', cls: 'c2', points: pts(function (x) { return x.joins_per_s; }), fmt: rate}]);
    if (f.sale) {
      chart(charts, 'Sold and held against capacity', span, [
        {name: 'sold', cls: 'c1', points: pts(function (x) { return x.sold; })},
        {name: 'held', cls: 'c2', points: pts(function (x) { return x.held; })},
        {name: 'capacity', cls: 'limit', points: pts(function (x) { return x.capacity || 0; })}]);
    }
    chart(charts, 'Answers 429 and 503 per second (all instances)', span, [
      {name: '429/s', cls: 'c2', points: pts(function (x) { return x.rejected_per_s; }), fmt: rate},
      {name: '503/s', cls: 'c3', points: pts(function (x) { return x.unavailable_per_s; }), fmt: rate}]);
    if (s.length && s[0].refusals_total) {
      chart(charts, 'Refusals per second by kind (all instances)', span, refusalKinds.map(function (k, i) {
        return {name: refusalNames[k] + '/s', cls: 'c' + i, points: perSecond(s, function (x) { return x.refusals_total[k]; }), fmt: rate};
      }));
    }

    // The inputs follow the event unless the operator is editing them.
    var ma = $('max-active'), ar = $('admit-rate');
    if (document.activeElement !== ma && !ma.dataset.dirty) ma.value = e.max_active;
    if (document.activeElement !== ar && !ar.dataset.dirty) ar.value = e.admit_rate;
    $('pause').textContent = e.paused ? 'Resume admissions' : 'Pause admissions';
    $('close').disabled = e.state === 'closed';
  }

  function drawCampaign(c, h) {
    var f = h.forecast || {};
    $('detail-title').textContent = 'Campaign ' + c.campaign_id;
    $('detail-sub').textContent = 'Samples every ' + h.interval_s + ' s';
    var dl = $('stats');
    dl.textContent = '';
    stat(dl, 'Issued / stock', num(c.issued) + ' / ' + num(c.stock), null, 'stat-issued');
    stat(dl, 'Entries', num(c.entries), num(c.rejected) + ' rejected');
    stat(dl, 'Pending', num(c.pending));
    stat(dl, 'Entries /s', rate(f.entry_rate), windowText(f.entry_rate_window_s));
    stat(dl, 'Issued /s', rate(f.issue_rate), windowText(f.issue_rate_window_s));
    stat(dl, 'Stock claimed in', duration(f.stock_out_s), num(f.stock_left) + ' left');
    var s = h.samples;
    var charts = $('charts');
    charts.textContent = '';
    var span = spanOf(h);
    $('span-note').textContent = '';
    function pts(get) { return s.map(function (x) { return [Date.parse(x.at), get(x)]; }); }
    chart(charts, 'Coupons issued and entries against stock', span, [
      {name: 'issued', cls: 'c1', points: pts(function (x) { return x.issued; })},
      {name: 'entries', cls: 'c0', points: pts(function (x) { return x.entries; })},
      {name: 'stock', cls: 'limit', points: pts(function (x) { return x.stock; })}]);
    chart(charts, 'Entries and coupons issued per second', span, [
      {name: 'entries/s', cls: 'c0', points: pts(function (x) { return x.entries_per_s; }), fmt: rate},
      {name: 'issued/s', cls: 'c1', points: pts(function (x) { return x.issued_per_s; }), fmt: rate}]);
  }

  // ---- charts (SVG drawn here; no library) ----

  // ---- the long history (kept in the database: a bucket a minute for a day, ten minutes for
  // a month; GET .../history?resolution_s=) ----

  var day = 86400;
  var longHist = {};   // 'id:res' -> {samples, fetched (ms)}
  var longEveryMS = 30000;

  // resolutionOf is the resolution an event's charts need: 0 (the store's hour, at the
  // sampling interval) when the span chosen fits in it, else 60 or 600 s. Auto fits the event's
  // life: from its creation on.
  function resolutionOf(e, h) {
    var secs = spanChoice === 'auto' ? lifeSeconds(e, h) : +spanChoice;
    if (secs <= (h.window_s || 3600)) return 0;
    return secs <= day ? 60 : 600;
  }

  function lifeSeconds(e, h) {
    var s = h.samples;
    var t1 = s.length ? Date.parse(s[s.length - 1].at) : Date.now();
    return Math.max(0, (t1 - Date.parse(e.created_at)) / 1000);
  }

  // loadLong fetches an event's long history at res, at most every longEveryMS, the newer
  // buckets only (a bucket in progress comes again with a later sample: it replaces its older
  // copy).
  function loadLong(id, res) {
    var k = id + ':' + res;
    var have = longHist[k];
    if (have && Date.now() - have.fetched < longEveryMS) return Promise.resolve(have);
    var last = have && have.samples.length ? have.samples[have.samples.length - 1].at : '';
    var path = '/v1/events/' + encodeURIComponent(id) + '/history?resolution_s=' + res + (last ? '&since=' + encodeURIComponent(last) : '');
    return api('GET', path).then(function (r) {
      if (r.status !== 200) throw new Error(problem(r));
      var samples = have ? have.samples.slice() : [];
      var bucket = function (x) { return Math.floor(Date.parse(x.at) / (res * 1000)); };
      r.body.samples.forEach(function (x) {
        while (samples.length && bucket(samples[samples.length - 1]) >= bucket(x)) samples.pop();
        samples.push(x);
      });
      var cut = Date.now() - r.body.window_s * 1000;
      while (samples.length && Date.parse(samples[0].at) < cut) samples.shift();
      longHist[k] = {samples: samples, fetched: Date.now(), interval_s: res, window_s: r.body.window_s};
      return longHist[k];
    });
  }

  // eventView is what an event's charts show: the samples (the store's hour, or the long
  // history the span needs), the span and a note saying which. Auto fits the event's life:
  // from its first join (its creation when nobody joined yet) to the last sample.
  function eventView(e, h, long) {
    var res = long ? long.interval_s : 0;
    var data = long || h;
    var s = data.samples;
    var t1 = s.length ? Date.parse(s[s.length - 1].at) : Date.now();
    var secs = +spanChoice, note;
    if (spanChoice === 'auto') {
      var from = Date.parse(e.created_at);
      for (var i = 0; i < s.length; i++) {
        if (s[i].last_number > 0) { from = Math.max(from, Date.parse(s[i].at) - (data.interval_s || 5) * 1000); break; }
      }
      secs = Math.max(60, (t1 - from) / 1000);
      note = 'Auto: the event\'s life, ' + duration(Math.round(secs)) + (res ? ', a point every ' + (res === 60 ? 'minute' : '10 minutes') : '');
    } else {
      note = res ? 'A point every ' + (res === 60 ? 'minute' : '10 minutes') + ' (kept ' + (res === 60 ? 'a day' : 'a month') + ')' : '';
    }
    secs = Math.min(secs, data.window_s || 3600);
    return {samples: s, res: res, note: note || '', span: {t0: t1 - secs * 1000, t1: t1, gap: (data.interval_s || 5) * 3000}};
  }

  // spanOf is the time a campaign's charts show, ending at the last sample (the store's clock,
  // not this browser's): the span chosen, or (auto) the shortest of 1, 5, 15 and 60 minutes
  // that holds every sample kept.
  function spanOf(h) {
    var s = h.samples;
    var t1 = s.length ? Date.parse(s[s.length - 1].at) : Date.now();
    var secs = spanChoice === 'auto' ? 0 : +spanChoice;
    if (!secs) {
      var have = s.length ? (t1 - Date.parse(s[0].at)) / 1000 : 0;
      secs = spans[spans.length - 1];
      for (var i = 0; i < spans.length; i++) {
        if (spans[i] >= have) { secs = spans[i]; break; }
      }
    }
    secs = Math.min(secs, h.window_s || 3600);
    return {t0: t1 - secs * 1000, t1: t1, gap: (h.interval_s || 5) * 3000};
  }

  function ago(ms) {
    var s = Math.round(ms / 1000);
    if (s < 120) return '−' + s + ' s';
    if (s < 7200) return '−' + Math.round(s / 60) + ' min';
    if (s < 2 * day) return '−' + Math.round(s / 3600) + ' h';
    return '−' + Math.round(s / day) + ' d';
  }

  var svgNS = 'http://www.w3.org/2000/svg';
  function svg(tag, attrs) {
    var e = document.createElementNS(svgNS, tag);
    for (var k in attrs) e.setAttribute(k, attrs[k]);
    return e;
  }

  // nice rounds a chart's top up to 1, 2 or 5 times a power of ten.
  function nice(v) {
    if (!(v > 0)) return 1;
    var p = Math.pow(10, Math.floor(Math.log10(v)));
    var m = v / p;
    return (m <= 1 ? 1 : m <= 2 ? 2 : m <= 5 ? 5 : 10) * p;
  }

  // chart adds a figure with a legend (the latest values) and an SVG of the series over the
  // span: a gap of more than three intervals without samples breaks the line.
  function chart(parent, title, span, series) {
    var fig = el('figure', 'chart');
    fig.appendChild(el('figcaption', '', title));
    var legend = el('ul', 'legend');
    var top = 0;
    series.forEach(function (sr) {
      var last = sr.points.length ? sr.points[sr.points.length - 1][1] : null;
      var li = el('li');
      li.appendChild(el('span', 'swatch ' + sr.cls));
      li.appendChild(document.createTextNode(sr.name + ' ' + (last === null ? '–' : (sr.fmt || num)(last))));
      legend.appendChild(li);
      sr.points.forEach(function (p) { if (p[1] > top) top = p[1]; });
    });
    fig.appendChild(legend);
    parent.appendChild(fig);
    var W = Math.max(260, Math.round(fig.clientWidth || 600)), H = 150;
    var L = 48, R = 8, T = 8, B = 22;
    var yMax = nice(top);
    var root = svg('svg', {viewBox: '0 0 ' + W + ' ' + H, width: '100%', height: H, role: 'img', 'aria-label': title});
    function x(t) { return L + (t - span.t0) / (span.t1 - span.t0) * (W - L - R); }
    function y(v) { return T + (1 - v / yMax) * (H - T - B); }
    [0, 0.5, 1].forEach(function (q) {
      var yy = y(q * yMax);
      root.appendChild(svg('line', {x1: L, x2: W - R, y1: yy, y2: yy, 'class': 'grid'}));
      var lab = svg('text', {x: L - 6, y: yy + 4, 'class': 'axis', 'text-anchor': 'end'});
      lab.textContent = rate(q * yMax);
      root.appendChild(lab);
    });
    [0, 0.5, 1].forEach(function (q) {
      var lab = svg('text', {x: L + q * (W - L - R), y: H - 6, 'class': 'axis', 'text-anchor': q === 0 ? 'start' : q === 1 ? 'end' : 'middle'});
      lab.textContent = q === 1 ? 'now' : ago((1 - q) * (span.t1 - span.t0));
      root.appendChild(lab);
    });
    series.forEach(function (sr) {
      var runs = [], run = [], prev = null;
      sr.points.forEach(function (p) {
        if (p[0] < span.t0) return; // outside the span chosen
        if (prev !== null && p[0] - prev > span.gap && run.length) { runs.push(run); run = []; }
        run.push(x(p[0]).toFixed(1) + ',' + y(p[1]).toFixed(1));
        prev = p[0];
      });
      if (run.length) runs.push(run);
      runs.forEach(function (r) {
        if (r.length === 1) r.push(r[0]);
        root.appendChild(svg('polyline', {points: r.join(' '), 'class': 'line ' + sr.cls}));
      });
    });
    fig.appendChild(root);
  }

  // ---- audit trail ----

  function changes(before, after) {
    var out = [];
    if (before && after && typeof before === 'object' && typeof after === 'object') {
      Object.keys(after).forEach(function (k) {
        if (JSON.stringify(before[k]) !== JSON.stringify(after[k])) {
          out.push(k + ' ' + show(before[k]) + ' → ' + show(after[k]));
        }
      });
    } else if (after && typeof after === 'object') {
      Object.keys(after).forEach(function (k) { out.push(k + ' ' + show(after[k])); });
    }
    return out.join(', ');
  }

  function show(v) {
    if (v === undefined || v === null) return '–';
    if (v === '') return '""';
    var s = typeof v === 'object' ? JSON.stringify(v) : String(v);
    return s.length > 40 ? s.slice(0, 39) + '…' : s;
  }

  function drawAudit(entries) {
    var ol = $('audit-list');
    ol.textContent = '';
    entries.forEach(function (a) {
      var li = el('li');
      li.appendChild(el('time', '', new Date(a.at).toLocaleString()));
      li.appendChild(el('strong', 'action', a.action));
      li.appendChild(el('span', 'who', 'by ' + a.admin + ' from ' + a.address));
      var c = changes(a.before, a.after);
      if (c) li.appendChild(el('span', 'what', c));
      ol.appendChild(li);
    });
    if (entries.length === 0) ol.appendChild(el('li', 'muted', 'No admin action on this event yet.'));
  }

  // ---- actions ----

  // confirmAction asks in a modal dialog; it resolves to true when confirmed.
  function confirmAction(text) {
    var d = $('confirm');
    $('confirm-text').textContent = text;
    return new Promise(function (resolve) {
      d.addEventListener('close', function onClose() {
        d.removeEventListener('close', onClose);
        resolve(d.returnValue === 'ok');
      });
      d.returnValue = '';
      d.showModal();
      $('confirm-cancel').focus();
    });
  }

  function showResult(ok, text) {
    var p = $('action-result');
    p.hidden = false;
    p.className = 'result ' + (ok ? 'ok' : 'bad');
    p.textContent = text;
  }

  // act confirms, runs call, reports, and refreshes the event and its audit trail.
  function act(question, call, done) {
    if (!current || current.kind !== 'event' || !current.ev) return;
    var sel = current;
    confirmAction(question).then(function (ok) {
      if (!ok) { showResult(false, 'Cancelled: nothing changed.'); return; }
      return call(sel).then(function (r) {
        if (r.status >= 200 && r.status < 300) {
          showResult(true, done(r.body));
          $('max-active').dataset.dirty = '';
          $('admit-rate').dataset.dirty = '';
        } else if (r.status === 412) {
          showResult(false, 'The event changed meanwhile (now ' + (r.etag || 'newer') + '): it was read again; check and try again.');
        } else {
          showResult(false, 'Refused: ' + problem(r));
        }
        return Promise.all([refreshDetail(), refreshList()]);
      });
    }).catch(function (err) {
      if (err.message !== 'unauthorized') showResult(false, 'Failed: ' + err.message);
    });
  }

  function patch(sel, body) {
    return api('PATCH', '/v1/events/' + encodeURIComponent(sel.id), body, {'If-Match': sel.etag || '"' + sel.ev.version + '"'});
  }

  $('form-limits').addEventListener('submit', function (ev) {
    ev.preventDefault();
    if (!current || !current.ev) return;
    var e = current.ev;
    var ma = parseInt($('max-active').value, 10), ar = parseFloat($('admit-rate').value);
    if (!(ma >= 1) || !(ar >= 0)) { showResult(false, 'max_active must be at least 1, admit_rate at least 0.'); return; }
    var body = {}, what = [];
    if (e.admission_mode === 'auto') { // auto: the operator pins max_active (Unpin gives it back)
      act('Pin max_active of ' + e.event_id + ' at ' + ma + '? The controller keeps measuring but stops choosing until you unpin.',
        function (sel) { return patch(sel, {auto: {pin_max_active: ma}}); },
        function (b) { return 'Pinned: max_active ' + ma + ' (version ' + b.version + ').'; });
      return;
    }
    if (ma !== e.max_active) { body.max_active = ma; what.push('max_active ' + e.max_active + ' → ' + ma); }
    if (ar !== e.admit_rate) { body.admit_rate = ar; what.push('admit_rate ' + e.admit_rate + ' → ' + ar); }
    if (what.length === 0) { showResult(false, 'Nothing to change.'); return; }
    act('Set ' + what.join(' and ') + ' on ' + e.event_id + '?', function (sel) { return patch(sel, body); },
      function (b) { return 'Saved: max_active ' + b.max_active + ', admit_rate ' + b.admit_rate + ' (version ' + b.version + ').'; });
  });
  ['max-active', 'admit-rate'].forEach(function (id) {
    $(id).addEventListener('input', function () { $(id).dataset.dirty = '1'; });
  });

  // ---- auto admission (GET /v1/events/{id}/auto; docs/autoadmit.md) ----

  function drawAuto(e, a) {
    var sec = $('auto');
    if (!a || e.admission_mode !== 'auto') { sec.hidden = true; return; }
    sec.hidden = false;
    var o = a.auto || {};
    $('auto-objective').textContent = 'Objective: origin p95 under ' + o.target_p95_ms + ' ms, errors under ' +
      (100 * o.error_budget).toFixed(1) + ' %. Bounds: max_active ' + num(o.min_max_active) + '–' + num(o.max_max_active) +
      ', admit_rate ' + rate(o.min_admit_rate) + '–' + (o.max_admit_rate ? rate(o.max_admit_rate) : 'no cap') + ' /s' +
      (o.pin_max_active ? ' · pinned at ' + num(o.pin_max_active) : '') + (o.hold ? ' · held' : '') +
      (o.origin && o.origin !== e.event_id ? ' · origin ' + o.origin : '');
    var st = a.state, dl = $('auto-stats');
    dl.textContent = '';
    if (st) {
      stat(dl, 'Effective max_active', num(st.max_active), null, 'auto-max-active');
      stat(dl, 'Effective admit_rate', rate(st.admit_rate) + ' /s', null, 'auto-admit-rate');
      stat(dl, 'Origin p95', Math.round(st.p95_ms) + ' ms', 'target ' + o.target_p95_ms + ' ms', 'auto-p95');
      stat(dl, 'Gates\' own delay', Math.round(st.gate_delay_ms || 0) + ' ms', 'taken off the p95 the gates measured', 'auto-gate-delay');
      stat(dl, 'Origin errors', (100 * st.error_rate).toFixed(2) + ' %', 'budget ' + (100 * o.error_budget).toFixed(1) + ' %', 'auto-errors');
      stat(dl, 'Origin load', rate(st.load) + ' /s', null, 'auto-load');
      stat(dl, 'Signal', st.signal, st.signal === 'missing' ? 'holding the last safe value' : null, 'auto-signal');
      // The controller's model of the origin (docs/autoadmit.md): its p95 unloaded, and the
      // sessions' request rate at this limit against their rate unloaded (the knee).
      stat(dl, 'Origin p95 unloaded', st.min_p95_ms ? Math.round(st.min_p95_ms) + ' ms' : 'not measured yet',
        'the lowest p95 the slow start and the knee compare with', 'auto-min-p95');
      stat(dl, 'Requests per session', st.session_rate ? rate(st.session_rate) + ' /s' : 'not measured yet',
        st.session_rate0 ? 'unloaded ' + rate(st.session_rate0) + ' /s' +
          (st.session_rate ? ' (' + Math.round(100 * st.session_rate / st.session_rate0) + ' %)' : '') :
          'unloaded: not measured yet', 'auto-session-rate');
      stat(dl, 'At the knee', st.at_knee ? 'yes' : 'no',
        st.at_knee ? 'more sessions would only queue: the limit holds' : null, 'auto-knee');
    }
    $('auto-reason').textContent = st ? 'Now: ' + st.reason : 'The controller has not run yet.';
    var charts = $('auto-charts');
    charts.textContent = '';
    var s = a.samples || [];
    if (s.length > 1) {
      var span = {t0: Date.parse(s[0].at), t1: Date.parse(s[s.length - 1].at)};
      var pts = function (get) { return s.map(function (x) { return [Date.parse(x.at), get(x)]; }); };
      chart(charts, 'Chosen max_active against the sessions active', span, [
        {name: 'max_active', cls: 'limit', points: pts(function (x) { return x.ma; })},
        {name: 'active', cls: 'c1', points: pts(function (x) { return x.act; })}]);
      chart(charts, 'Origin p95 (ms) against the target', span, [
        {name: 'p95', cls: 'c0', points: pts(function (x) { return x.p95; })},
        {name: 'target', cls: 'limit', points: pts(function () { return o.target_p95_ms; })}]);
      chart(charts, 'Origin load and errors per second', span, [
        {name: 'requests/s', cls: 'c0', points: pts(function (x) { return x.load; }), fmt: rate},
        {name: 'errors/s', cls: 'c3', points: pts(function (x) { return x.load * x.er; }), fmt: rate}]);
    }
    var tb = $('auto-decisions');
    tb.textContent = '';
    ((st && st.decisions) || []).slice().reverse().forEach(function (d) {
      var tr = el('tr');
      tr.appendChild(el('td', '', new Date(d.at).toLocaleTimeString()));
      tr.appendChild(el('td', '', num(d.max_active)));
      tr.appendChild(el('td', '', rate(d.admit_rate)));
      tr.appendChild(el('td', '', d.reason));
      tb.appendChild(tr);
    });
    $('auto-hold').textContent = o.hold ? 'Let the controller choose again' : 'Hold the limits';
    $('auto-unpin').hidden = !o.pin_max_active;
  }

  $('auto-hold').addEventListener('click', function () {
    if (!current || !current.ev || !current.ev.auto) return;
    var e = current.ev, hold = !e.auto.hold;
    act(hold ? 'Hold the limits of ' + e.event_id + ' where they are?' : 'Let the controller of ' + e.event_id + ' choose the limits again?',
      function (sel) { return patch(sel, {auto: {hold: hold}}); },
      function () { return hold ? 'Held: the limits stay where they are.' : 'The controller chooses again.'; });
  });
  $('auto-unpin').addEventListener('click', function () {
    if (!current || !current.ev) return;
    act('Unpin max_active of ' + current.ev.event_id + '?', function (sel) { return patch(sel, {auto: {pin_max_active: null}}); },
      function () { return 'Unpinned: the controller chooses again.'; });
  });
  $('auto-fixed').addEventListener('click', function () {
    if (!current || !current.ev) return;
    var e = current.ev;
    act('Switch ' + e.event_id + ' to fixed limits (max_active and admit_rate as set in the form)?',
      function (sel) { return patch(sel, {admission_mode: 'fixed'}); },
      function (b) { return 'Fixed: max_active ' + b.max_active + ', admit_rate ' + b.admit_rate + '.'; });
  });

  $('pause').addEventListener('click', function () {
    if (!current || !current.ev) return;
    var e = current.ev, pause = !e.paused;
    act(pause ? 'Pause admissions of ' + e.event_id + '? People can still join; nobody is let in until you resume.'
      : 'Resume admissions of ' + e.event_id + '?',
    function (sel) { return patch(sel, {paused: pause}); },
    function (b) { return b.paused ? 'Paused: nobody is admitted until you resume.' : 'Resumed: admissions go on.'; });
  });

  $('close').addEventListener('click', function () {
    if (!current || !current.ev) return;
    var e = current.ev;
    act('Close ' + e.event_id + ' now? Joins are refused and everyone still waiting reads CLOSED.',
      function (sel) { return api('POST', '/v1/events/' + encodeURIComponent(sel.id) + '/close'); },
      function () { return 'Closed.'; });
  });

  $('form-extend').addEventListener('submit', function (ev) {
    ev.preventDefault();
    if (!current || !current.ev) return;
    var n = parseInt($('extend-s').value, 10);
    if (!(n >= 1 && n <= 86400)) { showResult(false, 'Give 1 to 86400 seconds.'); return; }
    act('Give every admitted session of ' + current.ev.event_id + ' ' + n + ' s more?',
      function (sel) { return api('POST', '/v1/events/' + encodeURIComponent(sel.id) + '/extend', {seconds: n}); },
      function (b) { return 'Extended ' + b.extended + ' sessions by ' + b.seconds + ' s.'; });
  });

  // ---- the report after the sale ----

  // fetchReport gets the report of the chosen event in format (html, csv) with the key.
  function fetchReport(format) {
    if (!current || current.kind !== 'event') return Promise.reject(new Error('no event chosen'));
    var id = current.id;
    return fetch('/v1/events/' + encodeURIComponent(id) + '/report?format=' + format,
      {headers: {'Authorization': 'Bearer ' + key()}, cache: 'no-store'}).then(function (r) {
      if (r.status === 401) { forget(); showLogin('That admin key was not accepted.'); throw new Error('unauthorized'); }
      if (!r.ok) return r.json().then(function (b) { throw new Error(problem({status: r.status, body: b})); });
      return r.text().then(function (t) { return {id: id, text: t}; });
    });
  }

  // save hands text to the browser as a download named name.
  function save(name, type, text) {
    var url = URL.createObjectURL(new Blob([text], {type: type}));
    var a = el('a');
    a.href = url;
    a.download = name;
    document.body.appendChild(a);
    a.click();
    a.remove();
    setTimeout(function () { URL.revokeObjectURL(url); }, 60000);
  }

  function reportStatus(text) { $('report-status').textContent = text; }

  $('report-view').addEventListener('click', function () {
    var f = $('report-frame');
    if (!f.hidden) {
      f.hidden = true;
      $('report-view').setAttribute('aria-expanded', 'false');
      $('report-view').textContent = 'View the report';
      return;
    }
    reportStatus('Making the report…');
    fetchReport('html').then(function (r) {
      // The page has no script and its own style (allowed by hash in this page's policy,
      // which a frame of srcdoc keeps); its sandbox allows no script at all.
      f.srcdoc = r.text;
      f.hidden = false;
      $('report-view').setAttribute('aria-expanded', 'true');
      $('report-view').textContent = 'Hide the report';
      reportStatus('Report of ' + r.id + ', made ' + new Date().toLocaleTimeString() + '.');
    }).catch(function (err) { if (err.message !== 'unauthorized') reportStatus('Could not make the report: ' + err.message); });
  });
  [['report-html', 'html', 'text/html'], ['report-csv', 'csv', 'text/csv']].forEach(function (b) {
    $(b[0]).addEventListener('click', function () {
      reportStatus('Making the report…');
      fetchReport(b[1]).then(function (r) {
        var name = 'report-' + r.id + '.' + b[1];
        save(name, b[2], r.text);
        reportStatus('Saved ' + name + ' (' + Math.max(1, Math.round(r.text.length / 1024)) + ' KB).');
      }).catch(function (err) { if (err.message !== 'unauthorized') reportStatus('Could not make the report: ' + err.message); });
    });
  });

  // ---- the event form ----

  var editor = window.waitroomEventForm({
    api: api,
    problem: problem,
    select: function (id) {
      select({kind: 'event', id: id}, true); // the form stays in view
    },
    refresh: function () { return Promise.all([refreshList(), refreshDetail()]); }
  });
  $('new-event').addEventListener('click', function () { editor.create(); });
  $('edit-event').addEventListener('click', function () {
    if (!current || current.kind !== 'event') return;
    var id = current.id;
    api('GET', '/v1/events/' + encodeURIComponent(id)).then(function (r) {
      if (r.status !== 200) { showResult(false, 'Could not read ' + id + ': ' + problem(r)); return; }
      editor.edit(r.body, r.etag);
    }).catch(function (err) { if (err.message !== 'unauthorized') showResult(false, 'Failed: ' + err.message); });
  });

  // ---- wiring ----

  $('login').addEventListener('submit', function (ev) {
    ev.preventDefault();
    try { sessionStorage.setItem(keyName, $('key').value.trim()); } catch (e) { /* ignore */ }
    $('key').value = '';
    showConsole();
  });
  $('logout').addEventListener('click', function () {
    forget();
    showLogin('');
  });
  Array.prototype.forEach.call($('span-choice').querySelectorAll('button'), function (b) {
    b.addEventListener('click', function () {
      spanChoice = b.getAttribute('data-span');
      Array.prototype.forEach.call($('span-choice').querySelectorAll('button'), function (o) {
        o.setAttribute('aria-pressed', String(o === b));
      });
      refreshDetail();
    });
  });
  $('instances').addEventListener('click', function () {
    var ul = $('instance-list');
    ul.hidden = !ul.hidden;
    $('instances').setAttribute('aria-expanded', String(!ul.hidden));
  });
  window.addEventListener('hashchange', function () { if (key()) select(fromHash()); });

  if (key()) showConsole(); else showLogin('');
})();
