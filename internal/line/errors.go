package line

import (
	"errors"
)

// The kinds of refusal of the line's rules. Each is returned wrapped in an *Error that says
// why (errors.Is finds the kind); Problem maps each to its HTTP problem.
var (
	// ErrInvalidJoin: the join asks for something contradictory or malformed (user_id and
	// identity both, a user id too long).
	ErrInvalidJoin = errors.New("line: invalid join")
	// ErrInvalidIdempotencyKey: an Idempotency-Key that token.ValidIdempotencyKey refuses.
	ErrInvalidIdempotencyKey = errors.New("line: invalid idempotency key")
	// ErrAdminRequired: a user_id given on a join not made with the admin key.
	ErrAdminRequired = errors.New("line: user_id needs the admin key")
	// ErrIdentityNotSupported: an identity token on an instance without an identity key.
	ErrIdentityNotSupported = errors.New("line: identity tokens are not configured")
	// ErrInvalidIdentity: an identity token that does not verify.
	ErrInvalidIdentity = errors.New("line: invalid identity")
	// ErrIdentityRequired: an anonymous join of an event with identity_required.
	ErrIdentityRequired = errors.New("line: the event needs an identity")
	// ErrChallengeRequired: a join without the proof the event's challenge asks for, or with
	// an expired one.
	ErrChallengeRequired = errors.New("line: a solved challenge is required")
	// ErrChallengeFailed: a proof that does not hold (wrong, forged, for another event, used).
	ErrChallengeFailed = errors.New("line: challenge failed")
	// ErrChallengeUnavailable: the challenge cannot be checked now (no challenge key, the
	// captcha service does not answer).
	ErrChallengeUnavailable = errors.New("line: challenge check unavailable")
	// ErrAdmissionShared: an admission (an admitted session's token or cookie) used from more
	// addresses at once than the event's limits.addresses_per_admission (Bind).
	ErrAdmissionShared = errors.New("line: admission used from too many addresses")
)

// Error is a refusal of the line's rules: Kind is one of the Err* kinds (or a
// *queue.RateLimitedError), Detail says why for people.
type Error struct {
	Kind   error
	Detail string
}

func (e *Error) Error() string { return e.Kind.Error() + ": " + e.Detail }

// Unwrap returns the kind.
func (e *Error) Unwrap() error { return e.Kind }

func refuse(kind error, detail string) error { return &Error{Kind: kind, Detail: detail} }
