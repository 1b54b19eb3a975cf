// Package gate is an HTTP middleware that lets through only visitors admitted by a Waitroom
// waiting room, and sends everyone else to the line.
//
// The waiting-room page sends an admitted person to the event's redirect_url with
// ?waitroom_token=<admission token>. The gate verifies that token offline: it is a JWT
// (RFC 7519) signed with EdDSA over Ed25519 (RFC 8037), whose "kid" names a key of the waiting
// room's JWK Set (RFC 7517) at {base}/.well-known/jwks.json, with the claims
//
//	iss  "waitroom"
//	sub  ticket id
//	evt  event id (must be the gate's event)
//	num  ticket number (>= 1)
//	iat  issue time, Unix seconds
//	exp  the token's end, Unix seconds: the end of the admitted session, but at most the
//	     waiting room's token TTL (default 60 s) after iat; fresh tokens come with activity
//
// On that first request the gate stores the token in an HttpOnly cookie and redirects to the
// same URL without the parameter; later requests carry the cookie. API clients may send
// "Authorization: Bearer <admission token>" instead. A visitor without a valid admission gets
// a 303 redirect to the waiting-room page {base}/e/{event} (requests that accept text/html) or
// a 401 application/problem+json with code "admission_required" (everything else).
//
// The JWK Set is fetched when the gate starts and refreshed in the background; a token whose
// kid is unknown triggers an immediate, rate-limited refresh, so the waiting room's key
// rotation (WAITROOM_TOKEN_KEY=new,old) needs no restart here. With [Config.OnlineCheck] the
// gate also asks the waiting room whether the admitted session is still live
// (GET {base}/v1/events/{event}/admission), so a visitor who left or whose session ended is
// sent back even before the token's exp.
//
// [Gate.Site] wraps a whole site and protects the requests under [Config.Paths], decided by the
// waiting room's own path rule (what its gate and forward-auth check apply), so that a path
// the site's router or file server reads as a protected one ("/checkout/", "/%63heckout",
// "/CHECKOUT" on a case-insensitive origin) cannot pass; [Gate.Handler] protects everything it
// wraps.
//
// The verified admission reaches the wrapped handler through the request's context:
// see [FromContext]. The package depends on the standard library, github.com/golang-jwt/jwt/v5
// and golang.org/x/text (the path rule's Unicode forms) only.
package gate
