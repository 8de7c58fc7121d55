package cluster

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/netip"

	p4 "github.com/p4lang/p4runtime/go/p4/v1"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc"

	"github.com/netdir/netdir/directory"
	"github.com/netdir/netdir/internal/grpcsec"
	"github.com/netdir/netdir/layout"
	"github.com/netdir/netdir/model"
	"github.com/netdir/netdir/model/p4rtserver"
)

// SwitchConfig is one software data plane (`netdir switch`).
type SwitchConfig struct {
	Listen    string // UDP service address
	Directory directory.Config
	// Layout, if set, gives the switch its nodes and every partition's
	// chain, until a controller reprograms it; Directory.PartitionBits
	// default to its.
	Layout *layout.Map
	// Nodes are the node addresses the switch forwards to, if not the
	// layout's (the cluster's switch reaches the nodes' own sockets, not
	// their fault proxies).
	Nodes []model.Node
	// P4Runtime serves the switch's P4Runtime target here for a controller
	// (port 0 picks one; empty: none), as device DeviceID (default 1).
	P4Runtime string
	DeviceID  uint64
	// P4RuntimeTLS secures the P4Runtime server (cert and key; with ca,
	// the controller must present a certificate it signed). nil:
	// plaintext, as a controller on loopback expects by default.
	P4RuntimeTLS *grpcsec.TLS
	// Metrics serves the switch's Prometheus metrics (model.Collector) on
	// this HTTP address; empty: none.
	Metrics string
	// Mirror, if valid, gets a copy of every datagram the switch receives
	// (model.AppendMirror): `netdir capture --mirror` writes them as pcapng.
	Mirror netip.AddrPort
}

// Switch is a running software data plane and its P4Runtime server.
type Switch struct {
	*model.Switch
	gs      *grpc.Server
	p4rt    net.Addr
	metrics *http.Server
	done    chan struct{}
	err     error // Run's, once done is closed
}

// StartSwitch starts the switch; it serves until Close.
func StartSwitch(cfg SwitchConfig) (*Switch, error) {
	if cfg.Layout != nil {
		if cfg.Nodes == nil {
			cfg.Nodes = model.NodesOf(cfg.Layout)
		}
		if cfg.Directory.PartitionBits == 0 {
			cfg.Directory.PartitionBits = cfg.Layout.Bits()
		}
	}
	sw, err := model.New(model.Config{Listen: cfg.Listen, Nodes: cfg.Nodes, Directory: cfg.Directory, Mirror: cfg.Mirror})
	if err != nil {
		return nil, err
	}
	if cfg.Layout != nil {
		if err := directory.InstallLayout(sw, cfg.Layout); err != nil {
			sw.Close()
			return nil, err
		}
	}
	s := &Switch{Switch: sw, done: make(chan struct{})}
	go func() {
		s.err = sw.Run(context.Background())
		close(s.done)
	}()
	if cfg.P4Runtime != "" {
		lis, err := net.Listen("tcp", cfg.P4Runtime)
		if err != nil {
			s.Close()
			return nil, fmt.Errorf("P4Runtime: %w", err)
		}
		if cfg.DeviceID == 0 {
			cfg.DeviceID = 1
		}
		creds, err := cfg.P4RuntimeTLS.ServerCredentials()
		if err != nil {
			lis.Close()
			s.Close()
			return nil, fmt.Errorf("P4Runtime: %w", err)
		}
		s.gs = grpc.NewServer(grpc.Creds(creds))
		p4.RegisterP4RuntimeServer(s.gs, p4rtserver.New(cfg.DeviceID, model.NewP4Target(sw)))
		s.p4rt = lis.Addr()
		go s.gs.Serve(lis)
	}
	if cfg.Metrics != "" {
		reg := prometheus.NewRegistry()
		reg.MustRegister(model.NewCollector(sw))
		lis, err := net.Listen("tcp", cfg.Metrics)
		if err != nil {
			s.Close()
			return nil, fmt.Errorf("switch metrics: %w", err)
		}
		s.metrics = &http.Server{Handler: promhttp.HandlerFor(reg, promhttp.HandlerOpts{})}
		go s.metrics.Serve(lis)
	}
	return s, nil
}

// P4RuntimeAddr is where the P4Runtime server listens ("" without one).
func (s *Switch) P4RuntimeAddr() string {
	if s.p4rt == nil {
		return ""
	}
	return s.p4rt.String()
}

// Done is closed when the data plane stops (Close, or a receive error:
// Err).
func (s *Switch) Done() <-chan struct{} { return s.done }

// Err is why the data plane stopped (nil after Close); call it after Done.
func (s *Switch) Err() error { return s.err }

// Close stops the P4Runtime server and the data plane.
func (s *Switch) Close() error {
	if s.gs != nil {
		s.gs.Stop()
	}
	if s.metrics != nil {
		s.metrics.Close()
	}
	s.Switch.Close()
	<-s.done
	return s.err
}
