package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/netdir/netdir/nodeauth"
)

func keygenCmd() *cobra.Command {
	var next bool
	cmd := &cobra.Command{
		Use:   "keygen",
		Short: "Print a new cluster key file (the MAC key of node ops)",
		Long: `Print a new cluster key file on stdout: a random 32-byte key, in hex, that
nodes seal node ops with (key:). With --next it also holds a second new key
(next:), which nodes accept as well: the file of a rotation's first step.

  netdir keygen > cluster.key && chmod 600 cluster.key

Give the file to every node and controller (--cluster-key-file, or
` + nodeauth.EnvKeyFile + `, or the controller YAML's cluster_key_file). A node
reloads it on SIGHUP and when it changes; docs/deployment.md has the rotation.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var n []byte
			if next {
				n = nodeauth.GenerateSecret()
			}
			_, err := fmt.Fprint(cmd.OutOrStdout(), string(nodeauth.FormatKeys(nodeauth.GenerateSecret(), n)))
			return err
		},
	}
	cmd.Flags().BoolVar(&next, "next", false, "add a second new key, accepted but not sealed with")
	return cmd
}
