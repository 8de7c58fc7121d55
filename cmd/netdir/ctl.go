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

	"github.com/netdir/netdir/api"
	"github.com/netdir/netdir/controller"
)

// ctlCmd is `netdir ctl`: the controller's admin client.
func ctlCmd() *cobra.Command {
	var addr string
	var timeout time.Duration
	var sec apiFlags
	cmd := &cobra.Command{
		Use:   "ctl",
		Short: "Administer a running controller over its gRPC API",
		Long: `Administer a running controller over its gRPC API.

A controller with tls: {cert, key} in its configuration speaks TLS: give
--ca (the CA that signed its certificate). One with api_token_file: refuses
the calls that change state (pin, unpin, weights, qos set and rm) without
that token: give --token-file, or set $` + tokenEnv + `. Reading needs no token.`,
	}
	cmd.PersistentFlags().StringVar(&addr, "controller", "127.0.0.1:7400",
		"controller API address, or a comma list of a replicated controller's (the leader answers)")
	cmd.PersistentFlags().DurationVar(&timeout, "timeout", 5*time.Second, "per-call timeout, finding the leader included")
	sec.register(cmd.PersistentFlags(), "", true)
	// leader is the controller that answered the last call.
	var leader string
	call := func(f func(ctx context.Context, c api.ControllerClient) error) error {
		opts, err := sec.dialOptions()
		if err != nil {
			return err
		}
		cs, err := controller.DialControllers(parseList(addr), opts...)
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
		qosCmd(call),
	)
	return cmd
}

// qosCmd is `netdir ctl qos`: tenants and their dmClock policies.
func qosCmd(call func(func(context.Context, api.ControllerClient) error) error) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "qos",
		Short: "Per-tenant QoS (dmClock): dump, set, get, rm",
		Long: `Per-tenant QoS. Every storage node schedules client requests per tenant with
dmClock: a reservation (ops/s guaranteed), a weight (share of the spare
capacity) and a limit (ops/s cap); a GET costs 1 op, a write 1 per 4 KiB
started. Tenants without their own policy run under the defaults; with no
defaults and no policies QoS is off and requests bypass the scheduler.

A tenant is a name registered at the controller with an id, which clients
stamp on their requests (client.Options.Tenant); "qos set NAME" registers a
new name. Policies are saved by the controller and reach the nodes within a
report interval.`,
	}
	target := func(c *cobra.Command, args []string, def bool) (string, error) {
		switch {
		case def && len(args) == 0:
			return "", nil
		case !def && len(args) == 1:
			return args[0], nil
		}
		return "", fmt.Errorf("%s: name a tenant or give --default", c.Name())
	}
	var def bool
	var p api.QoSPolicy
	var id uint32
	set := &cobra.Command{
		Use:   "set (NAME | --default) [--reservation R] [--weight W] [--limit L] [--id N]",
		Short: "Set a tenant's policy (registering the name) or the defaults; flags not given keep their value",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			name, err := target(cmd, args, def)
			if err != nil {
				return err
			}
			return call(func(ctx context.Context, c api.ControllerClient) error {
				pol := &api.QoSPolicy{Weight: 1}
				if cur, err := c.QoSGet(ctx, &api.QoSGetRequest{Tenant: name, Defaults: def}); err == nil && (def || !cur.GetIsDefault()) {
					pol = cur.GetPolicy()
				}
				f := cmd.Flags()
				if f.Changed("reservation") {
					pol.Reservation = p.Reservation
				}
				if f.Changed("weight") {
					pol.Weight = p.Weight
				}
				if f.Changed("limit") {
					pol.Limit = p.Limit
				}
				t, err := c.QoSSet(ctx, &api.QoSSetRequest{Tenant: name, Defaults: def, Policy: pol, Id: id})
				if err != nil {
					return err
				}
				printQoS(cmd.OutOrStdout(), t)
				return nil
			})
		},
	}
	set.Flags().BoolVar(&def, "default", false, "set the defaults instead of a tenant's policy")
	set.Flags().Float64Var(&p.Reservation, "reservation", 0, "guaranteed ops/s (0: none)")
	set.Flags().Float64Var(&p.Weight, "weight", 1, "share of the spare capacity (> 0)")
	set.Flags().Float64Var(&p.Limit, "limit", 0, "ops/s cap (0: none); not below the reservation")
	set.Flags().Uint32Var(&id, "id", 0, "a new tenant's id, 1-255 (0: the lowest free)")
	getOrRm := func(use, short string, f func(context.Context, api.ControllerClient, *api.QoSGetRequest, io.Writer) error) *cobra.Command {
		var def bool
		c := &cobra.Command{
			Use: use + " (NAME | --default)", Short: short, Args: cobra.MaximumNArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error {
				name, err := target(cmd, args, def)
				if err != nil {
					return err
				}
				return call(func(ctx context.Context, c api.ControllerClient) error {
					return f(ctx, c, &api.QoSGetRequest{Tenant: name, Defaults: def}, cmd.OutOrStdout())
				})
			},
		}
		c.Flags().BoolVar(&def, "default", false, "the defaults instead of a tenant")
		return c
	}
	cmd.AddCommand(
		&cobra.Command{
			Use: "dump", Short: "Show the defaults and every tenant: policy, queue, inflight, delay, throttles, clients", Args: cobra.NoArgs,
			RunE: func(cmd *cobra.Command, _ []string) error {
				return call(func(ctx context.Context, c api.ControllerClient) error {
					r, err := c.QoSDump(ctx, &api.QoSDumpRequest{})
					if err != nil {
						return err
					}
					printQoSDump(cmd.OutOrStdout(), r)
					return nil
				})
			},
		},
		set,
		getOrRm("get", "Show a tenant's policy in force, or the defaults",
			func(ctx context.Context, c api.ControllerClient, r *api.QoSGetRequest, out io.Writer) error {
				t, err := c.QoSGet(ctx, r)
				if err == nil {
					printQoS(out, t)
				}
				return err
			}),
		getOrRm("rm", "Put a tenant back under the defaults (it keeps its id), or drop the defaults",
			func(ctx context.Context, c api.ControllerClient, r *api.QoSGetRequest, _ io.Writer) error {
				_, err := c.QoSRemove(ctx, r)
				return err
			}),
	)
	return cmd
}

// rate prints an ops/s figure, "-" for none.
func rate(x float64) string {
	if x == 0 {
		return "-"
	}
	return strconv.FormatFloat(x, 'g', -1, 64)
}

func printQoS(out io.Writer, t *api.QoSTenant) {
	name := fmt.Sprintf("%s id %d", t.GetName(), t.GetId())
	if t.GetName() == "" {
		name = "defaults"
	}
	p := t.GetPolicy()
	fmt.Fprintf(out, "%s: reservation %s, weight %g, limit %s", name, rate(p.GetReservation()), p.GetWeight(), rate(p.GetLimit()))
	if t.GetIsDefault() && t.GetName() != "" {
		fmt.Fprint(out, " (defaults)")
	}
	fmt.Fprintln(out)
}

func printQoSDump(out io.Writer, r *api.QoSDumpResponse) {
	d := r.GetDefaults()
	src := "built in"
	if r.GetDefaultsSet() {
		src = "set"
	}
	fmt.Fprintf(out, "generation %d; defaults (%s): reservation %s, weight %g, limit %s\n", r.GetGeneration(), src,
		rate(d.GetReservation()), d.GetWeight(), rate(d.GetLimit()))
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "tenant\tid\treservation\tweight\tlimit\tdefault\tqueued\tinflight\tserved (res/wgt)\tmean delay\tthrottled\tclients")
	for _, t := range r.GetTenants() {
		p := t.GetPolicy()
		name := t.GetName()
		if name == "" {
			name = "?"
		}
		fmt.Fprintf(w, "%s\t%d\t%s\t%g\t%s\t%v\t%d\t%d\t%d/%d\t%v\t%d\t%s\n", name, t.GetId(),
			rate(p.GetReservation()), p.GetWeight(), rate(p.GetLimit()), t.GetIsDefault(), t.GetQueued(), t.GetInflight(),
			t.GetServedReservation(), t.GetServedWeight(),
			time.Duration(t.GetMeanDelayUs()*float64(time.Microsecond)).Round(time.Microsecond), t.GetThrottled(),
			strings.Join(t.GetClients(), ","))
	}
	w.Flush()
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
