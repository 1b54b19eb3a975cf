// Waitroom proof-of-work solver, run as a Web Worker (no dependencies).
//
// The page posts a challenge string (or {challenge: "..."}); the worker searches for a
// solution s such that SHA-256(challenge + ":" + s) starts with `difficulty` zero bits, the
// difficulty being the challenge's fourth field (see internal/challenge and
// docs/challenge.md). It posts:
//
//   {type: "progress", hashes, estimate, rate}  every quarter second or so: hashes tried so
//       far, the expected total (2^difficulty; the actual count is geometric around it) and
//       the measured rate in hashes per second;
//   {type: "solved", solution, hashes}          once; the worker then stays idle;
//   {type: "error", message}                    for a challenge it cannot read.
//
// To stop or to start over with a new challenge, terminate the worker and create a new one.
// Several workers may solve the same challenge at once (navigator.hardwareConcurrency): each
// starts from its own random 32-bit prefix, so their searches do not overlap; take the first
// solution.
//
// Solutions are 16 lower-case hex digits: 8 random, then an 8-digit counter. SHA-256 is
// implemented here (FIPS 180-4) rather than taken from crypto.subtle, whose promise per call
// costs more than the hash itself; the 64-byte blocks before the counter are hashed once.
'use strict';

const K = new Int32Array([
  0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
  0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
  0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
  0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
  0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
  0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
  0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
  0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
]);
const IV = new Int32Array([
  0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19,
]);
const W = new Int32Array(64);

// compress runs the SHA-256 compression function on the 16 words m[off..off+16) and adds the
// result into the state h (8 words), in place.
function compress(h, m, off) {
  for (let t = 0; t < 16; t++) W[t] = m[off + t];
  for (let t = 16; t < 64; t++) {
    const x = W[t - 15], y = W[t - 2];
    const s0 = ((x >>> 7) | (x << 25)) ^ ((x >>> 18) | (x << 14)) ^ (x >>> 3);
    const s1 = ((y >>> 17) | (y << 15)) ^ ((y >>> 19) | (y << 13)) ^ (y >>> 10);
    W[t] = (W[t - 16] + s0 + W[t - 7] + s1) | 0;
  }
  let a = h[0], b = h[1], c = h[2], d = h[3], e = h[4], f = h[5], g = h[6], hh = h[7];
  for (let t = 0; t < 64; t++) {
    const S1 = ((e >>> 6) | (e << 26)) ^ ((e >>> 11) | (e << 21)) ^ ((e >>> 25) | (e << 7));
    const t1 = (hh + S1 + ((e & f) ^ (~e & g)) + K[t] + W[t]) | 0;
    const S0 = ((a >>> 2) | (a << 30)) ^ ((a >>> 13) | (a << 19)) ^ ((a >>> 22) | (a << 10));
    const t2 = (S0 + ((a & b) ^ (a & c) ^ (b & c))) | 0;
    hh = g; g = f; f = e; e = (d + t1) | 0; d = c; c = b; b = a; a = (t1 + t2) | 0;
  }
  h[0] = (h[0] + a) | 0; h[1] = (h[1] + b) | 0; h[2] = (h[2] + c) | 0; h[3] = (h[3] + d) | 0;
  h[4] = (h[4] + e) | 0; h[5] = (h[5] + f) | 0; h[6] = (h[6] + g) | 0; h[7] = (h[7] + hh) | 0;
}

const HEX = new Uint8Array([48, 49, 50, 51, 52, 53, 54, 55, 56, 57, 97, 98, 99, 100, 101, 102]);
const SOLUTION_LEN = 16;
const PROGRESS_MS = 250;

// difficultyOf returns the difficulty field of a challenge, or 0 when it is not one.
function difficultyOf(challenge) {
  const f = challenge.split('.');
  if (f.length !== 6 || f[0] !== 'v1' || !/^[1-9][0-9]?$/.test(f[3])) return 0;
  const d = Number(f[3]);
  return d <= 40 ? d : 0;
}

function solve(challenge) {
  const d = difficultyOf(challenge);
  if (!d || !/^[\x21-\x7e]+$/.test(challenge)) {
    postMessage({ type: 'error', message: 'not a waitroom challenge' });
    return;
  }
  const prefix = challenge + ':';
  const p = prefix.length;
  const len = p + SOLUTION_LEN;
  const fixed = Math.floor(p / 64); // whole blocks before the solution: hashed once

  const mid = new Int32Array(IV);
  const fw = new Int32Array(16);
  for (let blk = 0; blk < fixed; blk++) {
    for (let i = 0; i < 16; i++) {
      const o = blk * 64 + i * 4;
      fw[i] = (prefix.charCodeAt(o) << 24) | (prefix.charCodeAt(o + 1) << 16) |
        (prefix.charCodeAt(o + 2) << 8) | prefix.charCodeAt(o + 3);
    }
    compress(mid, fw, 0);
  }

  // The tail: the rest of the prefix, the solution, 0x80, zeros, the bit length (64-bit BE).
  const tailLen = len - fixed * 64;
  const blocks = Math.ceil((tailLen + 9) / 64);
  const tb = new Uint8Array(blocks * 64);
  for (let i = fixed * 64; i < p; i++) tb[i - fixed * 64] = prefix.charCodeAt(i);
  const off = p - fixed * 64; // the solution's index in tb
  tb[tailLen] = 0x80;
  const bitLen = len * 8;
  tb[tb.length - 4] = bitLen >>> 24; tb[tb.length - 3] = bitLen >>> 16;
  tb[tb.length - 2] = bitLen >>> 8; tb[tb.length - 1] = bitLen;
  const tw = new Int32Array(blocks * 16);
  const word = (i) => { tw[i] = (tb[4 * i] << 24) | (tb[4 * i + 1] << 16) | (tb[4 * i + 2] << 8) | tb[4 * i + 3]; };
  const firstWord = (off + 8) >> 2, lastWord = (off + 15) >> 2; // the words the counter touches

  const rnd = new Uint32Array(1);
  const setHigh = () => {
    crypto.getRandomValues(rnd);
    for (let i = 0; i < 8; i++) tb[off + i] = HEX[(rnd[0] >>> (28 - 4 * i)) & 15];
    for (let i = 0; i < tw.length; i++) word(i);
  };
  setHigh();

  const h = new Int32Array(8);
  const estimate = 2 ** d;
  const start = performance.now();
  let lastReport = start;
  let hashes = 0;
  let ctr = 0;
  for (;;) {
    for (let i = 0; i < 8; i++) tb[off + 8 + i] = HEX[(ctr >>> (28 - 4 * i)) & 15];
    for (let i = firstWord; i <= lastWord; i++) word(i);
    h.set(mid);
    for (let blk = 0; blk < blocks; blk++) compress(h, tw, blk * 16);
    hashes++;
    const ok = d < 32 ? (h[0] >>> (32 - d)) === 0
      : h[0] === 0 && (d === 32 || (h[1] >>> (64 - d)) === 0);
    if (ok) {
      let solution = '';
      for (let i = 0; i < SOLUTION_LEN; i++) solution += String.fromCharCode(tb[off + i]);
      postMessage({ type: 'solved', solution, hashes });
      return;
    }
    ctr = (ctr + 1) >>> 0;
    if (ctr === 0) setHigh(); // 2^32 tries under one prefix: take another
    if ((hashes & 4095) === 0) {
      const now = performance.now();
      if (now - lastReport >= PROGRESS_MS) {
        lastReport = now;
        postMessage({ type: 'progress', hashes, estimate, rate: Math.round(hashes / ((now - start) / 1000)) });
      }
    }
  }
}

self.onmessage = (ev) => {
  const m = ev.data;
  solve(typeof m === 'string' ? m : String((m && m.challenge) || ''));
};
