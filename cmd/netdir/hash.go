package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/netdir/netdir/wire"
)

func hashCmd() *cobra.Command {
	var bits uint
	cmd := &cobra.Command{
		Use:   "hash KEY...",
		Short: "Print each key's KeyHash and partition",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if bits > 20 {
				return fmt.Errorf("--partition-bits %d: at most 20", bits)
			}
			for _, k := range args {
				h := wire.HashKey([]byte(k))
				fmt.Fprintf(cmd.OutOrStdout(), "%s\t%s\tpartition=%d\n", k, h, h.Partition(bits))
			}
			return nil
		},
	}
	cmd.Flags().UintVar(&bits, "partition-bits", 10, "log2 of the partition count")
	return cmd
}
