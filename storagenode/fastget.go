package storagenode

import (
	"github.com/netdir/netdir/internal/udpbatch"
	"github.com/netdir/netdir/wire"
)

// fastGet serves GETs beside their keys' shards, with no allocation: the
// record is read from Pebble (its memtable, block cache or device) without
// copying, and the reply is built in a buffer of its own. It serves on the
// goroutine that receives a GET, the reply leaving with the rest of the
// batch's in one sendmmsg, when no client request waits in admission;
// otherwise on a reader of admission's read pool, once admission (MaxOps's
// bucket, the emulated processor device.CPU, QoS's queues) releases it.
//
// It serves what needs no per-key state: a clean record (or, at the tail,
// the latest) and an extra copy the data plane vouched for (no
// wire.FlagVerify). Reading beside the key's shard is safe: Pebble's Get
// sees a whole record, and the shard stores a version before anything
// about it is acknowledged, so the read linearizes at the Get.
// Everything else goes to the shard: a dirty record (the tail must be
// asked), a node not yet recovered, and any request that is answered with
// an error.
type fastGet struct {
	n   *Node
	tx  *udpbatch.Writer
	out [][]byte // reply buffers, one per datagram of a batch
	kb  []byte   // the record's Pebble key
}

// newFastGet is a fastGet whose replies leave in batches of up to batch.
func newFastGet(n *Node, batch int) *fastGet {
	return &fastGet{n: n, tx: udpbatch.NewWriter(n.conn, n.v4, batch), out: make([][]byte, batch),
		kb: make([]byte, 0, 5+wire.MaxKey)}
}

// serve answers b, from from, if it is a GET that needs no shard, and
// reports whether it did.
func (g *fastGet) serve(b []byte, from udpbatch.Peer) bool {
	n := g.n
	if wire.Frame(b).Check() != nil || wire.Frame(b).Op() != wire.OpGet || !n.ready.Load() {
		return false
	}
	var p wire.NodePacket
	if p.Decode(b) != nil || n.checkShape(&p) != wire.CodeOK {
		return false
	}
	// The KeyHash is not checked here (SHAKE128 of the key, a tenth of a
	// GET's CPU): an extra copy is found by hash and key together, as the
	// head sent it, and a record only under the partition of the key's own
	// hash (every write was checked), so a GET whose hash is wrong finds
	// nothing and goes to the shard, which checks it and answers
	// HashMismatch. A wrong hash of the right partition reads the key's own
	// record; the reply echoes that hash, which no data plane keys anything
	// on for a GET reply (directory.reply learns the node's load only).
	part, ch, pos := n.where(p.KeyHash)
	if pos >= 0 && !n.serves(part) {
		return false // the shard answers unavailable
	}
	var v version
	if pos < 0 {
		var ok bool
		if v, ok = n.copies.held(p.KeyHash, p.Key); !ok || p.Flags&wire.FlagVerify != 0 {
			return false // a verified read asks the tail, on the shard
		}
		n.ctr.extraGets.Add(1)
		g.reply(&p, &v, from)
		return true
	}
	rec, closer, err := n.treeOf(part).viewRecord(part, p.Key, g.kb[:0])
	if err != nil {
		return false
	}
	if closer != nil {
		defer closer.Close()
	}
	tail := pos == len(ch)-1
	if rec.Clean.Ver == 0 && len(rec.Dirty) == 0 || len(rec.Dirty) != 0 && !tail {
		return false // none (the shard checks the hash), or dirty
	}
	v = rec.Clean
	if tail {
		v = *rec.Latest()
	}
	g.reply(&p, &v, from)
	return true
}

// reply queues p's GET reply carrying v, and counts the GET.
func (g *fastGet) reply(p *wire.NodePacket, v *version, to udpbatch.Peer) {
	n := g.n
	n.ctr.countKey(p.Key)
	n.ctr.gets.Add(1)
	if g.tx.Full() {
		g.flush()
	}
	i := g.tx.Len()
	g.out[i] = n.appendReply(g.out[i][:0], &p.Header, wire.OpGetReply, readCode(v), v.Ver, v.Val)
	g.tx.AddPeer(g.out[i], to)
}

// flush sends the replies queued.
func (g *fastGet) flush() {
	if g.tx.Len() == 0 {
		return
	}
	sent := g.tx.Sent
	g.tx.Flush()
	g.n.ctr.txPackets.Add(g.tx.Sent - sent)
}
