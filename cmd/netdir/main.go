// Command netdir is the one CLI of netdir: the software data plane, storage
// nodes, the controller, the host agent, the demo and the bench.
package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"
)

func main() {
	root := &cobra.Command{
		Use:           "netdir",
		Short:         "In-network coherence directory for replicated key-value storage under skew",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(hashCmd())
	root.AddCommand(nodeCmd())
	root.AddCommand(switchCmd())
	root.AddCommand(ctlCmd())
	root.AddCommand(controllerCmd())
	root.AddCommand(kvCmds()...)
	root.AddCommand(agentCmd())
	root.AddCommand(demoCmd())
	root.AddCommand(benchCmd())
	root.AddCommand(simCmd())
	root.AddCommand(captureCmd())
	root.AddCommand(keygenCmd())
	if err := root.Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "netdir:", err)
		os.Exit(1)
	}
}
