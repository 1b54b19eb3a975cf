// The waiting page's wait range (docs/api.md, "The wait range"). Plain script, no dependencies.
//
// eta_s from the server is a point estimate, position / admission rate (event.Event.ETA),
// which moves with every change of the measured rate: shown as it comes it jumps back and
// forth. Each eta_s received at time t is turned into a predicted admission time F = t + eta_s
// and the predictions are smoothed as TCP smooths round-trip times (RFC 6298, section 2): a
// mean m with gain 1/8 and a mean absolute deviation d with gain 1/4,
//
//     d <- d + (|F - m| - d) / 4,   m <- m + (F - m) / 8     (first sample: m = F, d = eta_s / 4)
//
// The range shown is P50 = m - now to P90 = P50 + max(1.6 d, 1.28 sqrt(position) / rate):
// 1.6 mean absolute deviations is about 1.28 standard deviations (MAD = 0.8 sd for a normal
// spread), the 90th percentile's distance from the median; the second term is the spread of the
// admissions themselves when they come at random, the standard deviation sqrt(k) / rate of the
// gamma-distributed time of k arrivals, where rate = position / (eta_s - the time until the
// opening). Between messages both ends count down with the clock; a new message moves m by an
// eighth of its surprise, so the range never jumps.
window.WaitroomETA = function () {
  'use strict';
  var m = null; // smoothed predicted admission time (ms since the epoch)
  var d = 0;    // smoothed mean absolute deviation of the predictions (ms)
  var pos = 0;  // the last position
  var wait = 0; // the last eta_s less the time until the opening (s)
  return {
    // update takes an eta_s (s) received at nowMS for the ticket at position; openS is the
    // time until the opening (s, 0 once open).
    update: function (nowMS, etaS, position, openS) {
      var f = nowMS + etaS * 1000;
      if (m === null) {
        m = f;
        d = etaS * 1000 / 4;
      } else {
        var err = f - m;
        d += (Math.abs(err) - d) / 4;
        m += err / 8;
      }
      pos = position;
      wait = Math.max(0, etaS - (openS || 0));
    },
    // reset forgets the history (a new ticket).
    reset: function () { m = null; d = 0; },
    // range is [P50, P90] in seconds from nowMS, or null before the first update.
    range: function (nowMS) {
      if (m === null) return null;
      var p50 = Math.max(0, (m - nowMS) / 1000);
      var random = pos > 0 ? 1.28 * wait / Math.sqrt(pos) : 0;
      return [p50, p50 + Math.max(1.6 * d / 1000, random)];
    }
  };
};
