// The console's event form (admin.html, #editor): create an event, or edit one, with every
// setting the API takes — the schedule (opens_at, closes_at, the pre-queue's order and its draw
// commitment, how long until it opens), the waiting page (title, message, logo, colours,
// language) with a live preview of the real page in each language it speaks, the pause and
// its message, the challenge (a proof of work, or the operator's captcha among the URLs the
// operator allows), the limits per client, the sessions and the sale. Nothing is checked here
// that the API checks: the form sends, and shows the API's problem next to the field it names.
//
//   - Create: PUT /v1/events/{id} with If-None-Match: * (an event of that id is never replaced).
//   - Edit: PATCH /v1/events/{id}, a merge patch of the fields changed since the form was
//     filled, with If-Match: the version it was filled from. A change made meanwhile answers
//     412: the form then reads the event again and shows what changed on both sides; nothing is
//     written until the operator applies their changes onto the new version (or drops them).
//   - The API records each write in the audit trail, which the console shows.
//
// The preview is /e/{id}?preview=1&lang=…: the page itself in a frame of this origin (room.js
// draws it from the draft this form posts, and joins nothing).
//
// window.waitroomEventForm(deps) wires the form; deps: api(method, path, body, headers) (as
// admin.js's), problem(res), select(event id) and refresh() (after a write).
(function () {
  'use strict';

  window.waitroomEventForm = function (deps) {
    var $ = function (id) { return document.getElementById(id); };
    var form = $('event-form');
    var mode = null;      // 'create' or 'edit'
    var eventId = '';
    var base = {};        // the form's values as filled (path -> normalised string)
    var version = 0;      // the version the form was filled from (edit)
    var loaded = null;    // the event as read (GET)
    var sold = 0;
    var previewLang = '';
    var previewLogo = null;
    var previewTimer = 0;
    var allowedURLs = null;

    // ---- the fields ----

    function fields() { return Array.prototype.slice.call(form.querySelectorAll('[data-field]')); }
    function field(path) { return form.querySelector('[data-field="' + path + '"]'); }

    // get reads a dotted path of an object ('page.colors.accent').
    function get(obj, path) {
      return path.split('.').reduce(function (o, k) { return o === null || o === undefined ? undefined : o[k]; }, obj);
    }

    // The datetime-local inputs are the operator's local time; the API's are RFC 3339.
    function toLocal(iso) {
      if (!iso) return '';
      var d = new Date(iso);
      if (isNaN(d)) return '';
      var p = function (n) { return (n < 10 ? '0' : '') + n; };
      return d.getFullYear() + '-' + p(d.getMonth() + 1) + '-' + p(d.getDate()) + 'T' + p(d.getHours()) + ':' + p(d.getMinutes()) + ':' + p(d.getSeconds());
    }
    function fromLocal(v) {
      if (!v) return null;
      var d = new Date(v);
      return isNaN(d) ? v : d.toISOString();
    }

    // value is an input's value, normalised (strings trimmed; checkboxes 'true'/'false').
    function value(el) {
      if (el.type === 'checkbox') return el.checked ? 'true' : 'false';
      return el.value.trim();
    }

    function values() {
      var out = {};
      fields().forEach(function (el) { out[el.getAttribute('data-field')] = value(el); });
      return out;
    }

    // typed is a field's value as the API takes it (null: left out / removed).
    function typed(path, v) {
      var el = field(path);
      var kind = el.getAttribute('data-type') || 'string';
      if (kind === 'bool') return v === 'true';
      if (v === '') return null;
      if (kind === 'int' || kind === 'number') {
        var n = Number(v);
        return isNaN(n) ? v : n; // a word goes as it is: the API says what is wrong with it
      }
      if (kind === 'time') return fromLocal(v);
      return v;
    }

    function fill(e) {
      if ($('auto-fields')) $('auto-fields').hidden = !(e && e.admission_mode === 'auto');
      fields().forEach(function (el) {
        var path = el.getAttribute('data-field');
        var v = e ? get(e, path) : undefined;
        if (path === 'challenge.type' && e && !e.challenge) v = '';
        if (el.type === 'checkbox') { el.checked = !!v; return; }
        if (el.getAttribute('data-type') === 'time') { el.value = toLocal(v); return; }
        el.value = v === undefined || v === null ? (el.getAttribute('data-default') || '') : String(v);
      });
    }

    // ---- the body sent ----

    // set puts v at a dotted path of obj, making the objects on the way.
    function set(obj, path, v) {
      var keys = path.split('.');
      var o = obj;
      for (var i = 0; i < keys.length - 1; i++) {
        if (o[keys[i]] === undefined || o[keys[i]] === null) o[keys[i]] = {};
        o = o[keys[i]];
      }
      o[keys[keys.length - 1]] = v;
    }

    // createBody is the whole configuration for a PUT: every field given.
    function createBody(vals) {
      var body = {};
      Object.keys(vals).forEach(function (path) {
        if (path === 'event_id' || fieldHidden(path)) return;
        var v = typed(path, vals[path]);
        if (v === null || v === false) return; // left out: the default
        set(body, path, v);
      });
      if (body.challenge && !body.challenge.type) delete body.challenge;
      return body;
    }

    // patchBody is a merge patch of the fields changed since the form was filled: a field
    // emptied is removed (null); a challenge whose type changes is sent whole, none as null.
    function patchBody(vals) {
      var patch = {};
      var changed = changedPaths(base, vals);
      changed.forEach(function (path) {
        if (path.indexOf('challenge.') === 0) return;
        set(patch, path, typed(path, vals[path]));
      });
      if (changed.some(function (p) { return p.indexOf('challenge.') === 0; })) {
        if (!vals['challenge.type']) {
          patch.challenge = null;
        } else {
          var c = {type: vals['challenge.type']};
          ['challenge.difficulty', 'challenge.siteverify_url', 'challenge.secret'].forEach(function (p) {
            if (!fieldHidden(p) && vals[p] !== '') set({challenge: c}, p, typed(p, vals[p]));
          });
          patch.challenge = c;
        }
      }
      return patch;
    }

    function changedPaths(from, to) {
      return Object.keys(to).filter(function (p) { return p !== 'event_id' && from[p] !== to[p] && !fieldHidden(p); });
    }

    function fieldHidden(path) {
      var el = field(path);
      return !el || !!el.closest('[hidden]');
    }

    // ---- problems next to their field ----

    function clearErrors() {
      Array.prototype.forEach.call(form.querySelectorAll('.field-error'), function (p) { p.hidden = true; p.textContent = ''; });
      fields().forEach(function (el) { el.removeAttribute('aria-invalid'); });
      $('form-error').hidden = true;
      $('form-result').hidden = true;
    }

    // fieldOf finds the field a problem is about: the longest field name its detail names
    // (the API's details name the JSON field), or what its code says.
    function fieldOf(res) {
      var b = res.body || {};
      var detail = b.detail || '';
      if (b.code === 'invalid_event_id') return 'event_id';
      if (b.code === 'would_drop_sold') return 'capacity';
      var paths = fields().map(function (el) { return el.getAttribute('data-field'); })
        .filter(function (p) { return !fieldHidden(p); })
        .sort(function (x, y) { return y.length - x.length; });
      for (var i = 0; i < paths.length; i++) {
        var re = new RegExp('(^|[^a-z_.])' + paths[i].replace(/\./g, '\\.') + '([^a-z_]|$)');
        if (re.test(detail)) return paths[i];
      }
      return null;
    }

    function showProblem(res) {
      var path = fieldOf(res);
      var text = deps.problem(res);
      var p = path && form.querySelector('.field-error[data-error-for="' + path + '"]');
      if (p) {
        p.textContent = text;
        p.hidden = false;
        var el = field(path);
        el.setAttribute('aria-invalid', 'true');
        el.focus();
        return;
      }
      $('form-error').textContent = text;
      $('form-error').hidden = false;
    }

    function result(text) {
      $('form-result').textContent = text;
      $('form-result').hidden = false;
    }

    // ---- open, fill, close ----

    function open(m, e, etag) {
      loadURLs(e).then(function () { fillForm(m, e, etag); });
    }

    function fillForm(m, e, etag) {
      mode = m;
      loaded = e;
      eventId = e ? e.event_id : '';
      version = e ? e.version : 0;
      sold = e && e.sold ? e.sold : 0;
      $('editor').hidden = false;
      $('editor-title').textContent = m === 'create' ? 'New event' : 'Settings of ' + eventId;
      $('editor-save').textContent = m === 'create' ? 'Create the event' : 'Save the changes';
      field('event_id').readOnly = m === 'edit';
      $('conflict').hidden = true;
      clearErrors();
      fill(e);
      field('event_id').value = eventId;
      var seated = !!(e && (e.seats || e.seat_map));
      field('capacity').readOnly = seated;
      $('capacity-note').hidden = !seated;
      showChallenge();
      Array.prototype.forEach.call(form.querySelectorAll('input.color'), swatch);
      base = values();
      if (etag) version = parseInt(etag.replace(/"/g, ''), 10) || version;
      pageLink();
      drawNote();
      opensIn();
      preview(true);
      $('editor').scrollIntoView({block: 'start'});
      field(m === 'create' ? 'event_id' : 'name').focus();
    }

    function close() {
      $('editor').hidden = true;
      $('preview-frame').removeAttribute('src');
      mode = null;
    }

    function pageLink() {
      var a = $('editor-page-link');
      a.hidden = mode !== 'edit';
      a.href = '/e/' + encodeURIComponent(eventId);
    }

    // showChallenge shows the fields of the challenge's type.
    function showChallenge() {
      var t = field('challenge.type').value;
      $('challenge-pow').hidden = t !== 'pow';
      $('challenge-external').hidden = t !== 'external';
    }

    // loadURLs makes the choice of verification URLs the operator's allow-list (read once),
    // plus the URL e names if the list no longer has it (so that the form shows what is set).
    function loadURLs(e) {
      var got = allowedURLs ? Promise.resolve(allowedURLs) : deps.api('GET', '/v1/captcha/siteverify-urls').then(function (r) {
        allowedURLs = r.status === 200 ? r.body.siteverify_urls : [];
        return allowedURLs;
      }, function () { return []; });
      return got.then(function (urls) {
        var sel = field('challenge.siteverify_url');
        var current = (e && e.challenge && e.challenge.siteverify_url) || '';
        sel.textContent = '';
        var none = document.createElement('option');
        none.value = '';
        none.textContent = urls.length ? 'Choose one the operator allows' : 'This instance allows none (--captcha-siteverify-urls)';
        sel.appendChild(none);
        urls.concat(current && urls.indexOf(current) < 0 ? [current] : []).forEach(function (u) {
          var o = document.createElement('option');
          o.value = u;
          o.textContent = u;
          sel.appendChild(o);
        });
      });
    }

    // ---- the schedule: opens in, the draw's commitment ----

    function duration(ms) {
      var s = Math.round(Math.abs(ms) / 1000);
      var d = Math.floor(s / 86400), h = Math.floor(s % 86400 / 3600), m = Math.floor(s % 3600 / 60);
      if (d > 0) return d + ' d ' + h + ' h';
      if (h > 0) return h + ' h ' + m + ' min';
      if (m > 0) return m + ' min ' + (s % 60) + ' s';
      return s + ' s';
    }

    function opensIn() {
      if (!mode) return;
      var at = fromLocal(value(field('opens_at')));
      var out = $('opens-in');
      if (!at || isNaN(Date.parse(at))) { out.textContent = 'No opening time: the line is open.'; return; }
      var left = Date.parse(at) - Date.now();
      out.textContent = (left > 0 ? 'Opens in ' + duration(left) : 'Opened ' + duration(left) + ' ago') + ' (' + new Date(at).toUTCString() + ')';
    }

    function drawNote() {
      var p = $('draw-note');
      if (field('prequeue_order').value === 'arrival') {
        p.textContent = 'First come, first served: no draw.';
        return;
      }
      if (mode !== 'edit') {
        p.textContent = 'Everyone who joins before the opening gets a drawn place; the seed is made when the event is created and its commitment published here and at GET /v1/events/{id}/draw.';
        return;
      }
      p.textContent = 'Reading the draw…';
      deps.api('GET', '/v1/events/' + encodeURIComponent(eventId) + '/draw').then(function (r) {
        if (r.status !== 200) { p.textContent = ''; return; }
        var d = r.body;
        if (d.status === 'pending') p.textContent = 'Draw commitment (published before the opening): ' + d.commitment;
        else if (d.status === 'drawn') p.textContent = 'Drawn at the opening: ' + d.n + ' places; seed ' + d.seed + ' (commitment ' + d.commitment + ')';
        else p.textContent = 'No draw pending (the opening has passed, or nobody waits for it).';
      }).catch(function () { p.textContent = ''; });
    }

    // ---- the preview ----

    // draft is the event as the page reads it (GET /v1/events/{id}), from the form.
    function draft() {
      var v = values();
      var pg = {};
      ['title', 'message', 'logo_url', 'language'].forEach(function (k) { if (v['page.' + k]) pg[k] = v['page.' + k]; });
      var colors = {};
      ['background', 'text', 'accent'].forEach(function (k) { if (v['page.colors.' + k]) colors[k] = v['page.colors.' + k]; });
      if (Object.keys(colors).length) pg.colors = colors;
      var now = Date.now();
      var opens = fromLocal(v.opens_at), closes = fromLocal(v.closes_at);
      var state = 'open';
      if (closes && Date.parse(closes) <= now) state = 'closed';
      else if (opens && Date.parse(opens) > now) state = 'pre_queue';
      else if (v.paused === 'true') state = 'paused';
      var cap = v.capacity ? Number(v.capacity) : null;
      return {event_id: v.event_id || eventId, name: v.name, page: pg, state: state, paused: v.paused === 'true',
        pause_message: v.pause_message, opens_at: opens, closes_at: closes, redirect_url: v.redirect_url,
        capacity: isNaN(cap) ? null : cap, sold: sold, session_ttl_s: Number(v.session_ttl_s) || 300,
        session_max_s: Number(v.session_max_s) || 1800};
    }

    function logoOrigin() {
      try {
        var u = new URL(value(field('page.logo_url')));
        return u.protocol === 'https:' || u.protocol === 'http:' ? u.origin : '';
      } catch (e) { return ''; }
    }

    // preview reloads the frame when the language or the logo's origin changed (a page's policy
    // is fixed at its load), else posts the draft to it.
    function preview(reload) {
      var f = $('preview-frame');
      var logo = logoOrigin();
      if (reload || logo !== previewLogo || !f.getAttribute('src')) {
        previewLogo = logo;
        var langs = languages();
        if (!previewLang || langs.indexOf(previewLang) < 0) previewLang = value(field('page.language')) || langs[0] || 'en';
        drawLanguages();
        f.src = '/e/' + encodeURIComponent(eventId || 'preview') + '?preview=1&lang=' + encodeURIComponent(previewLang) +
          (logo ? '&logo=' + encodeURIComponent(logo) : '');
        return;
      }
      post();
    }

    function post() {
      var f = $('preview-frame');
      if (f.contentWindow) f.contentWindow.postMessage({type: 'waitroom-preview', event: draft()}, location.origin);
    }

    // languages are those the page speaks (its catalogue, room-text.js, loaded by the console).
    function languages() { return Object.keys(window.waitroomText || {en: {}}); }

    function drawLanguages() {
      var box = $('preview-langs');
      box.textContent = '';
      languages().forEach(function (code) {
        var b = document.createElement('button');
        b.type = 'button';
        b.className = 'pill';
        b.lang = code;
        b.setAttribute('data-lang', code);
        b.setAttribute('aria-pressed', String(code === previewLang));
        b.textContent = (window.waitroomText && window.waitroomText[code].language_name) || code;
        b.addEventListener('click', function () { previewLang = code; preview(true); });
        box.appendChild(b);
      });
    }

    // The page's language: those it speaks.
    languages().forEach(function (code) {
      var o = document.createElement('option');
      o.value = code;
      o.lang = code;
      o.textContent = (window.waitroomText && window.waitroomText[code].language_name) || code;
      field('page.language').appendChild(o);
    });

    window.addEventListener('message', function (ev) {
      var f = $('preview-frame');
      if (ev.origin !== location.origin || ev.source !== f.contentWindow || !ev.data || ev.data.type !== 'waitroom-preview-ready') return;
      post();
    });

    // ---- send ----

    function send() {
      clearErrors();
      var vals = values();
      if (mode === 'create') {
        var id = vals.event_id;
        if (!id) {
          // PUT /v1/events/ names no event (a 404 about the path): say what the field needs.
          showProblem({status: 400, body: {code: 'invalid_event_id',
            detail: 'event_id is required: lower-case letters, digits, - and _ (it is in the page\'s address)'}});
          return;
        }
        deps.api('PUT', '/v1/events/' + encodeURIComponent(id), createBody(vals), {'If-None-Match': '*'}).then(function (r) {
          if (r.status === 201) {
            result('Created ' + id + ' (version ' + r.body.version + '). The audit trail has it.');
            deps.select(id);
            open('edit', r.body, r.etag);
            result('Created ' + id + ' (version ' + r.body.version + '). The audit trail has it.');
            deps.refresh();
          } else if (r.status === 412) {
            var at = r.body && r.body.current_version ? ' (version ' + r.body.current_version + ')' : '';
            showProblem({status: 412, body: {code: 'precondition_failed',
              detail: 'event_id: an event ' + id + ' exists already' + at + ': choose another id, or choose that event and edit its settings.'}});
          } else {
            showProblem(r);
          }
        }).catch(failed);
        return;
      }
      var patch = patchBody(vals);
      if (!Object.keys(patch).length) { result('Nothing changed.'); return; }
      deps.api('PATCH', '/v1/events/' + encodeURIComponent(eventId), patch, {'If-Match': '"' + version + '"'}).then(function (r) {
        if (r.status === 200) {
          var changed = Object.keys(patch).join(', ');
          open('edit', r.body, r.etag);
          result('Saved ' + changed + ' (version ' + r.body.version + '). The audit trail has it.');
          deps.refresh();
        } else if (r.status === 412) {
          conflict(vals);
        } else {
          showProblem(r);
        }
      }).catch(failed);
    }

    function failed(err) {
      if (err.message === 'unauthorized') return;
      $('form-error').textContent = 'Failed: ' + err.message;
      $('form-error').hidden = false;
    }

    // conflict reads the event again after a 412 and shows what changed on each side since
    // the form was filled; the form keeps the operator's draft.
    function conflict(mine) {
      deps.api('GET', '/v1/events/' + encodeURIComponent(eventId)).then(function (r) {
        if (r.status !== 200) { showProblem(r); return; }
        var theirsEvent = r.body;
        // Their values, read the way the form reads its own.
        var keep = values();
        fill(theirsEvent);
        showChallenge();
        var theirs = values();
        fill(null);
        Object.keys(keep).forEach(function (p) { var el = field(p); if (el.type === 'checkbox') el.checked = keep[p] === 'true'; else el.value = keep[p]; });
        showChallenge();
        var them = changedPaths(base, theirs), us = changedPaths(base, mine);
        var box = $('conflict');
        var list = $('conflict-list');
        list.textContent = '';
        var show = function (v) { return v === '' ? '(none)' : v; };
        them.forEach(function (p) {
          var li = document.createElement('li');
          var both = us.indexOf(p) >= 0;
          li.textContent = p + ': ' + show(base[p]) + ' → ' + show(theirs[p]) + (both ? ' (you set ' + show(mine[p]) + ')' : '');
          if (both) li.className = 'both';
          list.appendChild(li);
        });
        if (!them.length) {
          var li = document.createElement('li');
          li.textContent = 'Fields this form does not show (version ' + theirsEvent.version + ').';
          list.appendChild(li);
        }
        $('conflict-text').textContent = 'Someone changed ' + eventId + ' while you edited it: it is at version ' + theirsEvent.version +
          ' now. Nothing of yours was written. Their changes:';
        box.hidden = false;
        box.scrollIntoView({block: 'nearest'});
        // Apply: their version becomes the base; the fields only they changed take their
        // values; the operator's own changes stay and are sent over their version.
        $('conflict-apply').onclick = function () {
          them.forEach(function (p) {
            if (us.indexOf(p) >= 0) return;
            var el = field(p);
            if (el.type === 'checkbox') el.checked = theirs[p] === 'true'; else el.value = theirs[p];
          });
          base = theirs;
          version = theirsEvent.version;
          loaded = theirsEvent;
          box.hidden = true;
          send();
        };
        $('conflict-discard').onclick = function () {
          box.hidden = true;
          open('edit', theirsEvent, r.etag);
          result('Your changes were dropped; the form shows version ' + theirsEvent.version + '.');
        };
      }).catch(failed);
    }

    // ---- wiring ----

    form.addEventListener('submit', function (ev) { ev.preventDefault(); send(); });
    $('editor-cancel').addEventListener('click', close);
    field('challenge.type').addEventListener('change', showChallenge);
    field('prequeue_order').addEventListener('change', drawNote);
    // The auto admission's objective and bounds only in mode auto (hidden fields are not sent).
    function autoFields() { $('auto-fields').hidden = value(field('admission_mode')) !== 'auto'; }
    field('admission_mode').addEventListener('change', autoFields);
    form.addEventListener('input', function (ev) {
      var el = ev.target;
      if (el.getAttribute && el.getAttribute('aria-invalid')) {
        el.removeAttribute('aria-invalid');
        var p = form.querySelector('.field-error[data-error-for="' + el.getAttribute('data-field') + '"]');
        if (p) p.hidden = true;
      }
      if (el.id === 'f-opens-at') opensIn();
      if (el.classList && el.classList.contains('color')) swatch(el);
      clearTimeout(previewTimer);
      previewTimer = setTimeout(function () { preview(false); }, 150);
    });
    form.addEventListener('change', function () { clearTimeout(previewTimer); preview(false); });
    function swatch(el) {
      if (!el || !el.parentNode) return;
      var s = el.parentNode.querySelector('.swatch-box');
      if (s) s.style.backgroundColor = /^#([0-9a-f]{3}|[0-9a-f]{6})$/i.test(el.value.trim()) ? el.value.trim() : 'transparent';
    }
    setInterval(opensIn, 1000);

    return {
      create: function () { open('create', null, null); },
      edit: function (e, etag) { open('edit', e, etag); },
      isOpen: function () { return !!mode; },
      editing: function () { return mode === 'edit' ? eventId : ''; }
    };
  };
})();
