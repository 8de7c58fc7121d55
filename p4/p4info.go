// Package p4 holds netdir's P4_16 programs (include/, v1model/, tna/) and
// their generated outputs (build/). It embeds the P4Info, so that Go programs
// load it from any working directory: the demo and the bench program the
// software data plane with it over P4Runtime.
package p4

import _ "embed"

// P4Info is p4c's P4Info text proto of the v1model program,
// build/netdir.p4info.txtpb (scripts/p4-build.sh regenerates it).
//
//go:embed build/netdir.p4info.txtpb
var P4Info []byte
