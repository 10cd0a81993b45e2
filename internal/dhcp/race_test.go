//go:build race

package dhcp

// raceEnabled: the race detector is on, and allocation counts mean nothing.
const raceEnabled = true
