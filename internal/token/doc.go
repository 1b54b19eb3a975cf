// Package token holds Waitroom's cryptographic identifiers and credentials:
//
//   - [DeriveKeys] turns the operator's WAITROOM_TOKEN_KEY into every key the service needs
//     (HKDF-SHA256, RFC 5869), so one secret is all an operator stores;
//   - [TicketIDs] encodes a [queue.TicketRef] into a self-authenticating ticket id: the id
//     carries its own HMAC, so the store keeps nothing per waiting ticket;
//   - [Admissions] mints and verifies admission tokens, EdDSA (Ed25519) JWTs (RFC 7519,
//     RFC 8037) that a protected back end can check offline against [Admissions.JWKS]
//     (RFC 7517), with key rotation by "kid";
//   - [IdentityVerifier] checks the identity JWTs with which an integrating site vouches for
//     its user (HS256 and/or EdDSA), and [UserKey] condenses a user id into the fixed-size key
//     the store deduplicates users by.
//
// Every type here is safe for concurrent use once built, and no function panics on untrusted
// input. Functions that judge time take an explicit now so that callers (and tests) control
// the clock.
package token
