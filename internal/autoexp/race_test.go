//go:build race

package autoexp

// raceEnabled: the tests run under the race detector, which slows the whole harness (origin,
// gate, crowd: one process) several times.
const raceEnabled = true
