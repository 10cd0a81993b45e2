//go:build !race

package dhcp

const raceEnabled = false
