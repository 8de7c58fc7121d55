package main

import (
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/netdir/netdir/api"
	"github.com/netdir/netdir/controller"
)

// ctlCmd is `netdir ctl`: the controller's admin client.
func ctlCmd() *cobra.Command {
	var addr string
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "ctl",
		Short: "Administer a running controller over its gRPC API",
	}
	cmd.PersistentFlags().StringVar(&addr, "controller", "127.0.0.1:7400",
		"controller API address, or a comma list of a replicated controller's (the leader answers)")
	cmd.PersistentFlags().DurationVar(&timeout, "timeout", 5*time.Second, "per-call timeout, finding the leader included")
	// leader is the controller that answered the last call.
	var leader string
	call := func(f func(ctx context.Context, c api.ControllerClient) error) error {
		cs, err := controller.DialControllers(parseList(addr), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return err
		}
		defer cs.Close()
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		if err := cs.Call(ctx, f); err != nil {
			return err
		}
		leader = cs.Current()
		return nil
	}
	cmd.AddCommand(
		&cobra.Command{
			Use: "status", Short: "Show the controller's state", Args: cobra.NoArgs,
			RunE: func(cmd *cobra.Command, _ []string) error {
				var s *api.StatusResponse
				err := call(func(ctx context.Context, c api.ControllerClient) (err error) {
					s, err = c.Status(ctx, &api.StatusRequest{})
					return err
				})
				if err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "controller %s (the leader)\nepoch %d, %d nodes, directory %d/%d, %d hot-key rounds\nswitches: %s\n",
					leader, s.GetEpoch(), s.GetNodes(), s.GetDirectorySize(), s.GetDirectoryCapacity(), s.GetRounds(),
					strings.Join(s.GetSwitches(), ", "))
				return nil
			},
		},
		&cobra.Command{
			Use: "dir", Short: "List the directory", Args: cobra.NoArgs,
			RunE: func(cmd *cobra.Command, _ []string) error {
				return call(func(ctx context.Context, c api.ControllerClient) error {
					r, err := c.ListDirectory(ctx, &api.ListDirectoryRequest{})
					if err != nil {
						return err
					}
					printEntries(cmd.OutOrStdout(), r.GetEntries())
					return nil
				})
			},
		},
		&cobra.Command{
			Use: "pin KEY", Short: "Promote a key now and keep it in the directory", Args: cobra.ExactArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error {
				return call(func(ctx context.Context, c api.ControllerClient) error {
					r, err := c.Pin(ctx, &api.PinRequest{Key: []byte(args[0])})
					if err != nil {
						return err
					}
					printEntries(cmd.OutOrStdout(), []*api.DirectoryEntry{r.GetEntry()})
					return nil
				})
			},
		},
		&cobra.Command{
			Use: "unpin KEY", Short: "Evict a key from the directory", Args: cobra.ExactArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error {
				return call(func(ctx context.Context, c api.ControllerClient) error {
					_, err := c.Unpin(ctx, &api.PinRequest{Key: []byte(args[0])})
					return err
				})
			},
		},
		&cobra.Command{
			Use: "layout", Short: "Print the cluster layout as YAML (netdir node --config reads it)", Args: cobra.NoArgs,
			RunE: func(cmd *cobra.Command, _ []string) error {
				return call(func(ctx context.Context, c api.ControllerClient) error {
					r, err := c.GetLayout(ctx, &api.GetLayoutRequest{})
					if err != nil {
						return err
					}
					_, err = io.WriteString(cmd.OutOrStdout(), r.GetYaml())
					return err
				})
			},
		},
		&cobra.Command{
			Use: "partitions", Short: "Show the partition map", Args: cobra.NoArgs,
			RunE: func(cmd *cobra.Command, _ []string) error {
				return call(func(ctx context.Context, c api.ControllerClient) error {
					r, err := c.ListPartitions(ctx, &api.ListPartitionsRequest{})
					if err != nil {
						return err
					}
					w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
					fmt.Fprintf(w, "epoch %d\npartition\tchain\n", r.GetEpoch())
					for _, p := range r.GetPartitions() {
						fmt.Fprintf(w, "%d\t%s\n", p.GetIndex(), joinU32(p.GetChain()))
					}
					return w.Flush()
				})
			},
		},
		&cobra.Command{
			Use:   "weights (partition N | key KEY) W1 W2 ...",
			Short: "Set split weights over a partition's chain or a hot key's locations",
			Args:  cobra.MinimumNArgs(3),
			RunE: func(cmd *cobra.Command, args []string) error {
				req := &api.SetWeightsRequest{}
				switch args[0] {
				case "partition":
					p, err := strconv.ParseUint(args[1], 10, 32)
					if err != nil {
						return fmt.Errorf("partition %q: %v", args[1], err)
					}
					req.Target = &api.SetWeightsRequest_Partition{Partition: uint32(p)}
				case "key":
					req.Target = &api.SetWeightsRequest_Key{Key: []byte(args[1])}
				default:
					return fmt.Errorf("weights: say `partition N` or `key KEY`, not %q", args[0])
				}
				for _, s := range args[2:] {
					w, err := strconv.ParseUint(s, 10, 32)
					if err != nil {
						return fmt.Errorf("weight %q: %v", s, err)
					}
					req.Weights = append(req.Weights, uint32(w))
				}
				return call(func(ctx context.Context, c api.ControllerClient) error {
					_, err := c.SetWeights(ctx, req)
					return err
				})
			},
		},
	)
	return cmd
}

func joinU32(xs []uint32) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = strconv.FormatUint(uint64(x), 10)
	}
	return strings.Join(s, ",")
}

func printEntries(out io.Writer, es []*api.DirectoryEntry) {
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "key\thash\tchain\textras\thits\tpinned")
	for _, e := range es {
		locs := e.GetLocations()
		r := min(int(e.GetChainLength()), len(locs))
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%d\t%v\n", e.GetKey(), hex.EncodeToString(e.GetKeyHash())[:8],
			joinU32(locs[:r]), joinU32(locs[r:]), e.GetHits(), e.GetPinned())
	}
	w.Flush()
}
