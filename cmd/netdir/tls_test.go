package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/netdir/netdir/cluster"
	"github.com/netdir/netdir/internal/grpcsec"
	"github.com/netdir/netdir/internal/grpcsec/pkitest"
)

// TestCtlTLSAndToken runs netdir ctl against a controller whose API speaks
// TLS and guards its mutating calls with a token: the right CA works, a
// wrong CA fails at once naming the certificate problem, a mutating call
// without the token is refused as Unauthenticated, and with it accepted;
// reads need no token.
func TestCtlTLSAndToken(t *testing.T) {
	dir := t.TempDir()
	pki := pkitest.Write(t, dir)
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv(tokenEnv, "")
	c, err := cluster.StartController(context.Background(), cluster.ControllerConfig{API: "127.0.0.1:0", Layout: testLayout,
		TLS: &grpcsec.TLS{Cert: pki.ServerCert, Key: pki.ServerKey}, APIToken: "s3cret"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	addr := c.APIAddr()

	if out, err := ctl(addr, "--ca", pki.CA, "status"); err != nil || !strings.Contains(out, "epoch") {
		t.Fatalf("status over TLS: %v\n%s", err, out)
	}
	start := time.Now()
	_, err = ctl(addr, "--ca", pki.OtherCA, "status")
	if err == nil || !strings.Contains(err.Error(), "TLS handshake failed") ||
		!strings.Contains(err.Error(), "certificate signed by unknown authority") || !strings.Contains(err.Error(), addr) {
		t.Fatalf("wrong CA: error %v, want one naming %s and the unknown authority", err, addr)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("wrong CA: failed after %v, want at once (the timeout is 5s)", d)
	}
	if _, err := ctl(addr, "--timeout", "500ms", "status"); err == nil || !strings.Contains(err.Error(), "if it speaks TLS, give its CA") {
		t.Fatalf("plaintext against a TLS API: error %v, want a hint at TLS", err)
	}

	_, err = ctl(addr, "--ca", pki.CA, "qos", "set", "gold", "--weight", "2")
	if status.Code(err) != codes.Unauthenticated || !strings.Contains(err.Error(), "--token-file") {
		t.Fatalf("mutating call without the token: %v, want Unauthenticated naming --token-file", err)
	}
	wrong := filepath.Join(dir, "wrong")
	if err := os.WriteFile(wrong, []byte("guess\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err = ctl(addr, "--ca", pki.CA, "--token-file", wrong, "qos", "set", "gold"); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("wrong token: %v", err)
	}
	if out, err := ctl(addr, "--ca", pki.CA, "--token-file", tokenFile, "qos", "set", "gold", "--weight", "2"); err != nil ||
		!strings.Contains(out, "gold id 1: reservation -, weight 2") {
		t.Fatalf("with the token: %v\n%s", err, out)
	}
	t.Setenv(tokenEnv, "s3cret")
	if _, err := ctl(addr, "--ca", pki.CA, "qos", "rm", "gold"); err != nil {
		t.Fatalf("token from $%s: %v", tokenEnv, err)
	}
	t.Setenv(tokenEnv, "")
	if out, err := ctl(addr, "--ca", pki.CA, "qos", "dump"); err != nil || !strings.Contains(out, "gold") {
		t.Fatalf("read without the token: %v\n%s", err, out)
	}
}
