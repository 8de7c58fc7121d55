package main

import (
	"github.com/spf13/cobra"

	"github.com/netdir/netdir/nicagent"
)

// agentCmd is `netdir agent`: the eBPF host agent (package nicagent).
func agentCmd() *cobra.Command { return nicagent.Command() }
