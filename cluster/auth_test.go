package cluster_test

import (
	"context"
	"math/rand/v2"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/netdir/netdir/client"
	"github.com/netdir/netdir/cluster"
	"github.com/netdir/netdir/nodeauth"
	"github.com/netdir/netdir/wire"
)

// floodDatagrams is the size of TestForgedFlood's flood.
const floodDatagrams = 10000

// forgery is the i-th datagram of a flood at node ops about key: garbage,
// cut or malformed netdir packets, and node ops that are unsealed, sealed
// with another cluster's key, claim a sender not in the layout, carry a
// huge epoch, or replay one captured sealed op. None may change an answer.
func forgery(r *rand.Rand, i int, key []byte, from wire.NodeID, stranger *nodeauth.Auth, replay []byte) []byte {
	h := wire.HashKey(key)
	ops := []wire.Op{wire.OpChainWrite, wire.OpChainAck, wire.OpVerAnswer, wire.OpCopy, wire.OpCopyAck,
		wire.OpPromote, wire.OpDemote, wire.OpSync, wire.OpSyncData, wire.OpStats}
	hd := wire.Header{Op: ops[r.IntN(len(ops))], ReqID: r.Uint64(), KeyHash: h, Stamp: r.Uint64N(1 << 40), Node: from, Epoch: r.Uint32()}
	op := wire.AppendNodeOp(nil, &hd, key, []byte("forged"), nil)
	switch i % 7 {
	case 0: // garbage
		b := make([]byte, r.IntN(200))
		for j := range b {
			b[j] = byte(r.Uint32())
		}
		return b
	case 1: // cut
		return op[:r.IntN(len(op))]
	case 2: // lengths beyond the packet
		op[wire.HeaderLen] = 0xff
		return op
	case 3: // unsealed
		return op
	case 4: // another cluster's key
		return stranger.Seal(op)
	case 5: // a sender not in the layout
		hd.Node = 100 + wire.NodeID(r.IntN(100))
		return stranger.Seal(wire.AppendNodeOp(nil, &hd, key, nil, nil))
	}
	return replay
}

// TestForgedFlood: 10,000 malformed and forged datagrams at the nodes of a
// promoted key's chain and its extra, during a checked workload through the
// data plane, change no answer (Porcupine) and lose no write; the forged
// node ops are counted as refused.
func TestForgedFlood(t *testing.T) {
	c, err := cluster.Start(cluster.Options{N: 4, R: 3, Dir: t.TempDir(), Switch: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ctl, err := c.Client(client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer ctl.Close()
	hc := cluster.HistoryConfig{Clients: 4, OpsPer: 150, Keys: 3, Prefix: "flood", Seed: 19, Gets: 50, Puts: 40,
		OpTimeout: 3 * time.Second, Client: client.Options{Service: c.Service(), Timeout: 20 * time.Millisecond, MaxTimeout: 200 * time.Millisecond}}
	hot := []byte(hc.Key(0))
	ch := c.Layout.ChainOf(wire.HashKey(hot))
	var extra wire.NodeID
	for id := wire.NodeID(1); id <= 4; id++ {
		if !slices.Contains(ch, id) {
			extra = id
		}
	}
	if err := c.Promote(ctx, ctl, hot, []wire.NodeID{extra}); err != nil {
		t.Fatal(err)
	}
	targets := append([]wire.NodeID{extra}, ch...)

	sock, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer sock.Close()
	stranger := nodeauth.New(nodeauth.Keys{Seal: mustKey(t)}, nil)
	replay := c.NewAuth().Seal(wire.AppendNodeOp(nil, &wire.Header{Op: wire.OpStats, ReqID: 1}, nil, nil, nil))
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		r := rand.New(rand.NewPCG(19, 1))
		for i := range floodDatagrams {
			to := targets[i%len(targets)]
			a, _ := c.Layout.Addr(to)
			key := []byte(hc.Key(r.IntN(hc.Keys)))
			sock.WriteToUDPAddrPort(forgery(r, i, key, ch[r.IntN(len(ch))], stranger, replay), a)
			if i%50 == 49 {
				time.Sleep(time.Millisecond) // spread over the workload, within the sockets' buffers
			}
		}
	}()
	h, err := c.RunHistory(hc)
	if err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	checkHistory(t, h, "forged flood")
	lost, err := c.LostWrites(ctx, client.Options{}, h.Acked)
	if err != nil {
		t.Fatal(err)
	}
	if len(lost) > 0 {
		t.Fatalf("lost writes: %v", lost)
	}
	var refused nodeauth.Drops
	for _, id := range targets {
		d := c.Node(int(id) - 1).NodeOpDrops()
		refused.BadMAC += d.BadMAC
		refused.Replay += d.Replay
		refused.UnknownSender += d.UnknownSender
	}
	// Cut and garbage datagrams may not parse as node ops at all; the
	// forged ones (unsealed, foreign key, unknown sender, replays) must
	// all be counted, bar those the kernel dropped for full buffers.
	if got := refused.BadMAC + refused.Replay + refused.UnknownSender; got < floodDatagrams/2 {
		t.Errorf("%d forged node ops refused (%+v), want most of the %d sent", got, refused, floodDatagrams*4/7)
	}
	t.Logf("%d ops checked; refused %+v", len(h.Ops), refused)
}

// TestKeyRotationUnderLoad: the cluster key rotates, node by node and step
// by step (accept the next key; seal with it; retire the old one), while a
// checked workload runs. No node op is refused, no answer is wrong and no
// write is lost.
func TestKeyRotationUnderLoad(t *testing.T) {
	c, err := cluster.Start(cluster.Options{N: 3, R: 3, Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	old, next := c.Keys().Seal, mustKey(t)
	steps := []nodeauth.Keys{{Seal: old, Next: &next}, {Seal: next, Next: &old}, {Seal: next}}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for _, ks := range steps {
			for i := range c.N() {
				time.Sleep(40 * time.Millisecond) // the others still hold the step before
				c.Auth(i).SetKeys(ks)
			}
		}
	}()
	h, err := c.RunHistory(cluster.HistoryConfig{Clients: 4, OpsPer: 200, Keys: 4, Prefix: "rot", Seed: 7, Gets: 30, Puts: 60,
		OpTimeout: 3 * time.Second, Client: client.Options{Timeout: 20 * time.Millisecond, MaxTimeout: 200 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	<-done
	checkHistory(t, h, "key rotation")
	for _, op := range h.Ops {
		if op.Output.(cluster.KVOutput).Unknown {
			t.Fatalf("an operation failed during the rotation: %v", op.Input)
		}
	}
	lost, err := c.LostWrites(ctx, client.Options{}, h.Acked)
	if err != nil {
		t.Fatal(err)
	}
	if len(lost) > 0 {
		t.Fatalf("lost writes: %v", lost)
	}
	for i := range c.N() {
		if d := c.Node(i).NodeOpDrops(); d != (nodeauth.Drops{}) {
			t.Errorf("node %d refused node ops during the rotation: %+v", i+1, d)
		}
		if got := c.Auth(i).SealID(); got != next.ID {
			t.Errorf("node %d seals with key %x, want the new key %x", i+1, got, next.ID)
		}
	}
	t.Logf("%d ops checked across the rotation", len(h.Ops))
}

func mustKey(t *testing.T) nodeauth.Key {
	k, err := nodeauth.NewKey(nodeauth.GenerateSecret())
	if err != nil {
		t.Fatal(err)
	}
	return k
}
