//go:build !race

package autoexp

const raceEnabled = false
