package grpcsec

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestLoopback(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1:7400": true, "[::1]:7400": true, "localhost:7400": true, "127.9.9.9:1": true,
		"0.0.0.0:7400": false, "[::]:7400": false, ":7400": false, "10.74.0.20:7400": false, "nonsense": false,
	} {
		if got := Loopback(addr); got != want {
			t.Errorf("Loopback(%q) = %v, want %v", addr, got, want)
		}
	}
}

func TestReadTokenAndCheck(t *testing.T) {
	dir := t.TempDir()
	tok := filepath.Join(dir, "token")
	if err := os.WriteFile(tok, []byte("  abc \nsecond line\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got, err := ReadToken(tok); err != nil || got != "abc" {
		t.Fatalf("ReadToken = %q, %v", got, err)
	}
	if err := os.WriteFile(tok, []byte("\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadToken(tok); err == nil || !strings.Contains(err.Error(), "empty token") {
		t.Fatalf("empty token: %v", err)
	}
	var none *TLS
	if none.Enabled() || none.Check("tls", true) != nil {
		t.Fatal("nil TLS: want plaintext, no error")
	}
	half := &TLS{Key: tok}
	if err := half.Check("switches[0].tls", false); err == nil || !strings.HasPrefix(err.Error(), "switches[0].tls: give cert and key together") {
		t.Fatalf("half a pair: %v", err)
	}
	rel := &TLS{CA: "ca.pem"}
	rel.Resolve(dir)
	if err := rel.Check("tls", false); err == nil || err.Error() != "tls.ca: "+filepath.Join(dir, "ca.pem")+": no such file or directory" {
		t.Fatalf("missing ca: %v", err)
	}
}
