// Package captcha checks a token of an operator's captcha service at its siteverify endpoint,
// the protocol Cloudflare Turnstile and hCaptcha share (reCAPTCHA's, which they copied): a POST
// of the form fields secret, response (the token) and remoteip, answered with JSON
// {"success": bool, "error-codes": [...], ...}. It is the check of an event's
// "challenge": {"type": "external"} (docs/challenge.md).
//
// References: Cloudflare, "Validate the token" (developers.cloudflare.com/turnstile/get-started/
// server-side-validation); hCaptcha, "Verify the User Response Server Side"
// (docs.hcaptcha.com/#verify-the-user-response-server-side).
package captcha

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"
)

// Defaults and limits.
const (
	// DefaultTimeout bounds one verification: the services answer in tens of milliseconds; a
	// join waits at most this long for one that does not.
	DefaultTimeout = 3 * time.Second
	// MaxToken is the longest token sent to a service (bytes). Turnstile's are at most 2,048
	// characters; hCaptcha's are of the same order.
	MaxToken = 8 << 10
	// maxReply bounds the reply read (bytes): a verdict is a few hundred.
	maxReply = 64 << 10
)

// DefaultSiteverifyURLs are the verification endpoints a Verifier allows unless configured
// otherwise: Cloudflare Turnstile's, hCaptcha's and Google reCAPTCHA's, as their documentation
// gives them (see the package comment; reCAPTCHA: developers.google.com/recaptcha/docs/verify).
var DefaultSiteverifyURLs = []string{
	"https://challenges.cloudflare.com/turnstile/v0/siteverify",
	"https://api.hcaptcha.com/siteverify",
	"https://www.google.com/recaptcha/api/siteverify",
}

// NoSiteverifyURLs is the allow-list value (ParseAllowList) that allows no verification URL
// at all: events cannot use "challenge": {"type": "external"}.
const NoSiteverifyURLs = "none"

// ErrUnavailable: the service did not give a verdict (it did not answer within the timeout,
// answered with an HTTP error, or not with the JSON verdict). The join cannot be checked; it is
// the service's failure, not the client's.
var ErrUnavailable = errors.New("captcha: the verification service is unavailable")

// ErrNotAllowed: the URL is not one of the verification URLs the operator allows
// (Config.Allowed). Verify wraps it in ErrUnavailable: nothing is sent, the join cannot be
// checked.
var ErrNotAllowed = errors.New("captcha: the siteverify URL is not one the operator allows")

// Config configures a Verifier.
type Config struct {
	// Client makes the requests. Defaults to a client of its own without redirects (a
	// siteverify endpoint does not redirect; following one would send the secret elsewhere).
	Client *http.Client
	// Timeout bounds each verification. Defaults to DefaultTimeout.
	Timeout time.Duration
	// Allowed are the only URLs Verify POSTs to, compared exactly (scheme, host, port, path
	// and query as written): an event's siteverify_url is set through the admin API, and an
	// admin key must not be able to point the secret, or the server's requests, anywhere
	// else (issue 20, item 9). The operator sets the list (serve --captcha-siteverify-urls).
	// Nil: DefaultSiteverifyURLs; empty and non-nil: none.
	Allowed []string
}

// Verifier checks tokens. It is safe for concurrent use.
type Verifier struct {
	client  *http.Client
	timeout time.Duration
	allowed []string
}

// New returns a Verifier.
func New(cfg Config) *Verifier {
	cfg.Client = cmp.Or(cfg.Client, &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }})
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.Allowed == nil {
		cfg.Allowed = DefaultSiteverifyURLs
	}
	return &Verifier{client: cfg.Client, timeout: cfg.Timeout, allowed: slices.Clone(cfg.Allowed)}
}

// ParseAllowList reads a comma-separated list of verification URLs, each an absolute http or
// https URL without user information or fragment; NoSiteverifyURLs is the empty list. Errors
// name the first entry that is not such a URL.
func ParseAllowList(s string) ([]string, error) {
	if strings.TrimSpace(s) == NoSiteverifyURLs {
		return []string{}, nil
	}
	var out []string
	for _, e := range strings.Split(s, ",") {
		e = strings.TrimSpace(e)
		u, err := url.Parse(e)
		if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.User != nil || u.Fragment != "" {
			return nil, fmt.Errorf("%q is not an absolute http or https URL (or %q for none)", e, NoSiteverifyURLs)
		}
		out = append(out, e)
	}
	return out, nil
}

// Allowed reports whether Verify may POST to siteverifyURL: nil, or an error wrapping
// ErrNotAllowed that lists the allowed URLs.
func (v *Verifier) Allowed(siteverifyURL string) error {
	if slices.Contains(v.allowed, siteverifyURL) {
		return nil
	}
	if len(v.allowed) == 0 {
		return fmt.Errorf("%w: this instance allows none", ErrNotAllowed)
	}
	return fmt.Errorf("%w: this instance allows %s", ErrNotAllowed, strings.Join(v.allowed, ", "))
}

// AllowedURLs are the verification URLs Verify may POST to (Config.Allowed), in the operator's
// order: what an event's external challenge may name (the console offers them).
func (v *Verifier) AllowedURLs() []string { return slices.Clone(v.allowed) }

// Result is a service's verdict.
type Result struct {
	Success bool
	// ErrorCodes are the service's reasons for a failure (e.g. "invalid-input-response",
	// "timeout-or-duplicate").
	ErrorCodes []string
	// Hostname is the site the token was solved on, as the service saw it.
	Hostname string
}

// reply is the JSON a siteverify endpoint answers.
type reply struct {
	Success    *bool    `json:"success"`
	ErrorCodes []string `json:"error-codes"`
	Hostname   string   `json:"hostname"`
}

// Verify asks the service at siteverifyURL whether token is valid: one POST of the form
// secret, response and remoteip (omitted when ""), within the Verifier's timeout (and ctx's).
// A token is single use at the services: a second Verify of it fails. Nothing is sent to a URL
// the Verifier does not allow (Config.Allowed). Errors: ErrUnavailable (wrapped, with the
// cause: ErrNotAllowed for such a URL) when there is no verdict; a verdict, success or not, is
// no error.
func (v *Verifier) Verify(ctx context.Context, siteverifyURL, secret, token, remoteIP string) (Result, error) {
	if err := v.Allowed(siteverifyURL); err != nil {
		return Result{}, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	if len(token) > MaxToken {
		return Result{ErrorCodes: []string{"invalid-input-response"}}, nil
	}
	ctx, cancel := context.WithTimeout(ctx, v.timeout)
	defer cancel()
	form := url.Values{"secret": {secret}, "response": {token}}
	if remoteIP != "" {
		form.Set("remoteip", remoteIP)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, siteverifyURL, strings.NewReader(form.Encode()))
	if err != nil {
		return Result{}, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Accept", "application/json")
	resp, err := v.client.Do(req)
	if err != nil {
		return Result{}, fmt.Errorf("%w: %v", ErrUnavailable, redact(err))
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxReply))
	if err != nil {
		return Result{}, fmt.Errorf("%w: reading the reply: %v", ErrUnavailable, err)
	}
	if resp.StatusCode != http.StatusOK {
		return Result{}, fmt.Errorf("%w: HTTP %d", ErrUnavailable, resp.StatusCode)
	}
	var r reply
	if err := json.Unmarshal(body, &r); err != nil || r.Success == nil {
		return Result{}, fmt.Errorf("%w: the reply is not a siteverify verdict", ErrUnavailable)
	}
	return Result{Success: *r.Success, ErrorCodes: r.ErrorCodes, Hostname: r.Hostname}, nil
}

// redact drops the URL from a client error (*url.Error names it; a siteverify URL holds no
// secret, but keep logs to the cause).
func redact(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}
