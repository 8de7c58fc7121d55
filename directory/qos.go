package directory

import "github.com/netdir/netdir/wire"

// Global dmClock (issue 17): the data plane sees every request and reply, so
// it stamps each request's δ and ρ for its target node, which is what lets
// every node enforce a tenant's cluster-wide reservation and limit (Gulati et
// al., OSDI'10: δ is the tenant's completions at other nodes since its last
// request to this one, ρ the part of them served in the reservation phase).
//
// State is bounded as a switch's registers are: QoSTenants tenants by tenant
// id mod QoSTenants, and QoSNodes nodes by node id mod QoSNodes (one rack).
// Tenants (or nodes) that alias share counters: a tenant then sees the other's
// completions as its own, so its δ and ρ grow and its nodes charge it more
// than it used, never less. The controller's tenant registry hands out ids
// below QoSTenants, and a rack's node ids are distinct mod QoSNodes, so
// neither aliases in a configured cluster.
//
// Per tenant t the plane keeps the completions Done[t] and reservation-phase
// completions Res[t]; per (t, n) a mark, Done[t] less the completions at n
// since t's last request to n (and likewise for Res). A completion at n
// raises Done[t] and the mark of (t, n) alike; one elsewhere raises Done[t]
// only. So on a request to n, δ = Done[t] − mark is exactly the completions
// at other nodes since the last request, after which the mark is set to
// Done[t]. Every counter is 32 bits and wraps; the differences are modular, so
// δ is right as long as fewer than 2³² completions fall between two requests.
//
// A completion is a get, put or del reply whose node served it: code ok or
// not-found (an absent key is served like any read); reads and writes count
// one each. A reply flagged wire.FlagReservation counts into ρ as well. Only
// requests that the plane forwards are stamped; dropped ones stamp nothing
// and move no mark.
//
// A completion is charged to the node whose dmClock scheduled the request. A
// get's is the node that replies. A write is scheduled at its chain head but
// answered by the tail, so a put or del reply is charged to the head of the
// key's partition (a key without a chain falls back to the replying node):
// charged at the tail, the head would see its own writes again in δ and the
// tail would miss them.
const (
	QoSTenants = 256
	QoSNodes   = 32
)

// qosCounters is the data plane's dmClock state.
type qosCounters struct {
	done, res         [QoSTenants]uint32
	doneMark, resMark [QoSTenants * QoSNodes]uint32
}

// QoSIndex is the register index of (tenant, node): tenant mod QoSTenants
// times QoSNodes, plus node mod QoSNodes. P4 and eBPF index alike.
func QoSIndex(tenant uint16, n wire.NodeID) uint32 {
	return uint32(tenant%QoSTenants)*QoSNodes + uint32(n%QoSNodes)
}

// stamp writes δ and ρ into a request forwarded to node n and moves the
// tenant's marks at n.
func (q *qosCounters) stamp(f wire.Frame, n wire.NodeID) {
	t, i := f.Tenant()%QoSTenants, QoSIndex(f.Tenant(), n)
	f.SetDelta(q.done[t] - q.doneMark[i])
	f.SetRho(q.res[t] - q.resMark[i])
	q.doneMark[i], q.resMark[i] = q.done[t], q.res[t]
}

// complete counts reply f, if it is a completion, at node n, the node that
// scheduled its request.
func (q *qosCounters) complete(f wire.Frame, n wire.NodeID) {
	if c := f.Code(); c != wire.CodeOK && c != wire.CodeNotFound {
		return
	}
	t, i := f.Tenant()%QoSTenants, QoSIndex(f.Tenant(), n)
	q.done[t]++
	q.doneMark[i]++
	if f.Flags()&wire.FlagReservation != 0 {
		q.res[t]++
		q.resMark[i]++
	}
}
