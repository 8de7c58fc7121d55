package directory_test

import (
	"testing"

	"github.com/netdir/netdir/directory/vectors"
)

// TestVectors holds the Go core to the shared vector suite.
func TestVectors(t *testing.T) {
	if n := vectors.Count(t); n < 60 {
		t.Errorf("the vector suite has %d cases; the contract asks for at least 60", n)
	}
	vectors.Run(t, &vectors.Core{})
}
