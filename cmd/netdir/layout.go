package main

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/netdir/netdir/api"
	"github.com/netdir/netdir/controller"
	"github.com/netdir/netdir/layout"
)

// fetchTimeout bounds waiting for the controller's layout: a node or switch
// started beside its controller waits for it to come up.
const fetchTimeout = 30 * time.Second

// loadLayout reads the cluster layout from file or, without one, fetches it
// from the controller at ctlAddr. fileFlag names the file's flag in errors.
// opts dial the controller.
func loadLayout(ctx context.Context, fileFlag, file, ctlAddr string, opts ...grpc.DialOption) (*layout.Map, error) {
	switch {
	case file != "":
		return layout.Load(file)
	case ctlAddr != "":
		return fetchLayout(ctx, ctlAddr, opts...)
	}
	return nil, fmt.Errorf("no layout: give %s FILE, or --controller ADDR to fetch it from the controller", fileFlag)
}

// fetchLayout asks the controller at addr (a comma list: any of them) for
// its layout.
func fetchLayout(ctx context.Context, addr string, opts ...grpc.DialOption) (*layout.Map, error) {
	if len(opts) == 0 {
		opts = []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	}
	cs, err := controller.DialControllers(parseList(addr), opts...)
	if err != nil {
		return nil, err
	}
	defer cs.Close()
	ctx, cancel := context.WithTimeout(ctx, fetchTimeout)
	defer cancel()
	var r *api.GetLayoutResponse
	get := func(ctx context.Context, c api.ControllerClient) (err error) {
		r, err = c.GetLayout(ctx, &api.GetLayoutRequest{})
		return err
	}
	// A controller not up yet is waited for with one line said, not one
	// per try.
	start := time.Now()
	first, cancelFirst := context.WithTimeout(ctx, time.Second)
	err = cs.Call(first, get)
	cancelFirst()
	if err != nil && ctx.Err() == nil {
		slog.Warn("waiting for the controller's layout", "controller", addr, "up_to", fetchTimeout, "err", err)
		if err = cs.Call(ctx, get); err == nil {
			slog.Warn("controller reached", "controller", cs.Current(), "after", time.Since(start).Round(time.Millisecond))
		}
	}
	if err != nil {
		return nil, fmt.Errorf("layout from the controller: %w", err)
	}
	m, err := layout.Parse([]byte(r.GetYaml()))
	if err != nil {
		return nil, fmt.Errorf("layout from the controller at %s: %w", cs.Current(), err)
	}
	return m, nil
}
