//go:build race

package replicas

// raceEnabled: the test runs with -race, and so do the replicas it builds.
const raceEnabled = true
