package main

import (
	"bytes"
	"net"
	"strings"
	"testing"
)

// TestGetNamesWhatItTried: `netdir get` with nothing listening names the
// address, the tries and the time, not "context deadline exceeded".
func TestGetNamesWhatItTried(t *testing.T) {
	lis, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.LocalAddr().String()
	lis.Close()
	for _, c := range kvCmds() {
		var out bytes.Buffer
		c.SetOut(&out)
		c.SetErr(&out)
		args := []string{"hot", "v"}[:len(strings.Fields(c.Use))-1]
		c.SetArgs(append([]string{"--service", addr, "--timeout", "300ms"}, args...))
		err := c.Execute()
		want := c.Name() + " hot: no answer from " + addr + " after "
		if c.Name() == "put" {
			want = "put hot: outcome unknown: no answer from " + addr + " after "
		}
		if err == nil || !strings.HasPrefix(err.Error(), want) || !strings.Contains(err.Error(), " tries in ") {
			t.Errorf("%s: error %v, want %q... N tries in ~300ms", c.Name(), err, want)
		}
	}
}
