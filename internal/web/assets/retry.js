// The waiting page's pacing of reconnects and retries (docs/api.md, "Pages"). Plain script, no
// dependencies; the clock and the random source are passed in, so that a test drives it with
// fake ones.
//
// A page that lost its live connection, or whose read got no answer, tries again after a
// jittered back-off: the n-th retry in a row waits a random time in [d/2, d], d = 1 s doubling
// to 30 s, so that pages cut off together (an instance restarting, a network blip) do not come
// back in one wave. A live connection that ends counts as a failure in a row unless it lived
// STABLE_MS: one that opens, says its first word and dies again is an overloaded instance
// (issue 22: pages that reconnected after a second each time, because every socket opened
// before it died, kept an overloaded fleet overloaded). A server's Retry-After (a 503 of an
// instance at its cap, a 429) is a floor, spread over [1, 1.5] times itself.
window.WaitroomRetry = function (random) {
  'use strict';
  random = random || Math.random;
  var STABLE_MS = 60000; // a connection that lived this long ended by accident: start counting again
  var drops = 0;         // live connections in a row that ended before STABLE_MS
  function backoff(n) {
    var d = Math.min(30000, 1000 * Math.pow(2, Math.max(0, n - 1)));
    return d / 2 + random() * d / 2;
  }
  return {
    STABLE_MS: STABLE_MS,
    // backoff is the delay (ms) before the n-th retry in a row (n from 1).
    backoff: backoff,
    // dropped is the delay (ms) before connecting again after a live connection opened at
    // openedMS ended at nowMS.
    dropped: function (nowMS, openedMS) {
      drops = nowMS - openedMS >= STABLE_MS ? 1 : drops + 1;
      return backoff(drops);
    },
    // after is the delay (ms) before the n-th retry in a row of a request answered with
    // Retry-After retryAfterS (s; 0, NaN or absent: none).
    after: function (retryAfterS, n) {
      var d = backoff(n);
      if (retryAfterS > 0) d = Math.max(d, retryAfterS * 1000 * (1 + random() / 2));
      return d;
    },
    // drops is the count of live connections in a row that ended before STABLE_MS.
    drops: function () { return drops; }
  };
};
