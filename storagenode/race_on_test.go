//go:build race

package storagenode_test

const raceEnabled = true
