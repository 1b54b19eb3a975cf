package push

import "github.com/waitroom/waitroom/internal/connlimit"

// Files kept free of push connections under the open-file limit (see DefaultMaxConnsFor).
const (
	// reservedFiles: the database and Redis pools, the listener, log files and the short
	// requests (joins, status reads, /healthz, /readyz, admin calls) in flight.
	reservedFiles = 1024
	// reservedShare of the limit is kept free too, on large limits.
	reservedShare = 0.2
)

// DefaultMaxConnsFor is the default push connection cap of a process allowed limit open files
// (0 = unknown): limit minus the larger of reservedFiles and a fifth of the limit, at most
// DefaultMaxConns and at least 1. With the limit of 20,000 files: 16,000 push connections,
// 4,000 files left for everything else (issue 12: 19,986 SSE streams exhausted the files and
// /healthz stopped answering). The app keeps it within the cap of all connections
// (connlimit.DefaultMaxConnsFor, 18,000 there).
func DefaultMaxConnsFor(limit uint64) int {
	if limit == 0 {
		return DefaultMaxConns
	}
	return min(connlimit.Below(limit, reservedFiles, reservedShare), DefaultMaxConns)
}
