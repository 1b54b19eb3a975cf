package crowd

import (
	"fmt"
	"os"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// insideSize is the size (bytes) of an inside file: the visitors inside now, then their most,
// two int64 in the host's order.
const insideSize = 16

// insideCounts are the visitors inside at once and their most, in this process's memory or
// in a file mapped shared by the crowd's processes (GateConfig.InsideFile), so that the most
// is the crowd's at one moment and not a sum of each process's most at its own.
type insideCounts struct {
	now, most *atomic.Int64
	mem       []byte // the mapping, nil in process memory
}

// openInside maps path (insideSize bytes, created by createInside) or, with path "", keeps
// the counts in memory. Errors: the file's, mmap(2)'s.
func openInside(path string) (*insideCounts, error) {
	if path == "" {
		var c [2]atomic.Int64
		return &insideCounts{now: &c[0], most: &c[1]}, nil
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	mem, err := unix.Mmap(int(f.Fd()), 0, insideSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("crowd: mapping %s: %w", path, err)
	}
	// A mapping starts at a page: both words are 8-byte aligned, as atomic operations need.
	c := (*[2]atomic.Int64)(unsafe.Pointer(&mem[0]))
	return &insideCounts{now: &c[0], most: &c[1], mem: mem}, nil
}

// createInside creates the inside file of a crowd of several processes at path.
func createInside(path string) error {
	return os.WriteFile(path, make([]byte, insideSize), 0o600)
}

// enter counts a visitor in and raises the most.
func (c *insideCounts) enter() {
	in := c.now.Add(1)
	for {
		m := c.most.Load()
		if in <= m || c.most.CompareAndSwap(m, in) {
			return
		}
	}
}

func (c *insideCounts) leave() { c.now.Add(-1) }

func (c *insideCounts) close() {
	if c.mem != nil {
		_ = unix.Munmap(c.mem)
		c.mem = nil
	}
}
