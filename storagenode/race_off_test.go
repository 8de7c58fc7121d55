//go:build !race

package storagenode_test

const raceEnabled = false
