// Admin dashboard (GET /admin): lists the events (GET /v1/events, admin key) and shows each
// one's live counters (GET /v1/events/{id}), refreshed every two seconds. The admin key is kept
// in sessionStorage: it lasts this tab and is never written to disk.
(function () {
  'use strict';
  var keyName = 'waitroom:admin-key';
  var timer = 0;

  function $(id) { return document.getElementById(id); }
  function key() { try { return sessionStorage.getItem(keyName) || ''; } catch (e) { return ''; } }

  function showLogin(error) {
    clearTimeout(timer);
    $('view-events').hidden = true;
    $('view-login').hidden = false;
    $('login-error').hidden = !error;
    $('login-error').textContent = error || '';
    $('key').focus();
  }

  function cell(tr, text) {
    var td = document.createElement('td');
    td.textContent = text;
    tr.appendChild(td);
    return td;
  }

  function num(n) { return typeof n === 'number' ? n.toLocaleString() : '–'; }

  function refresh() {
    var auth = {headers: {'Authorization': 'Bearer ' + key()}, cache: 'no-store'};
    fetch('/v1/events', auth).then(function (r) {
      if (r.status === 401) {
        try { sessionStorage.removeItem(keyName); } catch (e) { /* ignore */ }
        showLogin('That admin key was not accepted.');
        return null;
      }
      if (!r.ok) throw new Error('GET /v1/events answered ' + r.status);
      return r.json();
    }).then(function (list) {
      if (!list) return;
      return Promise.all(list.events.map(function (e) {
        return fetch('/v1/events/' + encodeURIComponent(e.event_id), {cache: 'no-store'})
          .then(function (r) { return r.ok ? r.json() : e; }, function () { return e; });
      })).then(function (events) {
        var rows = $('rows');
        rows.textContent = '';
        events.forEach(function (e) {
          var tr = document.createElement('tr');
          var td = document.createElement('td');
          var a = document.createElement('a');
          a.href = '/e/' + encodeURIComponent(e.event_id);
          a.textContent = e.name ? e.name + ' (' + e.event_id + ')' : e.event_id;
          td.appendChild(a);
          tr.appendChild(td);
          cell(tr, e.state || '–');
          cell(tr, num(e.waiting));
          cell(tr, num(e.active));
          cell(tr, num(e.max_active));
          cell(tr, num(e.serving));
          cell(tr, num(e.admitted_total));
          cell(tr, typeof e.admission_rate === 'number' ? e.admission_rate.toFixed(1) : '–');
          rows.appendChild(tr);
        });
        if (events.length === 0) {
          var tr = document.createElement('tr');
          var td = cell(tr, 'No events yet: create one with PUT /v1/events/{event_id}.');
          td.colSpan = 8;
          rows.appendChild(tr);
        }
        $('events-error').hidden = true;
        $('updated').textContent = 'Updated ' + new Date().toLocaleTimeString();
      });
    }).catch(function (err) {
      $('events-error').textContent = 'Could not load the events: ' + err.message;
      $('events-error').hidden = false;
    }).then(function () {
      if (!$('view-events').hidden) timer = setTimeout(refresh, 2000);
    });
  }

  function showEvents() {
    $('view-login').hidden = true;
    $('view-events').hidden = false;
    refresh();
  }

  $('login').addEventListener('submit', function (ev) {
    ev.preventDefault();
    try { sessionStorage.setItem(keyName, $('key').value.trim()); } catch (e) { /* ignore */ }
    $('key').value = '';
    showEvents();
  });
  $('logout').addEventListener('click', function () {
    try { sessionStorage.removeItem(keyName); } catch (e) { /* ignore */ }
    showLogin('');
  });

  if (key()) showEvents(); else showLogin('');
})();
