package storagenode

import (
	"net/netip"
	"slices"

	"github.com/netdir/netdir/nodeauth"
	"github.com/netdir/netdir/wire"
)

// openNodeOp admits node op b from from, or drops it (counted). Its sender
// (the header's node) must be in the layout at from's IP address, or be a
// controller (node 0) asking a control op; with a cluster key its trailer
// must verify, with a counter not seen before (nodeauth.Auth.Open). It
// returns b without the trailer. Only ops admitted here reach the
// handlers, so only they feed heardEpoch: a forged op with a huge epoch
// cannot stop the node serving.
func (n *Node) openNodeOp(b []byte, from netip.AddrPort) ([]byte, bool) {
	f := wire.Frame(b)
	if !knownSender(n.layout().Addr, f.Node(), f.Op(), from) {
		n.ctr.unknownSender.Add(1)
		return nil, false
	}
	if n.auth == nil {
		return b, true
	}
	body, v := n.auth.Open(b, f.Node(), from)
	return body, v == nodeauth.OK
}

// knownSender reports whether node op op may come from sender at from:
// a node at its layout address (the IP: a node may send from another port
// than it listens on, through a proxy say), or a controller, which is not
// in the layout and sends as node 0, asking a control op.
func knownSender(addrOf func(wire.NodeID) (netip.AddrPort, bool), sender wire.NodeID, op wire.Op, from netip.AddrPort) bool {
	if sender == 0 {
		return op == wire.OpPromote || op == wire.OpDemote || op == wire.OpStats
	}
	a, ok := addrOf(sender)
	return ok && a.Addr().Unmap() == from.Addr().Unmap()
}

// sealNodeOp appends the trailer to b if it is a node op and the node has
// a cluster key, without touching b's spare capacity (b may be resent).
func (n *Node) sealNodeOp(b []byte) []byte {
	if n.auth == nil || !isNodeOp(b) {
		return b
	}
	return n.auth.Seal(slices.Clip(b))
}

// isNodeOp reports whether b, a packet to send, is a node op, which a
// cluster key seals.
func isNodeOp(b []byte) bool { return len(b) >= wire.HeaderLen && wire.Frame(b).Op().IsNodeOp() }

// NodeOpDrops counts the node ops this node refused, by reason.
func (n *Node) NodeOpDrops() nodeauth.Drops {
	var d nodeauth.Drops
	if n.auth != nil {
		d = n.auth.Drops()
	}
	d.UnknownSender += n.ctr.unknownSender.Load()
	return d
}
