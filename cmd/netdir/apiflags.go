package main

import (
	"os"

	"github.com/spf13/pflag"
	"google.golang.org/grpc"

	"github.com/netdir/netdir/internal/grpcsec"
)

// tokenEnv holds the API token for netdir ctl when --token-file is not
// given.
const tokenEnv = "NETDIR_API_TOKEN"

// apiFlags are how a command reaches the controller's API: TLS (the CA
// that signed the controller's certificate, and a client certificate for a
// controller that asks for one) and, for ctl, the token of the calls that
// change state.
type apiFlags struct {
	tls       grpcsec.TLS
	tokenFile string
	prefix    string
}

// register adds the flags, their names after prefix ("" for ctl,
// "controller-" for nodes and switches); withToken adds --token-file.
func (f *apiFlags) register(fs *pflag.FlagSet, prefix string, withToken bool) {
	f.prefix = prefix
	fs.StringVar(&f.tls.CA, prefix+"ca", "", "CA that signed the controller API's certificate (PEM): TLS (empty: plaintext)")
	fs.StringVar(&f.tls.Cert, prefix+"cert", "", "client certificate (PEM), for a controller that asks for one")
	fs.StringVar(&f.tls.Key, prefix+"key", "", "the client certificate's key (PEM)")
	fs.StringVar(&f.tls.ServerName, prefix+"server-name", "", "name on the controller's certificate (default: the host dialled)")
	if withToken {
		fs.StringVar(&f.tokenFile, "token-file", "", "file holding the API token that calls changing state need (default: $"+tokenEnv+")")
	}
}

// dialOptions are the gRPC options of the flags.
func (f *apiFlags) dialOptions() ([]grpc.DialOption, error) {
	if err := f.tls.Check("--"+f.prefix+"ca/cert/key", false); err != nil {
		return nil, err
	}
	tlsOpt, err := f.tls.DialOption()
	if err != nil {
		return nil, err
	}
	opts := []grpc.DialOption{tlsOpt}
	tok := os.Getenv(tokenEnv)
	if f.tokenFile != "" {
		if tok, err = grpcsec.ReadToken(f.tokenFile); err != nil {
			return nil, err
		}
	}
	if tok != "" {
		opts = append(opts, grpc.WithPerRPCCredentials(grpcsec.Bearer(tok)))
	}
	return opts, nil
}
