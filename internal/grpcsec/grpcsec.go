// Package grpcsec is the transport security of netdir's gRPC links (the
// controller's API, P4Runtime): TLS from PEM files, and a bearer token for
// the calls that change state. Plaintext stays the default, for BMv2 and
// the software switch on loopback.
package grpcsec

import (
	"context"
	"crypto/subtle"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/netdir/netdir/internal/yamlconf"
)

// TLS names PEM files. A server needs Cert and Key, and with CA also asks
// its clients for certificates signed by it; a client checks the server
// against CA (the system's roots without one), and presents Cert and Key
// if given.
type TLS struct {
	Cert string `yaml:"cert,omitempty"`
	Key  string `yaml:"key,omitempty"`
	CA   string `yaml:"ca,omitempty"`
	// ServerName is the name the server's certificate must carry (default:
	// the host of the address dialled).
	ServerName string `yaml:"server_name,omitempty"`
}

// Enabled reports whether any file is named: TLS is on.
func (t *TLS) Enabled() bool { return t != nil && (t.Cert != "" || t.Key != "" || t.CA != "") }

// Resolve makes the paths relative to dir, the directory of the file that
// named them.
func (t *TLS) Resolve(dir string) {
	if t != nil {
		t.Cert, t.Key, t.CA = yamlconf.Resolve(dir, t.Cert), yamlconf.Resolve(dir, t.Key), yamlconf.Resolve(dir, t.CA)
	}
}

// Check refuses a half-given pair and files that cannot be read, naming
// the field under prefix (such as "tls" or "switches[0].tls"); server
// says whether Cert and Key are required.
func (t *TLS) Check(prefix string, server bool) error {
	if !t.Enabled() {
		return nil
	}
	if (t.Cert == "") != (t.Key == "") {
		return fmt.Errorf("%s: give cert and key together (cert %q, key %q)", prefix, t.Cert, t.Key)
	}
	if server && t.Cert == "" {
		return fmt.Errorf("%s: a server needs cert and key (ca %q alone)", prefix, t.CA)
	}
	for _, f := range []struct{ field, path string }{{"cert", t.Cert}, {"key", t.Key}, {"ca", t.CA}} {
		if f.path == "" {
			continue
		}
		if _, err := os.Stat(f.path); err != nil {
			return fmt.Errorf("%s.%s: %s: %v", prefix, f.field, f.path, errors.Unwrap(err))
		}
	}
	return nil
}

func (t *TLS) pool() (*x509.CertPool, error) {
	if t.CA == "" {
		return nil, nil
	}
	b, err := os.ReadFile(t.CA)
	if err != nil {
		return nil, err
	}
	p := x509.NewCertPool()
	if !p.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("ca %s: no PEM certificate in it", t.CA)
	}
	return p, nil
}

// ServerCredentials is the server side; nil t or no files: plaintext.
func (t *TLS) ServerCredentials() (credentials.TransportCredentials, error) {
	if !t.Enabled() {
		return insecure.NewCredentials(), nil
	}
	cert, err := tls.LoadX509KeyPair(t.Cert, t.Key)
	if err != nil {
		return nil, fmt.Errorf("tls: cert %s, key %s: %w", t.Cert, t.Key, err)
	}
	cfg := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	if cfg.ClientCAs, err = t.pool(); err != nil {
		return nil, fmt.Errorf("tls: %w", err)
	}
	if cfg.ClientCAs != nil {
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return credentials.NewTLS(cfg), nil
}

// ClientCredentials is the client side; nil t or no files: plaintext.
func (t *TLS) ClientCredentials() (credentials.TransportCredentials, error) {
	if !t.Enabled() {
		return insecure.NewCredentials(), nil
	}
	cfg := &tls.Config{ServerName: t.ServerName, MinVersion: tls.VersionTLS12}
	var err error
	if cfg.RootCAs, err = t.pool(); err != nil {
		return nil, fmt.Errorf("tls: %w", err)
	}
	if t.Cert != "" {
		cert, err := tls.LoadX509KeyPair(t.Cert, t.Key)
		if err != nil {
			return nil, fmt.Errorf("tls: cert %s, key %s: %w", t.Cert, t.Key, err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return credentials.NewTLS(cfg), nil
}

// DialOption is ClientCredentials as a dial option.
func (t *TLS) DialOption() (grpc.DialOption, error) {
	c, err := t.ClientCredentials()
	if err != nil {
		return nil, err
	}
	return grpc.WithTransportCredentials(c), nil
}

// Loopback reports whether addr (host:port) listens on loopback only.
func Loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// ReadToken reads a bearer token file: its first line, which must not be
// empty.
func ReadToken(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	tok, _, _ := strings.Cut(string(b), "\n")
	if tok = strings.TrimSpace(tok); tok == "" {
		return "", fmt.Errorf("%s: empty token", path)
	}
	return tok, nil
}

// Bearer sends a token with every call, as "authorization: Bearer T".
type Bearer string

// GetRequestMetadata implements credentials.PerRPCCredentials.
func (b Bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(b)}, nil
}

// RequireTransportSecurity is false: plaintext on loopback is allowed
// (the token then guards against mistakes, not against eavesdroppers).
func (Bearer) RequireTransportSecurity() bool { return false }

// RequireToken refuses, with Unauthenticated, a unary call whose method
// guarded says needs the token and that does not carry it.
func RequireToken(token string, guarded func(fullMethod string) bool) grpc.UnaryServerInterceptor {
	want := []byte("Bearer " + token)
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		if !guarded(info.FullMethod) {
			return h(ctx, req)
		}
		md, _ := metadata.FromIncomingContext(ctx)
		got := md.Get("authorization")
		if len(got) == 0 {
			return nil, status.Errorf(codes.Unauthenticated, "%s changes state and needs the API token (netdir ctl --token-file)", info.FullMethod)
		}
		if subtle.ConstantTimeCompare([]byte(got[0]), want) != 1 {
			return nil, status.Errorf(codes.Unauthenticated, "%s: wrong API token", info.FullMethod)
		}
		return h(ctx, req)
	}
}

// HandshakeFailed reports whether err is a gRPC call's failure to set up
// TLS with its peer (a certificate its CA did not sign, plaintext against
// TLS): a misconfiguration that no retry fixes.
func HandshakeFailed(err error) bool {
	st, ok := status.FromError(err)
	return ok && st.Code() == codes.Unavailable && strings.Contains(st.Message(), "authentication handshake failed")
}
