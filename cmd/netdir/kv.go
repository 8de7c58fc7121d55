package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/netdir/netdir/client"
	"github.com/netdir/netdir/wire"
)

// kvCmds are `netdir get` and `netdir put`: a client at the command line.
func kvCmds() []*cobra.Command {
	var service string
	var repeat int
	var timeout time.Duration
	open := func() (*client.Client, error) {
		return client.New(client.Options{Service: service})
	}
	get := &cobra.Command{
		Use:   "get KEY",
		Short: "Read a key through the service address (the data plane)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := open()
			if err != nil {
				return err
			}
			defer c.Close()
			served := map[wire.NodeID]int{}
			var last *client.Result
			for i := 0; i < max(repeat, 1); i++ {
				ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
				r, err := c.GetResult(ctx, []byte(args[0]))
				cancel()
				if err != nil {
					return kvError("get", args[0], err)
				}
				served[r.Node]++
				last = r
			}
			if last.Code == wire.CodeNotFound {
				fmt.Fprintf(cmd.OutOrStdout(), "%s: not found (version %d)\n", args[0], last.Version)
			} else {
				fmt.Fprintf(cmd.OutOrStdout(), "%s = %q (version %d)\n", args[0], last.Value, last.Version)
			}
			if repeat > 1 {
				fmt.Fprintf(cmd.OutOrStdout(), "served by node: %v\n", served)
			}
			return nil
		},
	}
	put := &cobra.Command{
		Use:   "put KEY VALUE",
		Short: "Write a key through the service address (the data plane)",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := open()
			if err != nil {
				return err
			}
			defer c.Close()
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			v, err := c.Put(ctx, []byte(args[0]), []byte(args[1]))
			if err != nil {
				return kvError("put", args[0], err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s: version %d\n", args[0], v)
			return nil
		},
	}
	for _, c := range []*cobra.Command{get, put} {
		c.Flags().StringVar(&service, "service", fmt.Sprintf("127.0.0.1:%d", wire.ServicePort), "the data plane's service address")
		c.Flags().DurationVar(&timeout, "timeout", 5*time.Second, "per request, with retries")
	}
	get.Flags().IntVar(&repeat, "repeat", 1, "read this many times (at most 100000) and show which nodes served")
	get.PreRunE = func(*cobra.Command, []string) error {
		if repeat > 100000 {
			return fmt.Errorf("--repeat %d: at most 100000", repeat)
		}
		return nil
	}
	return []*cobra.Command{get, put}
}

// kvError names the command and key of an error that names what was
// tried, in place of the client's "netdir get:", which main's "netdir:"
// would repeat.
func kvError(op, key string, err error) error {
	var na *client.NoAnswerError
	if _, rest, ok := strings.Cut(err.Error(), ": "); ok && errors.As(err, &na) {
		return fmt.Errorf("%s %s: %s", op, key, rest)
	}
	return err
}
