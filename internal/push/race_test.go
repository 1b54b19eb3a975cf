//go:build race

package push

// raceEnabled: the tests run under the race detector, which slows them several times.
const raceEnabled = true
