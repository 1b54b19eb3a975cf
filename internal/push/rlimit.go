package push

import "syscall"

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
// /healthz stopped answering).
func DefaultMaxConnsFor(limit uint64) int {
	if limit == 0 {
		return DefaultMaxConns
	}
	reserve := max(uint64(reservedFiles), uint64(float64(limit)*reservedShare))
	if limit <= reserve {
		return 1
	}
	return int(min(limit-reserve, DefaultMaxConns))
}

// openFileLimit is the process's soft limit of open files (RLIMIT_NOFILE), 0 when unknown.
func openFileLimit() uint64 {
	var r syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &r); err != nil || r.Cur == ^uint64(0) {
		return 0
	}
	return r.Cur
}
