package redisstore

import (
	"bufio"
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/rueidis"
)

// Minimum server versions. The scripts read marks with BITFIELD_RO (Redis 6.2); on a cluster
// the notifier uses sharded Pub/Sub, SPUBLISH and SSUBSCRIBE (Redis 7.0).
var (
	MinVersion        = Version{6, 2, 0}
	MinClusterVersion = Version{7, 0, 0}
)

// Version is a server's redis_version (Valkey reports the Redis version it is compatible with).
type Version struct{ Major, Minor, Patch int }

func (v Version) String() string { return fmt.Sprintf("%d.%d.%d", v.Major, v.Minor, v.Patch) }

// Less reports whether v is older than w.
func (v Version) Less(w Version) bool {
	if v.Major != w.Major {
		return v.Major < w.Major
	}
	if v.Minor != w.Minor {
		return v.Minor < w.Minor
	}
	return v.Patch < w.Patch
}

// VersionError is a server older than the store needs.
type VersionError struct {
	Have, Need Version
	Cluster    bool
}

func (e *VersionError) Error() string {
	mode, why := "standalone", "BITFIELD_RO in the scripts"
	if e.Cluster {
		mode, why = "cluster", "sharded Pub/Sub (SPUBLISH/SSUBSCRIBE) on a cluster"
	}
	return fmt.Sprintf("redis %s (%s) is too old: waitroom needs Redis >= %s for %s (>= %s standalone, >= %s on a cluster)",
		e.Have, mode, e.Need, why, MinVersion, MinClusterVersion)
}

// ParseInfoServer reads redis_version and redis_mode from the text of INFO server.
// Errors: no redis_version, or one that is not major.minor[.patch].
func ParseInfoServer(info string) (v Version, cluster bool, err error) {
	found := false
	sc := bufio.NewScanner(strings.NewReader(info))
	for sc.Scan() {
		k, val, ok := strings.Cut(strings.TrimSpace(sc.Text()), ":")
		if !ok {
			continue
		}
		switch k {
		case "redis_version":
			parts := strings.SplitN(val, ".", 3)
			if len(parts) < 2 {
				return v, false, fmt.Errorf("redisstore: unreadable redis_version %q", val)
			}
			nums := [3]int{}
			for i, p := range parts {
				n, perr := strconv.Atoi(p)
				if perr != nil || n < 0 {
					return v, false, fmt.Errorf("redisstore: unreadable redis_version %q", val)
				}
				nums[i] = n
			}
			v, found = Version{nums[0], nums[1], nums[2]}, true
		case "redis_mode":
			cluster = val == "cluster"
		}
	}
	if !found {
		return v, false, fmt.Errorf("redisstore: INFO server has no redis_version")
	}
	return v, cluster, nil
}

// CheckServer returns a *VersionError when the INFO server text names a version older than
// the store needs in its mode (standalone or cluster), or the parse error.
func CheckServer(info string) error {
	v, cluster, err := ParseInfoServer(info)
	if err != nil {
		return err
	}
	need := MinVersion
	if cluster {
		need = MinClusterVersion
	}
	if v.Less(need) {
		return &VersionError{Have: v, Need: need, Cluster: cluster}
	}
	return nil
}

// CheckVersion asks c for INFO server (one node; every node of a cluster runs the same
// version in practice) and checks it with CheckServer. Errors: the call's, or CheckServer's.
func CheckVersion(ctx context.Context, c rueidis.Client) error {
	info, err := c.Do(ctx, c.B().Info().Section("server").Build()).ToString()
	if err != nil {
		return fmt.Errorf("redisstore: INFO server: %w", err)
	}
	return CheckServer(info)
}
